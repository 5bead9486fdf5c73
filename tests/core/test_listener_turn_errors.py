"""The listener turn after a statement that fails (PostgreSQL, real server, real table).

The turn is a session advisory lock: a failed statement does not undo an unlock or a
grant it made.  After such a failure the worker's idea of whether it holds the turn must
match the server's (pg_locks), so that it neither unlocks a lock it no longer holds (a
server WARNING) nor keeps a turn that no other worker can get.
"""

from __future__ import annotations

import threading

import psycopg2
import pytest

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.postgres.backend import PgGuard
from nsj_queue_lib.engine.postgres.listener_turn import HELD, ListenerTurn


def _holders(queue, key) -> list:
    """Backends holding advisory lock `key` (two int32), seen from another session."""
    return [r["pid"] for r in queue.sql(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid::int8 = %s AND objid::int8 = %s AND objsubid = 2",
        (key[0] & 0xFFFFFFFF, key[1] & 0xFFFFFFFF))]


def _fail_once(queue, when: str) -> None:
    """A trigger on the queue table that makes the next claim's UPDATE fail, once:
    BEFORE (the row is never updated, RETURNING never evaluated) or AFTER (at the end of
    the statement, once RETURNING was evaluated)."""
    s = queue.quote(queue.schema)
    queue.sql(f"CREATE SEQUENCE {s}.falha_unica")
    queue.sql(f"""CREATE FUNCTION {s}.falha_claim() RETURNS trigger LANGUAGE plpgsql AS $f$
        BEGIN
          IF NEW.status = 'processando' AND nextval('{queue.schema}.falha_unica') = 1 THEN
            RAISE EXCEPTION 'claim recusado pelo teste';
          END IF;
          RETURN NEW;
        END $f$""")
    queue.sql(f"CREATE TRIGGER falha_claim {when} UPDATE ON {queue.qtable} "
              f"FOR EACH ROW EXECUTE FUNCTION {s}.falha_claim()")


def _warnings(session: DbSession) -> list:
    return [n for n in session.conn.notices if "WARNING" in n]


@pytest.mark.parametrize("when", ["AFTER", "BEFORE"])
def test_a_claim_that_fails_leaves_the_turn_flag_as_the_server_has_it(pg_queue, when):
    settings = pg_queue.settings()
    session = DbSession.open(settings)
    try:
        repo = TaskRepository(session, settings.queue_table, settings.queue_subscriber_table)
        guard = PgGuard(repo, settings.queue_table)
        turn = ListenerTurn(session, settings.queue_table, guard)
        assert turn.acquire(threading.Event(), 5.0) == HELD
        pid = session.conn.get_backend_pid()
        assert _holders(pg_queue, turn.key) == [pid]
        task_id = pg_queue.insert({"efeito": "x"})
        _fail_once(pg_queue, when)

        with pytest.raises(psycopg2.Error, match="claim recusado pelo teste"):
            guard.claim(1)
        # AFTER: RETURNING released the turn before the error, and the error does not
        # undo an unlock; BEFORE: nothing released it.
        released = when == "AFTER"
        assert _holders(pg_queue, turn.key) == ([] if released else [pid])
        assert turn.held is not released
        session.conn.notices.clear()
        turn.release()  # what the consumer does when it leaves its idle wait
        assert _warnings(session) == []
        assert _holders(pg_queue, turn.key) == []

        # The session goes on: the next claim gets the task (the trigger fails once).
        assert [t["id"] for t in guard.claim(1)] == [task_id]
    finally:
        session.close()


def test_a_wait_statement_that_fails_after_the_grant_hands_the_turn_back(pg_queue):
    settings = pg_queue.settings()
    session = DbSession.open(settings)
    other = DbSession.open(settings)
    try:
        turn = ListenerTurn(session, settings.queue_table)
        # The probe the granting statement runs once it holds the turn reads a table that
        # is gone (dropped by a migration, a wrong schema): the statement fails after the
        # grant.
        pg_queue.sql(f"CREATE TABLE {pg_queue.quote(pg_queue.schema)}.sai (x int)")
        turn.probe_sql = f"SELECT 1.0 FROM {pg_queue.quote(pg_queue.schema)}.sai LIMIT 1"
        pg_queue.sql(f"DROP TABLE {pg_queue.quote(pg_queue.schema)}.sai")
        with pytest.raises(psycopg2.Error, match="sai"):
            turn.acquire(threading.Event(), 5.0)
        assert turn.held is False
        assert _holders(pg_queue, turn.key) == []  # not kept until the worker reconnects
        # Another idle worker gets the turn at once.
        assert ListenerTurn(other, settings.queue_table).acquire(threading.Event(), 2.0) == HELD
        assert _holders(pg_queue, turn.key) == [other.conn.get_backend_pid()]
        assert _warnings(session) == []
    finally:
        other.close()
        session.close()


def _task_locks(queue, pid: int, lock_ns: int, task_id: int) -> list:
    """The task's advisory locks `pid` holds, seen from another session: the queue's
    namespaced key (objsubid 2) and 1.2.2's raw key (the id as a bigint, objsubid 1)."""
    return [r["objsubid"] for r in queue.sql(
        "SELECT objsubid FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = %s "
        "AND ((objsubid = 2 AND classid::int8 = %s AND objid::int8 = %s) "
        "  OR (objsubid = 1 AND classid::int8 = %s AND objid::int8 = %s)) ORDER BY objsubid",
        (pid, lock_ns & 0xFFFFFFFF, task_id & 0xFFFFFFFF, task_id >> 32,
         task_id & 0xFFFFFFFF))]


@pytest.mark.parametrize("legacy", [False, True], ids=["2x", "compat-1.2.2"])
def test_a_claim_that_fails_after_its_lock_leaves_the_task_to_other_workers(pg_queue, legacy):
    """The claim's UPDATE fails after pg_try_advisory_lock took the task's session lock:
    the row stays 'pendente', and the lock must not stay with this session (every other
    worker's claim would skip the task until this session ends)."""
    settings = pg_queue.settings()
    a, b = DbSession.open(settings), DbSession.open(settings)
    try:
        repo_a = TaskRepository(a, settings.queue_table, settings.queue_subscriber_table,
                                legacy=legacy)
        repo_b = TaskRepository(b, settings.queue_table, settings.queue_subscriber_table,
                                legacy=legacy)
        guard_a, guard_b = PgGuard(repo_a, settings.queue_table), PgGuard(repo_b,
                                                                            settings.queue_table)
        task_id = pg_queue.insert({"efeito": "x"})
        _fail_once(pg_queue, "AFTER")

        with pytest.raises(psycopg2.Error, match="claim recusado pelo teste"):
            guard_a.claim(1)
        assert pg_queue.sql(f"SELECT status FROM {pg_queue.qtable} WHERE id = %s",
                            (task_id,)) == [{"status": "pendente"}]
        assert _task_locks(pg_queue, a.conn.get_backend_pid(), guard_a.lock_ns, task_id) == []

        # Another worker claims and runs it; the first one never gets it again.
        claimed = guard_b.claim(1)
        assert [t["id"] for t in claimed] == [task_id]
        assert guard_a.claim(1) == []
        b.begin()
        assert guard_b.finish(claimed[0], "ok")
        b.commit()
        guard_b.release(claimed[0])
        guard_b.settle()
        assert guard_a.claim(1) == [] and guard_b.claim(1) == []
        assert pg_queue.sql(f"SELECT status FROM {pg_queue.qtable} WHERE id = %s",
                            (task_id,)) == [{"status": "sucesso"}]
        for s, g in ((a, guard_a), (b, guard_b)):
            assert _task_locks(pg_queue, s.conn.get_backend_pid(), g.lock_ns, task_id) == []
        assert _warnings(a) == [] and _warnings(b) == []
    finally:
        b.close()
        a.close()
