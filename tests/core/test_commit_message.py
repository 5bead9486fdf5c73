"""PostgreSQL per-task path: the claimed row as one JSON value, and the success mark and
the next claim sent in one message with the task's COMMIT (PgGuard)."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any, Tuple

import pytest

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.postgres.backend import PgGuard, PostgresBackend
from nsj_queue_lib.engine.postgres.compat_1_2_2 import legacy_task_key
from tests.fixtures.routers import in_process_runner, insert_effect


@pytest.fixture
def queue(pg_queue: Any) -> Any:
    """A fresh PostgreSQL queue (the shared fixture, under the name these tests use)."""
    return pg_queue


def _guard(q: Any, *, legacy: bool = False, ahead: bool = True,
           lean: bool = True) -> Tuple[PgGuard, Any]:
    settings = q.settings()
    session = DbSession.open(settings)
    repo = TaskRepository(session, settings.queue_table, legacy=legacy)
    repo.empty_claim_probe = not lean  # (lean: a worker that waits with the listener turn)
    guard = PostgresBackend(settings).guard(session, repo)
    guard.claim_next = (lambda: True) if ahead else None
    return guard, settings


def _statements(session: DbSession, action: Any) -> Tuple[int, Any]:
    """Round trips `action` sends on `session` (counted at its cursor calls)."""
    conn = session.conn
    sent = []

    class Counting(type(conn.cursor())):  # type: ignore[misc]
        def execute(self, query: Any, vars: Any = None) -> Any:
            sent.append(query)
            return super().execute(query, vars)

    conn.cursor_factory = Counting
    session._kept_cursor = None
    try:
        result = action()
    finally:
        conn.cursor_factory = None
        session._kept_cursor = None
    return len(sent), result


def test_claimed_row_is_the_column_form_value_for_value(queue):
    guard, _ = _guard(queue, ahead=False)
    session = guard.repo.session
    try:
        session.execute("SET TimeZone = 'America/Sao_Paulo'")
        payload = 'linha 1\nlinha "2" \\ çã 😀 \t fim'
        task_id = queue.insert(payload, processo="p", chave_externa="ch", tenant=2 ** 62,
                             grupo_empresarial="GE", prioridade=7)
        queue.sql(f"UPDATE {queue.qtable} SET data_hora = %s, data_hora_inicial = %s, "
                "pub_sub = true, mensagem_anterior = '' WHERE id = %s",
                (dt.datetime(2026, 1, 2, 3, 4, 5, 120000, dt.timezone.utc),
                 dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), task_id))
        [tarefa] = guard.claim()
        assert guard.repo._json_claim is True
        column_form = guard.repo.task_get(task_id)
        assert tarefa == column_form
        for key, value in column_form.items():
            assert type(tarefa[key]) is type(value), key
            if isinstance(value, dt.datetime):
                assert tarefa[key].utcoffset() == value.utcoffset() == dt.timedelta(hours=-3)
        assert tarefa["payload"] == payload and tarefa["status"] == "processando"
    finally:
        guard.close()
        session.close()


def test_value_python_cannot_parse_from_json_is_read_in_the_column_form(queue):
    task_id = queue.insert({"n": 1})
    queue.sql(f"UPDATE {queue.qtable} SET proxima_tentativa = 'infinity' WHERE id = %s",
              (task_id,))
    guard, _ = _guard(queue, ahead=False)
    try:
        [tarefa] = guard.claim()
        assert guard.repo._json_claim is True
        assert tarefa == guard.repo.task_get(task_id)  # (psycopg2's own value for it)
        assert queue.row(task_id)["status"] == "processando"
    finally:
        guard.close()
        guard.repo.session.close()


def test_column_of_another_type_keeps_the_column_form(queue):
    # (the DDL's views read the column; a table its owner altered has none, say)
    queue.sql(f"DROP VIEW {queue.quote(queue.schema)}.{queue.quote(queue.fila + '_cadeias')} "
              "CASCADE")
    queue.sql(f"ALTER TABLE {queue.qtable} ALTER COLUMN tenant TYPE numeric")
    task_id = queue.insert({"n": 1}, tenant=12)
    guard, _ = _guard(queue, ahead=False)
    try:
        [tarefa] = guard.claim()
        assert guard.repo._json_claim is False
        assert tarefa["tenant"] == 12 and type(tarefa["tenant"]) is decimal.Decimal
        assert tarefa == guard.repo.task_get(task_id)
    finally:
        guard.close()
        guard.repo.session.close()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "probe"])
def test_success_sends_mark_commit_and_next_claim_in_one_message(queue, lean):
    ids = [queue.insert({"n": n}) for n in range(4)]
    guard, settings = _guard(queue, lean=lean)
    session = guard.repo.session
    run_task = in_process_runner(settings, guard, insert_effect(queue.qeffects))
    try:
        assert run_task() is True  # the first claim is a statement of its own
        assert guard.claimed_ahead() == [ids[1]]
        # the task claimed with the success is visible and locked at once
        assert queue.row(ids[1])["status"] == "processando" and queue.task_lock_held(ids[1])
        # BEGIN, the task's INSERT, then mark + COMMIT + claim: three round trips
        sent, outcome = _statements(session, run_task)
        assert (sent, outcome) == (3, True)
        assert guard.claimed_ahead() == [ids[2]]
        assert run_task() is True and run_task() is True
        # the last success found nothing to claim: the next claim sends nothing
        assert guard.claimed_ahead() == []
        assert _statements(session, guard.claim) == (0, [])
        assert [r["status"] for r in queue.rows()] == ["sucesso"] * 4
        assert sorted(e["tarefa_id"] for e in queue.effects()) == ids
        assert not any(queue.task_lock_held(i) for i in ids)
    finally:
        guard.close()
        session.close()


def test_task_claimed_ahead_goes_back_on_stop_and_on_pause(queue):
    ids = [queue.insert({"n": n}) for n in range(3)]
    guard, settings = _guard(queue)
    run_task = in_process_runner(settings, guard, insert_effect(queue.qeffects))
    try:
        assert run_task() is True
        assert guard.claimed_ahead() == [ids[1]]
        guard.settle()  # paused (the consumer settles before waiting)
        assert queue.row(ids[1])["status"] == "pendente" and not queue.task_lock_held(ids[1])
        assert guard.claimed_ahead() == []
        assert run_task() is True  # claims it again, by itself
        assert guard.claimed_ahead() == [ids[2]]
        guard.close()  # a stop
        assert queue.row(ids[2])["status"] == "pendente" and not queue.task_lock_held(ids[2])
        assert queue.row(ids[2])["tentativa"] == 1
        assert [e["tarefa_id"] for e in queue.effects()] == ids[:2]
    finally:
        guard.close()
        guard.repo.session.close()


def test_no_claim_ahead_when_the_consumer_does_not_claim_next(queue):
    ids = [queue.insert({"n": n}) for n in range(2)]
    guard, settings = _guard(queue, ahead=False)
    run_task = in_process_runner(settings, guard, insert_effect(queue.qeffects))
    try:
        assert run_task() is True
        assert guard.claimed_ahead() == [] and queue.row(ids[1])["status"] == "pendente"
        # BEGIN, INSERT, mark + COMMIT; then the claim: four round trips
        assert _statements(guard.repo.session, run_task) == (4, True)
    finally:
        guard.close()
        guard.repo.session.close()


def test_task_taken_over_meanwhile_rolls_back_its_work(queue):
    ids = [queue.insert({"n": n}) for n in range(2)]
    guard, settings = _guard(queue)
    other = queue.new_conn()

    def taken_over(tarefa: dict, bd_conn: Any) -> None:
        insert_effect(queue.qeffects)(tarefa, bd_conn)
        with other.cursor() as cur:  # as the rescue re-queues a task it thinks orphaned
            cur.execute(f"UPDATE {queue.qtable} SET status = 'pendente' WHERE id = %s",
                        (tarefa["id"],))
        other.commit()

    run_task = in_process_runner(settings, guard, taken_over)
    try:
        assert run_task() is None  # taken over: nothing of this run is kept
        assert queue.effects() == []
        assert [r["status"] for r in queue.rows()] == ["pendente", "pendente"]
        assert queue.count() == 2 and guard.claimed_ahead() == []  # no failure, no claim
        assert not queue.task_lock_held(ids[0])
        assert not guard.repo.session.in_transaction
    finally:
        other.close()
        guard.close()
        guard.repo.session.close()


def test_failed_commit_records_the_failure_and_claims_nothing(queue):
    ids = [queue.insert({"n": n}) for n in range(2)]
    queue.sql(f"CREATE TABLE {queue.quote(queue.schema)}.unico (k int, CONSTRAINT u UNIQUE (k) "
            "DEFERRABLE INITIALLY DEFERRED)")
    guard, settings = _guard(queue)

    def fails_at_commit(tarefa: dict, bd_conn: Any) -> None:
        insert_effect(queue.qeffects)(tarefa, bd_conn)
        with bd_conn.cursor() as cur:
            cur.execute(f"INSERT INTO {queue.quote(queue.schema)}.unico VALUES (1), (1)")

    run_task = in_process_runner(settings, guard, fails_at_commit)
    try:
        assert run_task() is False  # the COMMIT failed: a task failure, recorded
        assert queue.row(ids[0])["status"] == "falha"
        assert queue.count("tentativa = 2") == 1  # its next attempt
        assert queue.effects() == [] and guard.claimed_ahead() == []
        assert queue.row(ids[1])["status"] == "pendente"
        assert not any(queue.task_lock_held(i) for i in ids)
    finally:
        guard.close()
        guard.repo.session.close()


def test_mixed_fleet_key_of_the_finished_task_rides_on_the_claim_ahead(queue):
    ids = [queue.insert({"n": n}) for n in range(3)]
    guard, settings = _guard(queue, legacy=True)
    probe = queue.probe_locker()
    run_task = in_process_runner(settings, guard, insert_effect(queue.qeffects))
    try:
        assert run_task() is True
        # 1.2.2's key of the task just done was given back by the claim after its COMMIT;
        # the task claimed ahead holds its own
        assert guard.deferred_unlock is None
        assert probe.try_lock(legacy_task_key(ids[0])) and probe.unlock(legacy_task_key(ids[0]))
        assert not probe.try_lock(legacy_task_key(ids[1]))
        assert run_task() is True and run_task() is True
        # (the last claim found nothing, and gave back the last task's key all the same)
        assert guard.deferred_unlock is None and guard.claimed_ahead() == []
        assert all(probe.try_lock(legacy_task_key(i)) for i in ids)
        assert [r["status"] for r in queue.rows()] == ["sucesso"] * 3
    finally:
        guard.close()
        guard.repo.session.close()
