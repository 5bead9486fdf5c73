"""Wrong credentials or database at start are configuration errors (exit 2, one line);
a database lost later is an outage: reconnect with back-off, admin threads report it in
one line without traceback, rate-limited.  Real worker processes, real PostgreSQL and
MariaDB (tests/client_server/test_cs_db_refused.py)."""

from __future__ import annotations

import logging
import socket

import psycopg2
import pytest

from nsj_queue_lib.coordination.postgres import PostgresBackend
from nsj_queue_lib.db.session import refusal
from nsj_queue_lib.runtime.maintenance import RetryService
from tests.fixtures.waiting import eventually


def assert_config_exit(worker, *expected: str) -> str:
    """The worker exits 2 having logged exactly one ERROR line, holding `expected`."""
    assert worker.wait_exit(30) == 2, worker.log()
    log = worker.log()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1, log
    for text in expected:
        assert text in errors[0], errors[0]
    assert "Traceback" not in log and "onexão indisponível" not in log
    return errors[0]


@pytest.mark.parametrize("env,expected", [
    ({"DB_USER": "usuario_inexistente"},
     ("usuário 'usuario_inexistente' não existe", "DB_USER", "[SQLSTATE 28000]")),
    ({"DB_BASE": "base_inexistente"},
     ("a base 'base_inexistente' não existe", "DB_BASE", "[SQLSTATE 3D000]")),
    ({"DB_USER": "usuario_inexistente", "QUEUE_CONCURRENCY": "3"},
     ("usuário 'usuario_inexistente' não existe", "[SQLSTATE 28000]")),
], ids=["role", "database", "concurrency"])
def test_postgres_refusal_at_start_exits_2_with_one_line(queue, env, expected):
    assert_config_exit(queue.start_worker(**env), "recusou a conexão", *expected)


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


def test_admin_thread_reports_an_outage_in_one_line_and_its_end(queue, caplog):
    """A database lost after start: the admin thread logs one line, no traceback, however
    many runs fail, and one line when the database is back."""
    with socket.socket() as sock:  # a local port where nothing listens
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    good = queue.settings()
    service = RetryService(good.replace(db_port=dead_port), PostgresBackend(good),
                           frozenset(range(60)))
    service.next_delay = lambda: 0.02  # run continuously instead of at clock minutes
    caplog.set_level(logging.INFO, logger="nsj_queue_lib")
    service.start()
    try:
        eventually(lambda: service.runs >= 15, 20, message="15 execuções sem banco")
        service.settings = good  # the database is reachable again
        eventually(lambda: "restabelecido" in caplog.text, 20, message="linha de retorno")
    finally:
        service.stop()
        service.join(5)
    lines = [r for r in caplog.records if r.name == "nsj_queue_lib.runtime.service"
             and "retry_thread" in r.getMessage() and r.levelno >= logging.INFO
             and ("indisponível" in r.getMessage() or "restabelecido" in r.getMessage())]
    assert [r.levelname for r in lines] == ["WARNING", "INFO"], [r.getMessage() for r in lines]
    assert "Não foi possível conectar" in lines[0].getMessage()
    assert all(r.exc_info is None for r in caplog.records)
    assert "\n" not in lines[0].getMessage()
