"""Every backend's `classify`: real errors of its database mapped to the faults the runtime
acts on (db/errors.py), and the faults only one backend's SQL raises (PostgreSQL's
TAKEN_OVER, MySQL's VALUE_REFUSED)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from nsj_queue_lib.db.errors import Fault, classify, server_message
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import TaskTakenOver, task_lock_key
from nsj_queue_lib.engine.select import make_backend
from tests.contract.harness import Harness


def _error_of(session: DbSession, run: Callable[[DbSession], Any]) -> BaseException:
    """The exception `run` raises on `session` (in a transaction rolled back after)."""
    with pytest.raises(Exception) as caught:
        with session.transaction():
            run(session)
    assert session.fetch_value("SELECT 1") == 1  # (an error of a statement, not the link)
    return caught.value


def test_classify_names_the_schema_faults_of_every_backend(backend_harness: Harness):
    h = backend_harness
    s = h.session()
    table = h.q.qtable
    absent = f"{h.q.quote(h.q.schema)}.{h.q.quote(h.q.fila + '_sem_tabela')}"
    task_id = h.q.insert({"n": 1})
    cases = {
        Fault.NO_TABLE: lambda x: x.fetch_all(f"SELECT id FROM {absent}"),
        Fault.NO_COLUMN: lambda x: x.fetch_all(f"SELECT sem_coluna FROM {table}"),
        Fault.BAD_STATEMENT: lambda x: x.fetch_all(f"SELEC id FROM {table}"),
        # a duplicate key: an error the library has no reaction for
        Fault.OTHER: lambda x: x.execute(
            f"INSERT INTO {table} (id, payload) SELECT id, payload FROM {table} "
            "WHERE id = %(id)s", {"id": task_id}),
    }
    for fault, run in cases.items():
        exc = _error_of(s, run)
        assert (h.backend.classify(exc), classify(exc)) == (fault, fault), (fault, exc)
    missing = _error_of(s, cases[Fault.NO_TABLE])
    assert "_sem_tabela" in server_message(missing)
    assert not server_message(missing).startswith("(")  # (not MySQL's "(1146, ...)")
    assert h.backend.classify(ValueError("42P01")) is Fault.OTHER
    assert h.q.count() == 1


def test_postgres_classifies_a_task_taken_over_at_its_commit(pg_queue):
    settings = pg_queue.settings()
    backend = make_backend(settings)
    task_id = pg_queue.insert({"n": 1})
    session = DbSession.open(settings)
    try:
        guard = backend.guard(session, TaskRepository(session, settings.queue_table))
        [tarefa] = guard.claim()
        session.begin()
        assert guard.begin(tarefa)
        pg_queue.sql(f"UPDATE {pg_queue.qtable} SET status = 'pendente' WHERE id = %s",
                     (task_id,))
        assert guard.finish_at_commit(tarefa, "ok")
        with pytest.raises(TaskTakenOver) as caught:
            session.commit()
        session.rollback()
        guard.release(tarefa)
        cause = caught.value.__cause__
        assert cause is not None
        assert backend.classify(cause) is Fault.TAKEN_OVER
        assert classify(cause) is Fault.OTHER  # (only the backend knows its own SQL)
        assert pg_queue.row(task_id)["status"] == "pendente"
    finally:
        session.close()


@pytest.mark.parametrize("value", ["x" * 50, "\U0001F600"])
def test_mysql_classifies_a_refused_value(mariadb_queue, value):
    settings = mariadb_queue.settings()
    session = DbSession.open(settings)
    try:
        session.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES'")
        session.execute("CREATE TEMPORARY TABLE recusa (c VARCHAR(4) CHARACTER SET latin1)")
        exc = _error_of(session, lambda s: s.execute(
            "INSERT INTO recusa (c) VALUES (%(v)s)", {"v": value}))
        assert make_backend(settings).classify(exc) is Fault.VALUE_REFUSED
        assert session.fetch_value("SELECT count(*) FROM recusa") == 0
    finally:
        session.close()


def test_the_rescue_keys_are_the_task_key_plus_what_a_backend_compatibility_adds(
        backend_harness: Harness):
    # QUEUE_COMPAT_1_2_2 forces the mixed-fleet mode on or off for this worker; only a
    # backend whose workers may share the queue with 1.2.2 (legacy_fleet) adds its key.
    key = task_lock_key(backend_harness.settings.queue_table, 41)
    for forced in ("true", "false"):
        backend = make_backend(backend_harness.q.settings(QUEUE_COMPAT_1_2_2=forced))
        mixed = forced == "true" and backend.capabilities.legacy_fleet
        assert backend.task_keys(41) == ([key, (41,)] if mixed else [key]), forced
