"""Settings.from_env: aliases, defaults, validation (no database, no process environment)."""

from __future__ import annotations

import pytest

from nsj_queue_lib.config import Settings, parse_minutes
from nsj_queue_lib.exceptions import ConfigError

BASE = {
    "DB_HOST": "db.local", "DB_PORT": "5433", "DB_BASE": "base", "DB_USER": "u",
    "DB_PASS": "p", "QUEUE_NAME": "fila", "QUEUE_TABLE": "public.fila",
}


def settings(**env: str) -> Settings:
    values = dict(BASE)
    values.update(env)
    return Settings.from_env({k: v for k, v in values.items() if v is not None},
                             load_dotenv=False)


def without(*names: str) -> dict:
    return {k: v for k, v in BASE.items() if k not in names}


def test_db_variables():
    s = settings()
    assert (s.db_host, s.db_port, s.db_name, s.db_user, s.db_pass) == (
        "db.local", 5433, "base", "u", "p")
    assert isinstance(s.db_port, int)


def test_database_aliases():
    env = without("DB_HOST", "DB_PORT", "DB_BASE", "DB_USER", "DB_PASS")
    env.update({"DATABASE_HOST": "h2", "DATABASE_PORT": "6000", "DATABASE_NAME": "n2",
                "DATABASE_USER": "u2", "DATABASE_PASS": "p2", "DATABASE_DRIVER": "mysql"})
    s = Settings.from_env(env, load_dotenv=False)
    assert (s.db_host, s.db_port, s.db_name, s.db_user, s.db_pass, s.db_driver) == (
        "h2", 6000, "n2", "u2", "p2", "MYSQL")


def test_primary_name_wins_over_alias():
    s = settings(DATABASE_HOST="alias")
    assert s.db_host == "db.local"


def test_empty_primary_falls_back_to_alias():
    s = settings(DB_HOST="", DATABASE_HOST="alias")
    assert s.db_host == "alias"


def test_empty_db_pass_is_valid():
    assert settings(DB_PASS="").db_pass == ""
    assert Settings.from_env(without("DB_PASS"), load_dotenv=False).db_pass == ""


def test_db_driver_defaults_to_postgres_and_is_validated():
    assert settings().db_driver == "POSTGRES"
    assert settings(DB_DRIVER="single_store").db_driver == "SINGLE_STORE"
    with pytest.raises(ConfigError, match="DB_DRIVER"):
        settings(DB_DRIVER="ORACLE")


def test_db_mysql_driver_defaults_to_pymysql_and_is_validated():
    # pymysql by default, as 1.2.2: mysqlclient installed for other reasons (Django) must
    # not change the exceptions and cursors a task's code sees.
    assert settings().db_mysql_driver == "pymysql"
    assert settings(DB_MYSQL_DRIVER="auto").db_mysql_driver == "auto"
    assert settings(DB_MYSQL_DRIVER=" MySQLClient ").db_mysql_driver == "mysqlclient"
    with pytest.raises(ConfigError, match=r"DB_MYSQL_DRIVER.*auto, pymysql, mysqlclient"):
        settings(DB_MYSQL_DRIVER="connector")


def test_missing_required_variables_are_all_named():
    with pytest.raises(ConfigError) as exc:
        Settings.from_env({}, load_dotenv=False)
    text = str(exc.value)
    for name in ("DB_HOST", "DB_PORT", "DB_BASE", "DB_USER", "QUEUE_NAME", "QUEUE_TABLE"):
        assert name in text
    assert "DB_PASS" not in text


def test_require_selects_groups():
    s = Settings.from_env(without("QUEUE_NAME", "QUEUE_TABLE"), load_dotenv=False,
                          require=("db",))
    assert s.queue_name is None


def test_defaults_of_the_readme():
    s = settings()
    assert s.queue_max_retry == 100
    assert s.queue_base_interval_retry == 5
    assert s.queue_purge_max_age == 60
    assert s.queue_purge_limit == 1000
    assert s.queue_wait_notify_interval == 30
    assert s.default_webhook_timeout == 20
    assert s.queue_minute_retry_thread == frozenset(range(0, 60, 5))
    assert s.queue_minute_notify_thread == frozenset(range(0, 60, 5))
    assert s.queue_minute_purge_thread == frozenset({0})
    assert s.env == "DEV"
    assert s.log_debug is False
    assert s.client_server_mode is False
    assert s.queue_subscriber_table is None


def test_wait_notify_interval_has_its_own_variable():
    assert settings(QUEUE_PURGE_LIMIT="1000").queue_wait_notify_interval == 30
    s = settings(QUEUE_WAIT_NOTIFY_INTERVAL="7", QUEUE_PURGE_LIMIT="1000")
    assert s.queue_wait_notify_interval == 7
    assert s.queue_purge_limit == 1000
    assert settings(QUEUE_WAIT_NOTIFY_INTERVAL="0.5").queue_wait_notify_interval == 0.5


@pytest.mark.parametrize("name,value", [
    ("DB_PORT", "cinco"), ("DB_PORT", "70000"), ("QUEUE_MAX_RETRY", "abc"),
    ("QUEUE_MAX_RETRY", "0"), ("QUEUE_PURGE_LIMIT", "1.5"), ("QUEUE_PURGE_MAX_AGE", "-1"),
    ("QUEUE_WAIT_NOTIFY_INTERVAL", "x"), ("QUEUE_MINUTE_PURGE_THREAD", "61"),
    ("LOG_DEBUG", "talvez"), ("QUEUE_NAME", "fila-x"), ("QUEUE_TABLE", "a.b.c"),
])
def test_invalid_values_are_named_in_the_error(name, value):
    with pytest.raises(ConfigError) as exc:
        settings(**{name: value})
    assert f"{name}='{value}' inválida" in str(exc.value)
    # What is accepted, in Portuguese; never Python's own wording.
    for internal in ("invalid literal", "could not convert", "base 10", "float"):
        assert internal not in str(exc.value)


@pytest.mark.parametrize("name,value,accepted", [
    ("QUEUE_MAX_RETRY", "abc", "use um número inteiro maior que zero"),
    ("QUEUE_PURGE_LIMIT", "1.5", "use um número inteiro maior que zero"),
    ("DB_PORT", "cinco", "use um número inteiro de 1 a 65535"),
    ("QUEUE_WAIT_NOTIFY_INTERVAL", "x", "use um número maior que zero"),
    ("QUEUE_BASE_INTERVAL_RETRY", "-1", "use um número maior ou igual a zero"),
    ("QUEUE_MINUTE_RETRY_THREAD", "0,61", "use minutos de 0 a 59"),
    ("LOG_DEBUG", "talvez", "use true ou false"),
    ("DB_DRIVER", "oracle", "use um de POSTGRES, MYSQL, SINGLE_STORE"),
])
def test_invalid_values_say_what_is_accepted(name, value, accepted):
    with pytest.raises(ConfigError) as exc:
        settings(**{name: value})
    assert f"variável {name}='{value}' inválida: " in str(exc.value)
    assert accepted in str(exc.value)


def test_invalid_alias_value_is_reported():
    env = without("DB_PORT")
    env["DATABASE_PORT"] = "porta"
    with pytest.raises(ConfigError, match="DATABASE_PORT='porta' inválida"):
        Settings.from_env(env, load_dotenv=False)


def test_several_problems_reported_together():
    with pytest.raises(ConfigError) as exc:
        settings(QUEUE_MAX_RETRY="x", QUEUE_PURGE_LIMIT="y")
    assert "QUEUE_MAX_RETRY" in str(exc.value)
    assert "QUEUE_PURGE_LIMIT" in str(exc.value)


def test_booleans_and_env():
    s = settings(LOG_DEBUG="TRUE", CLIENT_SERVER_MODE="true", MULTI_DATABASE="false",
                 ENV="prod")
    assert (s.log_debug, s.client_server_mode, s.multi_database, s.env) == (
        True, True, False, "PROD")


def test_table_names():
    assert settings(QUEUE_TABLE="fila").queue_table == "fila"
    assert settings(QUEUE_SUBSCRIBER_TABLE="s.fila_subscriber").queue_subscriber_table == (
        "s.fila_subscriber")
    with pytest.raises(ConfigError, match="QUEUE_TABLE"):
        settings(QUEUE_TABLE="public.fila; drop table x")


def test_from_env_does_not_read_process_environment_when_given_a_mapping(monkeypatch):
    monkeypatch.setenv("QUEUE_MAX_RETRY", "7")
    assert settings().queue_max_retry == 100


def test_parse_minutes():
    assert parse_minutes("0,15, 30") == frozenset({0, 15, 30})
    assert parse_minutes("*") == frozenset(range(60))
    for bad in ("", "60", "a", "5,,10", "-1"):
        with pytest.raises(ValueError):
            parse_minutes(bad)


def test_names_follow_the_database_rules():
    """PostgreSQL folds unquoted names and keeps quoted ones; control characters never pass."""
    s = settings(QUEUE_TABLE="public.Fila_Teste", QUEUE_NAME="Fila_Teste",
                 QUEUE_SUBSCRIBER_TABLE='public."Fila_Teste_subscriber"')
    assert (s.queue_table, s.queue_name, s.queue_subscriber_table) == (
        "public.fila_teste", "fila_teste", "public.Fila_Teste_subscriber")
    assert settings(QUEUE_TABLE='"Vendas"."Fila"').queue_table == "Vendas.Fila"
    # MySQL keeps the case of unquoted names too.
    assert settings(DB_DRIVER="MYSQL", QUEUE_TABLE="db.Fila").queue_table == "db.Fila"
    for var, bad in (("QUEUE_TABLE", "public.fila\n"), ("QUEUE_NAME", "fila\n"),
                     ("QUEUE_TABLE", "fi\tla"), ("QUEUE_SUBSCRIBER_TABLE", '"a\x00b"'),
                     ("QUEUE_TABLE", '"a.b"'), ("QUEUE_TABLE", "a.b.c")):
        with pytest.raises(ConfigError, match=var):
            settings(**{var: bad})


def test_secrets_stay_out_of_the_settings_repr():
    # Fails before the fix: repr(Settings) (tracebacks, test reports, a log line with the
    # settings) showed the database password and every token.
    secrets = {"DB_PASS": "senha-db-7c1f", "SERVER_AUTH_TOKEN": "token-srv-90ab",
               "SERVER_PRODUCER_TOKEN": "token-prod-33de", "DASHBOARD_TOKEN": "token-painel-5e",
               "MULTI_DATABASE_PASSWORD": "senha-multi-12",
               "GRAFANA_URL": "https://loki:senha-loki-8d@loki.exemplo/push"}
    s = Settings.from_env({**BASE, **secrets}, load_dotenv=False)
    shown = repr(s)
    for value in secrets.values():
        assert value not in shown, value
    assert "db_host=" in shown and "queue_table=" in shown  # the rest is still shown
    assert s.db_pass == "senha-db-7c1f" and s.server_auth_token == "token-srv-90ab"


@pytest.mark.parametrize("value", ["1.5", "0", "-3"])
def test_breaker_cooldowns_are_whole_positive_seconds(value):
    for name in ("WEBHOOK_BREAKER_COOLDOWN", "WEBHOOK_BREAKER_MAX_COOLDOWN"):
        with pytest.raises(ConfigError) as exc:
            settings(**{name: value})
        assert f"variável {name}='{value}' inválida: " in str(exc.value)
        assert "inteiro de segundos" in str(exc.value)


def test_breaker_max_cooldown_below_the_cooldown_is_refused():
    with pytest.raises(ConfigError) as exc:
        settings(WEBHOOK_BREAKER_COOLDOWN="60", WEBHOOK_BREAKER_MAX_COOLDOWN="30")
    assert "WEBHOOK_BREAKER_MAX_COOLDOWN (30 s) menor que WEBHOOK_BREAKER_COOLDOWN" in str(
        exc.value)
    ok = settings(WEBHOOK_BREAKER_COOLDOWN="45", WEBHOOK_BREAKER_MAX_COOLDOWN="45")
    assert (ok.webhook_breaker_cooldown, ok.webhook_breaker_max_cooldown) == (45, 45)
