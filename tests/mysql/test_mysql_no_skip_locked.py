"""Client/server mode on servers without FOR UPDATE SKIP LOCKED (MySQL < 8.0, MariaDB <
10.6, SingleStore): the capability decision, the rescue's fence in the forms those
servers have, and batch mode refused at start.

This machine has MariaDB 10.11 only: the decision is tested on version strings, and the
NOWAIT and lock-wait SQL paths run on the real MariaDB with the session's decision forced.
"""

from __future__ import annotations

import time

import pytest

from nsj_queue_lib.db import server_version
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.server_version import (
    LOCK_WAIT,
    LOCK_WAIT_SINGLESTORE,
    NOWAIT,
    SKIP_LOCKED,
    row_lock_mode,
    session_row_lock_mode,
)
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.mysql.backend import check_server_version
from nsj_queue_lib.engine.socket.backend import SocketBackend
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.runtime.batch import BatchClaimer
from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from nsj_queue_lib.runtime.maintenance import RetryService
from tests.mysql.conftest import make_settings
from tests.mysql.test_mysql_lifecycle import RecordingBackend
from tests.mysql.test_mysql_repository import _insert, _processing

FORMS = [NOWAIT, LOCK_WAIT]  # (LOCK_WAIT_SINGLESTORE needs SingleStore's variable)


@pytest.mark.parametrize(("version", "singlestore", "mode"), [
    ("5.7.44-log", False, LOCK_WAIT),
    ("8.0.36", False, SKIP_LOCKED),
    ("8.4.0", False, SKIP_LOCKED),
    ("10.2.44-MariaDB", False, LOCK_WAIT),
    ("5.5.5-10.3.39-MariaDB", False, NOWAIT),  # (the 5.5.5- prefix of old protocols)
    ("10.5.23-MariaDB-1:10.5.23+maria~deb11", False, NOWAIT),
    ("10.6.0-MariaDB", False, SKIP_LOCKED),
    ("10.11.19-MariaDB-0+deb12u1", False, SKIP_LOCKED),
    ("8.0.32", True, LOCK_WAIT_SINGLESTORE),  # SingleStore answers like a MySQL
    ("", False, LOCK_WAIT),
    # VERSION() as distributions and forks print it.
    ("5.7.42-0ubuntu0.18.04.1", False, LOCK_WAIT),  # MySQL 5.7 (Ubuntu)
    ("5.7.44-48-log", False, LOCK_WAIT),  # Percona Server 5.7
    ("8.0.36-0ubuntu0.22.04.1", False, SKIP_LOCKED),  # MySQL 8.0 (Ubuntu)
    ("8.0.35-27", False, SKIP_LOCKED),  # Percona Server 8.0
    ("9.1.0", False, SKIP_LOCKED),
    ("10.3.39-MariaDB-0+deb10u2", False, NOWAIT),  # MariaDB 10.3 (Debian 10)
    ("10.3.39-MariaDB-1:10.3.39+maria~ubu2004-log", False, NOWAIT),
    ("10.6.18-MariaDB-0ubuntu0.22.04.1", False, SKIP_LOCKED),  # MariaDB 10.6 (Ubuntu)
    ("10.6.16-MariaDB-log", False, SKIP_LOCKED),
    ("11.2.2-MariaDB-1:11.2.2+maria~ubu2204", False, SKIP_LOCKED),  # MariaDB 11
    ("11.4.2-MariaDB-ubu2404", False, SKIP_LOCKED),
    ("5.5.5-10.6.12-MariaDB", False, SKIP_LOCKED),
    ("5.7.32", True, LOCK_WAIT_SINGLESTORE),  # SingleStore 8.x: VERSION() says 5.7.32
])
def test_row_lock_mode_follows_the_server_version(version, singlestore, mode):
    assert row_lock_mode(version, singlestore) == mode
    # Native mode refuses exactly the servers without SKIP LOCKED (one rule).
    if mode == SKIP_LOCKED:
        check_server_version(version, singlestore)
    else:
        with pytest.raises(ConfigError, match="CLIENT_SERVER_MODE=true"):
            check_server_version(version, singlestore)


@pytest.mark.parametrize(("version", "singlestore", "says"), [
    ("10.5.23-MariaDB-1:10.5.23+maria~deb11", False,
     "O modo nativo MySQL exige MariaDB >= 10.6 (FOR UPDATE SKIP LOCKED e locks nomeados "
     "por sessão); o servidor é 10.5.23-MariaDB-1:10.5.23+maria~deb11: use o modo "
     "cliente/servidor"),
    ("5.7.44-log", False, "exige MySQL >= 8.0 (FOR UPDATE SKIP LOCKED e locks nomeados por "
                          "sessão); o servidor é 5.7.44-log: use o modo cliente/servidor"),
    ("", False, "o servidor é de versão desconhecida: use o modo cliente/servidor"),
    ("5.7.32", True, "SingleStore não tem FOR UPDATE SKIP LOCKED nem GET_LOCK: use o modo "
                     "cliente/servidor"),
])
def test_native_refusal_names_the_server_and_points_to_client_server_mode(
        version, singlestore, says):
    with pytest.raises(ConfigError) as refused:
        check_server_version(version, singlestore)
    message = str(refused.value)
    assert says in message, message
    assert ("CLIENT_SERVER_MODE=true e o servidor de filas: "
            "python -m nsj_queue_lib.server.server_main") in message


@pytest.mark.mysql
def test_the_real_mariadb_is_detected_once_per_session(session):
    assert session_row_lock_mode(session) == SKIP_LOCKED  # MariaDB 10.11
    session.server[server_version._MODE] = NOWAIT  # kept: not asked again
    assert session_row_lock_mode(session) == NOWAIT


def _forced(settings, mode: str) -> DbSession:
    s = DbSession.open(settings)
    s.server[server_version._MODE] = mode  # as detected on a server without SKIP LOCKED
    return s


@pytest.fixture
def holder(settings):
    """Another session that holds rows in an open transaction (a running task)."""
    s = DbSession.open(settings)
    yield s
    if s.in_transaction:
        s.rollback()
    s.close()


@pytest.mark.mysql
@pytest.mark.parametrize("mode", FORMS)
def test_fence_without_skip_locked_takes_a_free_row_and_not_a_held_one(
        mode, settings, repo, mariadb_queue, holder):
    free = _processing(repo, mariadb_queue)["id"]
    held = _processing(repo, mariadb_queue)["id"]
    pending = _insert(repo, mariadb_queue)
    holder_repo = TaskRepository(holder, settings.queue_table)
    holder.begin()
    assert holder_repo.task_lock_row(held)  # the task transaction's own fence
    fencer = _forced(settings, mode)
    try:
        wait_before = fencer.fetch_value("SELECT @@SESSION.innodb_lock_wait_timeout")
        r = TaskRepository(fencer, settings.queue_table)
        with fencer.transaction():
            started = time.monotonic()
            assert r.task_try_lock_row(held) is False
            assert time.monotonic() - started < 3  # NOWAIT: at once; else 1 s
            assert r.task_try_lock_row(pending) is False  # not running
            assert r.task_try_lock_row(free) is True
            # The session is usable and its own lock wait is back.
            assert fencer.fetch_value("SELECT @@SESSION.innodb_lock_wait_timeout") == wait_before
            # The free row is now ours: the holder cannot take it either.
            assert holder_repo.task_try_lock_row(free) is False  # (SKIP LOCKED)
    finally:
        fencer.close()
    holder.rollback()
    assert mariadb_queue.row(held)["status"] == "processando"


@pytest.mark.mysql
@pytest.mark.parametrize("mode", FORMS)
def test_rescue_without_skip_locked_leaves_a_running_task_and_rescues_a_dead_one(
        mode, settings, repo, mariadb_queue, holder):
    # Both tasks are 'processando' and their locks are free (their workers lost the
    # socket session); one row is still held by its task's transaction.
    running = _processing(repo, mariadb_queue)["id"]
    dead = _processing(repo, mariadb_queue)["id"]
    holder.begin()
    assert TaskRepository(holder, settings.queue_table).task_lock_row(running)
    admin = _forced(make_settings(mariadb_queue), mode)
    try:
        backend = RecordingBackend(settings)
        result = RetryService(settings, backend, frozenset(range(60))).run_on(admin)
    finally:
        admin.close()
    assert (result.skipped, result.count) == (False, 1)
    assert mariadb_queue.row(running)["status"] == "processando"
    row = mariadb_queue.row(dead)
    assert row["status"] == "falha" and row["mensagem"].startswith(WORKER_STOPPED)
    assert [r["status"] for r in mariadb_queue.rows("id_inicial = %s", (dead,))] == ["agendada"]
    # The running task ends normally afterwards (its success commits).
    holder_repo = TaskRepository(holder, settings.queue_table)
    assert holder_repo.task_finish(running, "ok")
    holder.commit()
    assert mariadb_queue.row(running)["status"] == "sucesso"


@pytest.mark.mysql
@pytest.mark.parametrize("mode", [NOWAIT, LOCK_WAIT])
def test_client_server_refuses_batch_mode_without_skip_locked(mode, mariadb_queue):
    batch = make_settings(mariadb_queue, QUEUE_BATCH_SIZE="10")
    s = _forced(batch, mode)
    try:
        backend = SocketBackend(batch)
        backend.check(s)  # the server is usable (one task at a time)
        assert backend.capabilities.batch_claim is False
        guard = backend.guard(s, TaskRepository(s, batch.queue_table))
        try:
            with pytest.raises(ConfigError, match="QUEUE_BATCH_SIZE > 1 exige FOR UPDATE SKIP"):
                BatchClaimer(guard, backend.capabilities, 10)
        finally:
            guard.close()
    finally:
        s.close()
    real = DbSession.open(batch)
    try:
        backend = SocketBackend(batch)
        backend.check(real)  # MariaDB 10.11 has SKIP LOCKED: batch allowed
        assert backend.capabilities.batch_claim is True
    finally:
        real.close()
