"""Session mode refuses a transaction pooler (db/pooler.py), through a real PgBouncer."""

from __future__ import annotations

import pytest

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.pooler import transaction_pooled
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.select import make_backend
from nsj_queue_lib.exceptions import ConfigError
from tests.fixtures.pgbouncer import PgBouncer

pytestmark = pytest.mark.process


def _settings(env: dict) -> Settings:
    return Settings.from_env({**env, "QUEUE_NAME": "sonda", "QUEUE_TABLE": "public.sonda"},
                             load_dotenv=False)


def _check(settings: Settings) -> None:
    session = DbSession.open(settings)
    try:
        make_backend(settings).check(session)
    finally:
        session.close()


def test_session_mode_behind_pgbouncer_transaction_pooling_is_refused(pgbouncer) -> None:
    settings = _settings({**pgbouncer.env(), "DB_POOL_MODE": "session"})
    with pytest.raises(ConfigError) as err:
        _check(settings)
    text = str(err.value)
    assert "DB_POOL_MODE=transaction" in text and "pooler em modo transação" in text
    assert f"127.0.0.1:{pgbouncer.port}" in text


def test_transaction_mode_needs_schema_7_and_then_is_accepted(pooled_queue) -> None:
    q = pooled_queue
    settings = q.settings()
    assert make_backend(settings).name == "pooled"
    _check(settings)  # no error: the lease backend keeps nothing on a session
    q.sql(f"ALTER TABLE {q.qtable} DROP COLUMN lease_dono, DROP COLUMN lease_ate")
    with pytest.raises(ConfigError, match="nsj-queue schema upgrade"):
        _check(settings)


def test_direct_connection_and_session_pooling_are_not_taken_for_it(pg_server) -> None:
    direct = _settings(pg_server.env())
    session = DbSession.open(direct)
    try:
        assert transaction_pooled(session, direct) is False
    finally:
        session.close()
    _check(direct)
    bouncer = PgBouncer(pg_server, pool_mode="session").start()
    try:
        settings = _settings({**bouncer.env(), "DB_POOL_MODE": "session"})
        session = DbSession.open(settings)
        try:
            assert [transaction_pooled(session, settings) for _ in range(3)] == [False] * 3
        finally:
            session.close()
        _check(settings)
    finally:
        bouncer.close()


def test_pool_mode_is_validated() -> None:
    with pytest.raises(ConfigError, match="DB_POOL_MODE='bogus' inválida"):
        _settings({"DB_HOST": "h", "DB_PORT": "5432", "DB_BASE": "b", "DB_USER": "u",
                   "DB_POOL_MODE": "bogus"})
    with pytest.raises(ConfigError, match="só para o PostgreSQL"):
        _settings({"DB_HOST": "h", "DB_PORT": "3306", "DB_BASE": "b", "DB_USER": "u",
                   "DB_DRIVER": "MYSQL", "DB_POOL_MODE": "transaction"})
