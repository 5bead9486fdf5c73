"""Contract, claim order and timing, with worker processes on every backend (`each_backend_queue`:
PostgreSQL, MySQL native on MariaDB, the socket server on PostgreSQL and on MariaDB):
priority, then age (data_hora), then scheduled time; tasks waiting before a worker starts;
an idle worker woken by an insert alone."""

from __future__ import annotations

import datetime as dt
import statistics
import time

from tests.fixtures.queue import effects_by_key
from tests.fixtures.waiting import eventually


def test_priority_then_age_order(each_backend_queue):
    prios = [10, 90, 50, 90, 30, 50]
    ids = [each_backend_queue.insert({"efeito": f"p{i}"}, prioridade=p)
           for i, p in enumerate(prios)]
    # Inserted last but due a minute ago: first among its priority.
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1)
    old_high = each_backend_queue.insert({"efeito": "old_high"}, prioridade=90, data_hora=old)
    each_backend_queue.start_worker()
    each_backend_queue.wait_idle()
    expected = [old_high] + [i for _, i in sorted(zip(prios, ids), key=lambda t: (-t[0], t[1]))]
    assert [e["tarefa_id"] for e in each_backend_queue.effects()] == expected
    assert each_backend_queue.count("status = 'sucesso'") == len(ids) + 1


def test_tasks_inserted_before_worker_starts_are_run(each_backend_queue):
    ids = [each_backend_queue.insert({"efeito": f"pre{i}"}) for i in range(3)]
    each_backend_queue.start_worker()
    for task_id in ids:
        each_backend_queue.wait_status(task_id, "sucesso")
    assert sorted(e["tarefa_id"] for e in each_backend_queue.effects()) == ids


def test_scheduled_tasks_run_when_due_in_due_order_never_before(each_backend_queue):
    """A task scheduled later (data_hora in the future) is not claimed before its time,
    whatever its priority; due tasks run in the order they fall due."""
    each_backend_queue.start_ready_worker()
    start = dt.datetime.now(dt.timezone.utc)
    later = each_backend_queue.insert({"efeito": "mais_tarde"}, prioridade=90,
                                      data_hora=start + dt.timedelta(seconds=3.5))
    sooner = each_backend_queue.insert({"efeito": "mais_cedo"}, prioridade=10,
                                       data_hora=start + dt.timedelta(seconds=2))
    now = each_backend_queue.insert({"efeito": "agora"}, prioridade=10)
    each_backend_queue.wait_status(now, "sucesso", timeout=8)
    # its priority does not bring it forward
    assert each_backend_queue.row(later)["status"] == "pendente"
    for task_id in (sooner, later):
        row = each_backend_queue.wait_status(task_id, "sucesso", timeout=10)
        # Both clocks are the database's (timestamptz on PostgreSQL, UTC DATETIME on
        # MariaDB): the run starts at data_hora at the earliest, promptly after it.
        [effect] = each_backend_queue.effects("tarefa_id = %s", (task_id,))
        late = (effect["criado"] - row["data_hora"]).total_seconds()
        assert 0 <= late <= 1.5, (task_id, late)
    assert [e["tarefa_id"] for e in each_backend_queue.effects()] == [now, sooner, later]
    assert effects_by_key(each_backend_queue) == {"agora": 1, "mais_cedo": 1, "mais_tarde": 1}


def test_idle_worker_picks_up_new_tasks_without_producer_notify(each_backend_queue):
    """QUEUE_WAIT_NOTIFY_INTERVAL 30 s and CHECK_TASKS_INTERVAL at its 15 s default: the
    wake-up comes from PostgreSQL's trigger, MySQL native's probe, or the socket
    server's probe (QUEUE_POLL_INTERVAL, 0.1 s); the producer never notifies."""
    worker = each_backend_queue.start_ready_worker()
    if each_backend_queue.mode == "cs":
        eventually(lambda: each_backend_queue.server_status()["listeners"] == 1, 5,
                   message="worker no servidor")
    delays = []
    for i in range(10):
        time.sleep(0.13 + 0.011 * i)  # an idle worker, a producer at a random moment
        task_id = each_backend_queue.insert({"efeito": f"p{i}"})
        row = each_backend_queue.wait_status(task_id, "sucesso", timeout=5)
        [effect] = each_backend_queue.effects("tarefa_id = %s", (task_id,))
        delays.append((effect["criado"] - row["data_hora"]).total_seconds())
    assert statistics.median(delays) <= 0.2, delays  # 0.1 s probe, room for a shared CPU
    assert {e["pid"] for e in each_backend_queue.effects()} == {worker.pid}
    assert worker.proc.poll() is None
