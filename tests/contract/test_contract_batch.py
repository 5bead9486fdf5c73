"""Contract, batch mode (QUEUE_BATCH_SIZE > 1), with worker processes on every backend
(`each_backend_queue`): claim order and a failure inside a batch, kill -9 mid-batch, HALT
and SIGTERM mid-batch.  A backend whose `batch_claim` capability is False (checked against
the database, as a worker checks it) must refuse batch mode at start with a clear error
instead; these tests assert that refusal there."""

from __future__ import annotations

import signal
import time
from typing import Any, Optional

import pytest

from nsj_queue_lib.admin import QueueAdmin
from tests.fixtures.processes import WorkerProc, assert_config_exit, wait_ready
from tests.fixtures.queue import Queue, effects_by_key
from tests.fixtures.waiting import eventually

REFUSAL = "QUEUE_BATCH_SIZE > 1 exige FOR UPDATE SKIP LOCKED"


def _batch_worker(q: Queue, size: int, **extra: Any) -> Optional[WorkerProc]:
    """A batch worker; None when the backend has no batch claim, after asserting that the
    worker refused to start and left every task waiting."""
    waiting = q.count("status = 'pendente'")
    worker = q.start_worker(QUEUE_BATCH_SIZE=str(size), **extra)
    if q.checked_capabilities().batch_claim:
        return worker
    assert_config_exit(worker, REFUSAL)
    assert q.count("status = 'pendente'") == waiting and q.effects() == []
    return None


def test_batch_by_priority_then_age_a_failure_rolls_back_only_its_task(each_backend_queue):
    low = each_backend_queue.insert_many([{"efeito": f"low{i}"} for i in range(3)], prioridade=10)
    high = each_backend_queue.insert_many([{"efeito": f"high{i}"} for i in range(3)], prioridade=90)
    bad = each_backend_queue.insert({"efeito": "ruim", "fail": True}, prioridade=50)
    worker = _batch_worker(each_backend_queue, 20, QUEUE_MAX_RETRY="1")
    if worker is None:
        return
    wait_ready(worker)
    for task_id in [*low, *high, bad]:
        each_backend_queue.wait_chain_done(task_id)
    assert [e["tarefa_id"] for e in each_backend_queue.effects("tipo = 'execute'")] == [*high, *low]
    # The failing task rolled back its own writes only; each success has its own message
    # (the batch marks them together at its end).
    assert "ruim" not in effects_by_key(each_backend_queue)
    failed = each_backend_queue.row(bad)
    assert failed["status"] == "falha" and "falha programada" in failed["mensagem"]
    assert ([each_backend_queue.row(i)["mensagem"] for i in [*high, *low]]
            == [f"ok {i}" for i in [*high, *low]])
    # A single task with an idle batch worker runs at once (the batch never waits to fill).
    started = time.monotonic()
    single = each_backend_queue.insert({"efeito": "sozinha"})
    each_backend_queue.wait_status(single, "sucesso", timeout=10)
    assert time.monotonic() - started < 5
    assert worker.proc.poll() is None


def test_kill9_mid_batch_rolls_the_batch_back_and_each_task_runs_once(each_backend_queue, tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    payloads = [{"efeito": f"b{i}"} for i in range(4)]
    payloads[2].update(started_file=str(started), wait_file=str(release))
    ids = each_backend_queue.insert_many(payloads)
    victim = _batch_worker(each_backend_queue, 4)
    if victim is None:
        return
    eventually(started.exists, 15, message="third task of the batch started")
    assert each_backend_queue.count("status = 'pendente'") == 4  # nothing of the batch is visible
    victim.kill9()
    release.write_text("ok")
    assert each_backend_queue.effects() == []  # its two finished tasks were rolled back with it
    second = each_backend_queue.start_ready_worker(QUEUE_BATCH_SIZE="4")
    eventually(lambda: each_backend_queue.count("status = 'sucesso'") == 4, 30,
               message="batch ran again")
    assert sorted(e["tarefa_id"] for e in each_backend_queue.effects()) == sorted(ids)  # once each
    assert {e["pid"] for e in each_backend_queue.effects()} == {second.pid}
    assert each_backend_queue.count() == 4  # no failed attempt, no retry: the crash left no trace


@pytest.mark.parametrize("stop", ["halt", "sigterm"])
def test_a_stop_mid_batch_finishes_the_batch_and_takes_no_other(each_backend_queue, tmp_path, stop):
    """HALT and SIGTERM sent while a batch runs let that batch finish whole (each of its
    tasks once), take no other task, and end the process (exit 0)."""
    started, release = tmp_path / "started", tmp_path / "release"
    payloads = [{"efeito": f"b{i}"} for i in range(3)]
    payloads[1].update(started_file=str(started), wait_file=str(release))
    ids = each_backend_queue.insert_many(payloads)
    worker = _batch_worker(each_backend_queue, 3)
    if worker is None:
        return
    eventually(started.exists, 30, message="second task of the batch started")
    # the batch's claim is not committed yet
    assert each_backend_queue.count("status = 'pendente'") == 3
    # after the claim: not part of the batch
    waiting = each_backend_queue.insert({"efeito": "depois"})
    if stop == "halt":
        with QueueAdmin.from_settings(each_backend_queue.settings()) as admin:
            admin.halt(por="contrato")  # committed before the batch can end
    else:
        worker.signal(signal.SIGTERM)
    release.touch()
    assert worker.wait_exit(30) == 0, worker.log()
    assert [each_backend_queue.row(i)["status"] for i in ids] == ["sucesso"] * 3
    assert sorted(e["tarefa_id"] for e in each_backend_queue.effects()) == sorted(ids)  # once each
    assert each_backend_queue.row(waiting)["status"] == "pendente", worker.log()
    assert each_backend_queue.count() == 4  # no retry, no failed attempt
    if stop == "halt":
        assert "HALT recebido no canal" in worker.log()
