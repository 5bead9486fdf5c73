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

from nsj_queue_lib.coordination.listener_turn import HELD, ListenerTurn
from nsj_queue_lib.coordination.postgres import PgGuard
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession


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
def test_a_claim_that_fails_leaves_the_turn_flag_as_the_server_has_it(queue, when):
    settings = queue.settings()
    session = DbSession.open(settings)
    try:
        repo = TaskRepository(session, settings.queue_table, settings.queue_subscriber_table)
        guard = PgGuard(repo, settings.queue_table)
        turn = ListenerTurn(session, settings.queue_table, guard)
        assert turn.acquire(threading.Event(), 5.0) == HELD
        pid = session.conn.get_backend_pid()
        assert _holders(queue, turn.key) == [pid]
        task_id = queue.insert({"efeito": "x"})
        _fail_once(queue, when)

        with pytest.raises(psycopg2.Error, match="claim recusado pelo teste"):
            guard.claim(1)
        # AFTER: RETURNING released the turn before the error, and the error does not
        # undo an unlock; BEFORE: nothing released it.
        released = when == "AFTER"
        assert _holders(queue, turn.key) == ([] if released else [pid])
        assert turn.held is not released
        session.conn.notices.clear()
        turn.release()  # what the consumer does when it leaves its idle wait
        assert _warnings(session) == []
        assert _holders(queue, turn.key) == []

        # The session goes on: the next claim gets the task (the trigger fails once).
        assert [t["id"] for t in guard.claim(1)] == [task_id]
    finally:
        session.close()


def test_a_wait_statement_that_fails_after_the_grant_hands_the_turn_back(queue):
    settings = queue.settings()
    session = DbSession.open(settings)
    other = DbSession.open(settings)
    try:
        turn = ListenerTurn(session, settings.queue_table)
        # The probe the granting statement runs once it holds the turn reads a table that
        # is gone (dropped by a migration, a wrong schema): the statement fails after the
        # grant.
        queue.sql(f"CREATE TABLE {queue.quote(queue.schema)}.sai (x int)")
        turn.probe_sql = f"SELECT 1.0 FROM {queue.quote(queue.schema)}.sai LIMIT 1"
        queue.sql(f"DROP TABLE {queue.quote(queue.schema)}.sai")
        with pytest.raises(psycopg2.Error, match="sai"):
            turn.acquire(threading.Event(), 5.0)
        assert turn.held is False
        assert _holders(queue, turn.key) == []  # not kept until the worker reconnects
        # Another idle worker gets the turn at once.
        assert ListenerTurn(other, settings.queue_table).acquire(threading.Event(), 2.0) == HELD
        assert _holders(queue, turn.key) == [other.conn.get_backend_pid()]
        assert _warnings(session) == []
    finally:
        other.close()
        session.close()
