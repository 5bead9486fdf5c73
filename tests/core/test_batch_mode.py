"""Batch mode (QUEUE_BATCH_SIZE > 1) with real worker processes on PostgreSQL.

The effects table gets a column defaulting to txid_current() (the top-level transaction,
also inside a savepoint): that is how the tests see that a batch commits once.
"""

from __future__ import annotations

import signal
import time

from tests.fixtures.processes import wait_ready
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


def test_batch_commits_once_per_batch_and_a_failure_rolls_back_only_its_task(queue, pg_server):
    queue.sql(f'ALTER TABLE "{queue.schema}".efeitos ADD COLUMN tx bigint '
              "DEFAULT txid_current()")
    payloads = [{"efeito": f"e{i}", "fail": i % 7 == 3} for i in range(30)]
    ids = _insert_many(queue, pg_server, payloads)
    worker = queue.start_worker(QUEUE_BATCH_SIZE="10")
    wait_ready(worker)
    eventually(lambda: _count(queue, "id = ANY(%s) AND status IN ('sucesso', 'falha')",
                                   (ids,)) == 30, timeout=30, message="30 tasks done")
    failing = [i for i, p in zip(ids, payloads) if p["fail"]]
    ok = [i for i, p in zip(ids, payloads) if not p["fail"]]
    # Each succeeded task's effect is there once; failed tasks' effects were rolled back
    # with their savepoint, and their failure (and next attempt) was recorded.
    effects = queue.effects("tipo = 'execute'")
    first_attempt = {e["tarefa_id"] for e in effects} & set(ids)
    assert first_attempt == set(ok)
    assert len([e for e in effects if e["tarefa_id"] in set(ok)]) == len(ok)
    for task_id in failing:
        row = queue.row(task_id)
        assert row["status"] == "falha" and row["reenfileirado"] is True
        assert "falha programada" in row["mensagem"]
        assert [r["tentativa"] for r in queue.chain(task_id)][:2] == [1, 2]
    # One transaction per batch: the 30 first attempts ran in 3 of them.
    assert len({e["tx"] for e in effects if e["tarefa_id"] in set(ok)}) == 3
    assert all(r["status"] == "sucesso" for r in (queue.row(i) for i in ok))


def test_batch_takes_tasks_by_priority_then_age_and_never_waits_to_fill(queue, pg_server):
    low = _insert_many(queue, pg_server, [{"efeito": f"low{i}"} for i in range(3)], prioridade=10)
    high = _insert_many(queue, pg_server, [{"efeito": f"high{i}"} for i in range(3)],
                        prioridade=90)
    worker = queue.start_worker(QUEUE_BATCH_SIZE="50")
    wait_ready(worker)
    queue.wait_idle(timeout=30)
    order = [e["tarefa_id"] for e in sorted(queue.effects(), key=lambda e: e["id"])]
    assert order == high + low
    # A single task with an idle batch worker runs at once (the batch does not wait).
    t0 = time.monotonic()
    single = queue.insert({"efeito": "sozinha"})
    queue.wait_status(single, "sucesso", timeout=10)
    assert time.monotonic() - t0 < 5


def test_kill9_mid_batch_rolls_back_the_whole_batch_and_each_task_runs_once(
        queue, pg_server, tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    payloads = [{"efeito": f"b{i}"} for i in range(5)]
    payloads[2].update(started_file=str(started), wait_file=str(release))
    ids = _insert_many(queue, pg_server, payloads)
    worker = queue.start_worker(QUEUE_BATCH_SIZE="5")
    eventually(started.exists, message="third task of the batch started")
    # Two tasks of the batch already ran (uncommitted): nothing of the batch is visible.
    assert _count(queue, "id = ANY(%s) AND status = 'pendente'", (ids,)) == 5
    worker.kill9()
    release.touch()
    assert queue.effects() == []
    second = queue.start_worker(QUEUE_BATCH_SIZE="5")
    wait_ready(second)
    eventually(lambda: _count(queue, "id = ANY(%s) AND status = 'sucesso'", (ids,)) == 5,
               timeout=30, message="the batch ran again, whole")
    effects = queue.effects()
    assert sorted(e["tarefa_id"] for e in effects) == sorted(ids)  # once each
    assert queue.count() == 5  # no failed attempt, no retry: the crash left no trace


def test_sigterm_mid_batch_finishes_the_whole_batch_and_takes_no_other(
        queue, pg_server, tmp_path):
    started = tmp_path / "started"
    payloads = [{"efeito": f"s{i}", "sleep": 0.4} for i in range(3)]
    payloads[0]["started_file"] = str(started)
    ids = _insert_many(queue, pg_server, payloads)
    worker = queue.start_worker(QUEUE_BATCH_SIZE="3")
    eventually(started.exists, message="first task of the batch started")
    waiting = queue.insert({"efeito": "depois"})
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(20) == 0, worker.log()
    assert _count(queue, "id = ANY(%s) AND status = 'sucesso'", (ids,)) == 3
    assert sorted(e["tarefa_id"] for e in queue.effects()) == sorted(ids)
    assert queue.row(waiting)["status"] == "pendente"
