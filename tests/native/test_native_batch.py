"""Batch mode (QUEUE_BATCH_SIZE) in MySQL native mode on MariaDB, with real workers."""

from __future__ import annotations

from tests.fixtures.processes import wait_ready
from tests.fixtures.queue import effects_by_key
from tests.fixtures.waiting import eventually


def test_batch_with_a_failing_task_and_priority_order(nq):
    low = nq.insert_many([{"efeito": f"low{i}"} for i in range(4)], prioridade=10)
    high = nq.insert_many([{"efeito": f"high{i}"} for i in range(4)], prioridade=90)
    bad = nq.insert({"efeito": "ruim", "fail": True}, prioridade=50)
    worker = nq.start_worker(QUEUE_BATCH_SIZE="20", QUEUE_MAX_RETRY="1")
    wait_ready(worker)
    for task_id in [*low, *high, bad]:
        nq.wait_chain_done(task_id)
    # One batch: by priority, then age; the failing task rolled back only its own effect.
    order = [e["tarefa_id"] for e in nq.effects("tipo = 'execute'")]
    assert order == [*high, *low]
    assert effects_by_key(nq).get("ruim") is None
    assert nq.row(bad)["status"] == "falha"
    assert all(nq.row(i)["status"] == "sucesso" for i in [*low, *high])
    assert worker.proc.poll() is None


def test_kill9_mid_batch_rolls_the_batch_back_and_each_task_runs_once(nq, tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    payloads = [{"efeito": f"b{i}"} for i in range(4)]
    payloads[2].update(started_file=str(started), wait_file=str(release))
    ids = nq.insert_many(payloads)
    victim = nq.start_worker(QUEUE_BATCH_SIZE="4")
    eventually(started.exists, 15, message="third task of the batch started")
    assert nq.count("status = 'pendente'") == 4  # nothing of the batch is visible
    victim.kill9()
    release.write_text("ok")
    second = nq.start_worker(QUEUE_BATCH_SIZE="4")
    wait_ready(second)
    eventually(lambda: nq.count("status = 'sucesso'") == 4, 30, message="batch ran again")
    assert sorted(e["tarefa_id"] for e in nq.effects()) == sorted(ids)  # once each
    assert nq.count() == 4  # no failed attempt, no retry


def test_concurrency_threads_on_mysql_native(nq):
    """QUEUE_CONCURRENCY on MySQL native mode: 3 task threads run 3 slow tasks at once."""
    ids = nq.insert_many([{"efeito": f"c{i}", "sleep": 1.0} for i in range(6)])
    worker = nq.start_worker(QUEUE_CONCURRENCY="3")
    wait_ready(worker)
    eventually(lambda: nq.count("status = 'processando'") == 3, 15,
               message="3 tasks running at once")
    nq.wait_idle()
    assert sorted(e["tarefa_id"] for e in nq.effects()) == sorted(ids)
    assert worker.proc.poll() is None
