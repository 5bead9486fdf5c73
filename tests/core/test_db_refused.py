"""Wrong credentials or database at start are configuration errors (exit 2, one line);
a database lost later is an outage: reconnect with back-off, admin jobs report it in
one line without traceback, rate-limited.  Real worker processes, real PostgreSQL and
MariaDB (tests/client_server/test_cs_db_refused.py)."""

from __future__ import annotations

import logging

import psycopg2
import pytest

from nsj_queue_lib.db.session import DbSession, refusal
from nsj_queue_lib.engine.postgres.backend import PostgresBackend
from nsj_queue_lib.runtime.maintenance import AdminJobs, RetryService
from tests.fixtures.processes import assert_config_exit


@pytest.mark.parametrize("env,expected", [
    ({"DB_USER": "usuario_inexistente"},
     ("usuário 'usuario_inexistente' não existe", "DB_USER", "[SQLSTATE 28000]")),
    ({"DB_BASE": "base_inexistente"},
     ("a base 'base_inexistente' não existe", "DB_BASE", "[SQLSTATE 3D000]")),
    ({"DB_USER": "usuario_inexistente", "QUEUE_CONCURRENCY": "3"},
     ("usuário 'usuario_inexistente' não existe", "[SQLSTATE 28000]")),
], ids=["role", "database", "concurrency"])
def test_postgres_refusal_at_start_exits_2_with_one_line(pg_queue, env, expected):
    assert_config_exit(pg_queue.start_worker(**env), "recusou a conexão", *expected)


def test_postgres_password_failure_text_is_recognised():
    # The shared test server trusts every local login, so 28P01 cannot be provoked
    # there: libpq's own text is classified instead.
    from nsj_queue_lib.config import Settings

    settings = Settings.from_env({"DB_HOST": "h", "DB_PORT": "5432", "DB_BASE": "b",
                                  "DB_USER": "u", "QUEUE_NAME": "f", "QUEUE_TABLE": "f"},
                                 load_dotenv=False)
    exc = psycopg2.OperationalError('connection to server at "h", port 5432 failed: FATAL:  '
                                    'password authentication failed for user "u"\n')
    refused = refusal(exc, settings)
    assert refused is not None and refused.code == "28P01"
    assert "senha recusada para o usuário 'u' (verifique DB_USER e DB_PASS)" in str(refused)
    assert refusal(psycopg2.OperationalError("Connection refused"), settings) is None


def test_admin_jobs_report_an_outage_in_one_line_and_its_end(pg_queue, pg_server, caplog):
    """The worker's connection lost under its admin jobs: one line, no traceback, however
    many runs fail, and one line once a run works again."""
    settings = pg_queue.settings()
    service = RetryService(settings, PostgresBackend(settings), frozenset(range(60)))
    slots = AdminJobs([service])
    dead = DbSession.open(settings)
    other = pg_server.connect()
    try:
        with other.cursor() as cur:  # the server ends the session (a restart, a proxy)
            cur.execute("SELECT pg_terminate_backend(%s)", (dead.conn.get_backend_pid(),))
        caplog.set_level(logging.INFO, logger="nsj_queue_lib")
        for _ in range(15):
            slots.run_now(service, dead)
        assert slots.runs == 15
        live = DbSession.open(settings)
        try:
            slots.run_now(service, live)  # the consumer reconnected
        finally:
            live.close()
    finally:
        other.close()
        dead.close()
    lines = [r for r in caplog.records if r.name == "nsj_queue_lib.runtime.maintenance"
             and "retry_thread" in r.getMessage() and r.levelno >= logging.INFO
             and ("indisponível" in r.getMessage() or "restabelecido" in r.getMessage())]
    assert [r.levelname for r in lines] == ["WARNING", "INFO"], [r.getMessage() for r in lines]
    assert "retry_thread: banco ou servidor indisponível" in lines[0].getMessage()
    assert all(r.exc_info is None for r in caplog.records)
    assert "\n" not in lines[0].getMessage()
