"""Start-up diagnostics: a misspelt variable is warned with the nearest known name; a
connection that fails names host, port and driver, with a hint when the port speaks the
other database's protocol (DB_DRIVER forgotten).  Real worker processes, real
PostgreSQL and MariaDB."""

from __future__ import annotations

import ast
import logging
import socket
from pathlib import Path

import pymysql
import pytest

from nsj_queue_lib import config
from nsj_queue_lib.config import Settings, unknown_variables
from nsj_queue_lib.db.session import HINT_MYSQL_PORT, HINT_POSTGRES_PORT, protocol_hint
from nsj_queue_lib.exceptions import ConfigError
from tests.fixtures.database import MySqlServer
from tests.fixtures.processes import wait_ready
from tests.fixtures.waiting import eventually

PACKAGE = Path(config.__file__).resolve().parent
BASE = {"DB_HOST": "h", "DB_PORT": "5432", "DB_BASE": "b", "DB_USER": "u",
        "QUEUE_NAME": "f", "QUEUE_TABLE": "f"}


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Each test sees the once-per-process warnings again."""
    monkeypatch.setattr(config, "_warned", set())


# -- unknown variables ------------------------------------------------------------
def test_unknown_names_get_the_nearest_known_one():
    env = {**BASE, "QUEUE_BACH_SIZE": "4", "DB_HSOT": "x", "SERVER_AUTH_TOKN": "t",
           "WEBHOOK_TIMEOUT": "5", "QUEUE_XYZZY_PLUGH": "1", "OUTRA_COISA": "1"}
    found = dict(unknown_variables(env))
    assert found == {"QUEUE_BACH_SIZE": "QUEUE_BATCH_SIZE", "DB_HSOT": "DB_HOST",
                     "SERVER_AUTH_TOKN": "SERVER_AUTH_TOKEN",
                     "WEBHOOK_TIMEOUT": "DEFAULT_WEBHOOK_TIMEOUT", "QUEUE_XYZZY_PLUGH": None}


def test_every_variable_settings_reads_is_known():
    """The known names are the Settings fields' metadata: every name and alias of every
    field, whatever field is added later."""
    every = {name for names, _, _ in Settings.variables() for name in names}
    assert every == Settings.known_variables()
    assert unknown_variables(dict.fromkeys(every, "1")) == []


def _literal_env_reads() -> set:
    """Names read from the environment by the package's own code, outside Settings:
    os.environ[...] / os.environ.get(...) / os.getenv(...) / env.get(...) with a literal."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("get", "getenv", "pop", "setdefault"):
                key = node.args[0]
            elif isinstance(node, ast.Subscript):
                key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str) \
                    and key.value.startswith(config.CHECKED_PREFIXES):
                names.add(key.value)
            # module constants such as health.HEALTH_FILE_VAR = "QUEUE_HEALTH_FILE"
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id.endswith("_VAR") \
                    and isinstance(node.value, ast.Constant) \
                    and str(node.value.value).startswith(config.CHECKED_PREFIXES):
                names.add(node.value.value)
    return names


def test_no_variable_read_elsewhere_in_the_package_is_warned():
    read = _literal_env_reads()
    assert {"DB_HOST", "QUEUE_TABLE", "QUEUE_HEALTH_FILE"} <= read  # the scan finds them
    assert unknown_variables(dict.fromkeys(read, "1")) == []


def test_platform_service_variables_are_not_warned():
    # Kubernetes / docker links for services called db, queue, server...
    env = {"DB_SERVICE_HOST": "10.0.0.1", "DB_SERVICE_PORT": "5432",
           "DB_SERVICE_PORT_POSTGRES": "5432", "DB_PORT_5432_TCP": "tcp://10.0.0.1:5432",
           "DB_PORT_5432_TCP_ADDR": "10.0.0.1", "QUEUE_PORT_8770_TCP_PROTO": "tcp"}
    assert unknown_variables(env) == []


def test_warned_once_per_process_names_only(fresh_warnings, caplog):
    caplog.set_level(logging.WARNING, logger="nsj_queue_lib.config")
    env = {**BASE, "DB_PASWORD": "s3cr3t-valor"}
    Settings.from_env(env, load_dotenv=False)
    Settings.from_env(env, load_dotenv=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "nsj_queue_lib.config"]
    assert len(lines) == 1, lines
    assert "DB_PASWORD" in lines[0] and "DB_PASS" in lines[0]
    assert "s3cr3t" not in lines[0]  # never the value


def test_a_missing_required_variable_names_its_misspelt_twin(fresh_warnings):
    env = {k: v for k, v in BASE.items() if k != "QUEUE_TABLE"}
    with pytest.raises(ConfigError) as err:
        Settings.from_env({**env, "QUEUE_TABEL": "f"}, load_dotenv=False)
    assert "QUEUE_TABLE não definida (QUEUE_TABEL está definida: erro de digitação?)" \
        in str(err.value)


def test_worker_warns_a_misspelt_variable_and_runs(pg_queue):
    worker = pg_queue.start_worker(QUEUE_BACH_SIZE="4", LOG_FORMAT="text")
    wait_ready(worker)
    log = worker.log()
    warning = [line for line in log.splitlines() if "QUEUE_BACH_SIZE" in line]
    assert len(warning) == 1, log
    assert " WARNING " in warning[0] and "quis dizer QUEUE_BATCH_SIZE?" in warning[0]
    task_id = pg_queue.insert({"efeito": "x"})
    pg_queue.wait_status(task_id, "sucesso", 30)


def test_worker_warning_follows_log_format_json(pg_queue):
    import json

    worker = pg_queue.start_worker(QUEUE_BACH_SIZE="4", LOG_FORMAT="json")
    wait_ready(worker)
    line = next(ln for ln in worker.log().splitlines() if "QUEUE_BACH_SIZE" in ln)
    record = json.loads(line)
    assert record["level"] == "WARNING" and "QUEUE_BATCH_SIZE" in record["message"]


# -- connection failures ------------------------------------------------------------
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_worker_on_a_closed_port_names_host_port_and_driver(pg_queue):
    port = closed_port()
    worker = pg_queue.start_worker(DB_HOST="127.0.0.1", DB_PORT=str(port))
    eventually(lambda: f"porta {port}" in worker.log(), 30, message="linha da falha")
    line = next(ln for ln in worker.log().splitlines() if f"porta {port}" in ln)
    assert "host 127.0.0.1" in line and "DB_DRIVER=POSTGRES via psycopg2" in line
    assert "Connection refused" in line
    assert "DB_DRIVER=MYSQL" not in line and "Traceback" not in worker.log()
    assert worker.proc.poll() is None  # an outage: it keeps retrying


@pytest.mark.mysql
def test_postgres_worker_on_a_mariadb_port_gets_the_hint(pg_queue):
    maria = MySqlServer.from_env()
    if maria.reachable():
        pytest.skip(maria.reachable())
    worker = pg_queue.start_worker(DB_HOST=maria.host, DB_PORT=str(maria.port))
    eventually(lambda: HINT_MYSQL_PORT in worker.log(), 30, message="dica DB_DRIVER=MYSQL")
    line = next(ln for ln in worker.log().splitlines() if HINT_MYSQL_PORT in ln)
    assert f"host {maria.host}" in line and f"porta {maria.port}" in line
    assert "DB_DRIVER=POSTGRES" in line


def test_mysql_client_on_a_postgres_port_gets_the_reverse_hint(pg_server):
    """pymysql's error after a PostgreSQL port never greeted it (lost connection, 2013):
    the real PostgreSQL is probed.  (The whole failure takes PostgreSQL's
    authentication_timeout, 60 s by default: see the slow test below.)"""
    lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    assert protocol_hint(lost, pg_server.host, pg_server.port) == HINT_POSTGRES_PORT
    refused = pymysql.err.OperationalError(2003, "Can't connect to MySQL server")
    assert protocol_hint(refused, pg_server.host, pg_server.port) is None


@pytest.mark.mysql
def test_postgres_probe_does_not_take_a_mariadb_for_postgres():
    maria = MySqlServer.from_env()
    if maria.reachable():
        pytest.skip(maria.reachable())
    lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    assert protocol_hint(lost, maria.host, maria.port) is None


@pytest.mark.slow
def test_mysql_worker_on_a_postgres_port_gets_the_hint(pg_queue, pg_server):
    worker = pg_queue.start_worker(DB_DRIVER="MYSQL", DB_HOST=pg_server.host,
                                   DB_PORT=str(pg_server.port), DB_MYSQL_DRIVER="pymysql")
    eventually(lambda: HINT_POSTGRES_PORT in worker.log(), 120, interval=0.5,
               message="dica DB_DRIVER=POSTGRES")
    line = next(ln for ln in worker.log().splitlines() if HINT_POSTGRES_PORT in ln)
    assert f"porta {pg_server.port}" in line and "DB_DRIVER=MYSQL via pymysql" in line
