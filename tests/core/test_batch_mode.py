"""Batch mode (QUEUE_BATCH_SIZE > 1) with real worker processes on PostgreSQL: what only
PostgreSQL shows (one transaction per batch, the joint success mark, its round trips).
Claim order, a failure in a batch, kill -9 and HALT/SIGTERM mid-batch on every backend:
tests/contract/test_contract_batch.py.

The effects table gets a column defaulting to txid_current() (the top-level transaction,
also inside a savepoint): that is how the tests see that a batch commits once.
"""

from __future__ import annotations

import psycopg2.extensions

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.select import make_backend
from nsj_queue_lib.runtime.batch import BatchClaimer, BatchRunner
from tests.fixtures.processes import wait_ready
from tests.fixtures.routers import FunctionRouter, insert_effect
from tests.fixtures.waiting import eventually


def _count(queue, where: str, params) -> int:
    return int(queue.value(f"SELECT count(*) FROM {queue.table} WHERE {where}", params))


def _insert_many(queue, pg_server, payloads, **kwargs) -> list:
    conn = pg_server.connect(autocommit=False)
    try:
        ids = queue.client(conn).insert_tasks(
            [{"origem": "o", "destino": "d", "processo": "p", "payload": p, **kwargs}
             for p in payloads])
        conn.commit()
    finally:
        conn.close()
    return ids


def test_batch_commits_once_per_batch_and_a_failure_rolls_back_only_its_task(pg_queue, pg_server):
    pg_queue.sql(f'ALTER TABLE "{pg_queue.schema}".efeitos ADD COLUMN tx bigint '
                 "DEFAULT txid_current()")
    payloads = [{"efeito": f"e{i}", "fail": i % 7 == 3} for i in range(30)]
    ids = _insert_many(pg_queue, pg_server, payloads)
    worker = pg_queue.start_worker(QUEUE_BATCH_SIZE="10")
    wait_ready(worker)
    eventually(lambda: _count(pg_queue, "id = ANY(%s) AND status IN ('sucesso', 'falha')",
                                   (ids,)) == 30, timeout=30, message="30 tasks done")
    failing = [i for i, p in zip(ids, payloads) if p["fail"]]
    ok = [i for i, p in zip(ids, payloads) if not p["fail"]]
    # Each succeeded task's effect is there once; failed tasks' effects were rolled back
    # with their savepoint, and their failure (and next attempt) was recorded.
    effects = pg_queue.effects("tipo = 'execute'")
    first_attempt = {e["tarefa_id"] for e in effects} & set(ids)
    assert first_attempt == set(ok)
    assert len([e for e in effects if e["tarefa_id"] in set(ok)]) == len(ok)
    for task_id in failing:
        row = pg_queue.row(task_id)
        assert row["status"] == "falha" and row["reenfileirado"] is True
        assert "falha programada" in row["mensagem"]
        assert [r["tentativa"] for r in pg_queue.chain(task_id)][:2] == [1, 2]
    # One transaction per batch: the 30 first attempts ran in 3 of them.
    assert len({e["tx"] for e in effects if e["tarefa_id"] in set(ok)}) == 3
    assert all(r["status"] == "sucesso" for r in (pg_queue.row(i) for i in ok))


def test_joint_success_mark_gives_each_task_its_own_message_and_never_marks_a_failure(
        pg_queue, pg_server):
    """The successes of a batch are marked in one UPDATE at its end: each with its own
    message, none lost, none on a failed task.  A task whose code caught an SQL error
    left its transaction aborted: it fails alone, the rest of its batch commits."""
    pg_queue.sql(f'ALTER TABLE "{pg_queue.schema}".efeitos ADD COLUMN tx bigint '
                 "DEFAULT txid_current()")
    payloads = [{"efeito": f"m{i}", "fail": i % 4 == 1, "sql_error": i % 8 == 6}
                for i in range(16)]
    ids = _insert_many(pg_queue, pg_server, payloads)
    worker = pg_queue.start_worker(QUEUE_BATCH_SIZE="8", QUEUE_MAX_RETRY="1")
    wait_ready(worker)
    eventually(lambda: _count(pg_queue, "id = ANY(%s) AND status IN ('sucesso', 'falha')",
                                   (ids,)) == 16, timeout=30, message="16 tasks done")
    bad = {i for i, p in zip(ids, payloads) if p["fail"] or p["sql_error"]}
    good = [i for i in ids if i not in bad]
    assert len(bad) == 6
    for task_id in good:
        row = pg_queue.row(task_id)
        assert (row["status"], row["mensagem"]) == ("sucesso", f"ok {task_id}")
    for task_id, p in zip(ids, payloads):
        if task_id in bad:
            row = pg_queue.row(task_id)
            assert row["status"] == "falha", row
            if p["fail"]:
                assert "falha programada" in row["mensagem"]
    effects = pg_queue.effects("tipo = 'execute'")
    assert sorted(e["tarefa_id"] for e in effects) == sorted(good)  # once each, no failure's
    assert len({e["tx"] for e in effects}) == 2  # two batches, one commit each
    assert "marca de sucesso conjunta" not in worker.log()  # no batch was redone
    assert worker.proc.poll() is None


def test_a_refused_joint_mark_rolls_the_batch_back_then_marks_each_task_alone(
        pg_queue, pg_server):
    """A trigger refuses one task's success message: the joint mark fails, the batch is
    rolled back and runs again with each success marked at once, so only that task fails."""
    pg_queue.sql(f"""CREATE FUNCTION "{pg_queue.schema}".recusa() RETURNS trigger LANGUAGE plpgsql
                  AS $$ BEGIN RAISE EXCEPTION 'mensagem recusada pelo gatilho'; END $$""")
    pg_queue.sql(f"""CREATE TRIGGER recusa BEFORE UPDATE ON {pg_queue.table} FOR EACH ROW
                  WHEN (NEW.status = 'sucesso' AND NEW.mensagem = 'recusada')
                  EXECUTE FUNCTION "{pg_queue.schema}".recusa()""")
    payloads = [{"efeito": f"r{i}"} for i in range(5)]
    payloads[3]["return"] = "recusada"
    ids = _insert_many(pg_queue, pg_server, payloads)
    worker = pg_queue.start_worker(QUEUE_BATCH_SIZE="5", QUEUE_MAX_RETRY="1")
    wait_ready(worker)
    eventually(lambda: _count(pg_queue, "id = ANY(%s) AND status IN ('sucesso', 'falha')",
                                   (ids,)) == 5, timeout=30, message="5 tasks done")
    refused = ids[3]
    assert pg_queue.row(refused)["status"] == "falha"
    assert "recusada pelo gatilho" in pg_queue.row(refused)["mensagem"]
    for task_id in ids:
        if task_id != refused:
            row = pg_queue.row(task_id)
            assert (row["status"], row["mensagem"]) == ("sucesso", f"ok {task_id}")
    effects = pg_queue.effects("tipo = 'execute'")
    assert sorted(e["tarefa_id"] for e in effects) == sorted(i for i in ids if i != refused)
    assert "marca de sucesso conjunta" in worker.log()


class _CountingCursor(psycopg2.extensions.cursor):
    """Counts the round trips (execute calls) sent on its connection."""

    sent = 0

    def execute(self, query, vars=None):
        type(self).sent += 1
        return super().execute(query, vars)


def test_a_batch_costs_two_round_trips_per_task_and_four_per_batch(pg_queue):
    """Per task the release of the last savepoint with the task's SAVEPOINT (one round
    trip) and its work; per batch BEGIN, the claim, the joint success UPDATE and COMMIT.
    (Before: SAVEPOINT, work, success UPDATE and RELEASE per task; 3 per batch.)"""
    settings = pg_queue.settings()
    ids = [pg_queue.insert({"n": n}) for n in range(4 * 5)]
    session = DbSession.open(settings)
    try:
        session.conn.cursor_factory = _CountingCursor
        repo = TaskRepository(session, settings.queue_table, legacy=False)
        backend = make_backend(settings)
        backend.check(session)
        claimer = BatchClaimer(backend.guard(session, repo), backend.capabilities, 4)
        runner = BatchRunner(settings, repo, FunctionRouter(insert_effect(pg_queue.qeffects)))
        assert runner.run(claimer.claim()) == 4  # (the first claim also reads the horizon)
        before = _CountingCursor.sent
        for _ in range(4):
            assert runner.run(claimer.claim()) == 4
        assert (_CountingCursor.sent - before) / 4 == 4 * 2 + 4
    finally:
        session.close()
    assert sorted(e["tarefa_id"] for e in pg_queue.effects()) == ids  # each once
    assert all(pg_queue.row(i)["status"] == "sucesso" for i in ids)


def test_a_given_up_batch_ends_every_claim_it_reported(pg_queue):
    """A batch rolled back by its refused joint mark reported each task claimed: each
    must end there too (counted as taken over, its start time dropped), or the observer
    keeps one entry per task for ever and claims outnumber outcomes."""
    from nsj_queue_lib.observability.observe import TaskObserver

    pg_queue.sql(f"""CREATE FUNCTION "{pg_queue.schema}".recusa() RETURNS trigger LANGUAGE plpgsql
                  AS $$ BEGIN RAISE EXCEPTION 'mensagem recusada pelo gatilho'; END $$""")
    pg_queue.sql(f"""CREATE TRIGGER recusa BEFORE UPDATE ON {pg_queue.table} FOR EACH ROW
                  WHEN (NEW.status = 'sucesso' AND NEW.mensagem = 'recusada')
                  EXECUTE FUNCTION "{pg_queue.schema}".recusa()""")
    settings = pg_queue.settings()
    ids = [pg_queue.insert({"n": n}) for n in range(3)]
    observer = TaskObserver(settings.queue_name, settings.queue_max_retry)
    session = DbSession.open(settings)
    try:
        repo = TaskRepository(session, settings.queue_table, legacy=False)
        backend = make_backend(settings)
        backend.check(session)
        claimer = BatchClaimer(backend.guard(session, repo), backend.capabilities, 3)
        runner = BatchRunner(settings, repo, FunctionRouter(lambda tarefa, bd_conn: "recusada"),
                             observer)
        assert runner.run(claimer.claim()) == 0  # the joint mark was refused
    finally:
        session.close()
    assert [pg_queue.row(i)["status"] for i in ids] == ["pendente"] * 3
    snap = observer.snapshot()
    assert snap["claims"] == 3
    assert snap["taken_over"] + sum(snap["finished"].values()) == 3
    assert observer._starts == {}
