"""Worker processes: concurrency, SIGTERM and HALT on every backend (`lq`), HALT by
NOTIFY on PostgreSQL (kill -9 rescue: tests/core/test_lifecycle.py)."""

from __future__ import annotations

import json
import signal
import time

from nsj_queue_lib.admin import QueueAdmin
from tests.fixtures.processes import wait_all_ready
from tests.fixtures.queue import effects_by_key
from tests.fixtures.waiting import eventually


def _crash_payload(tmp_path, efeito: str) -> tuple:
    started = tmp_path / f"{efeito}.started"
    release = tmp_path / f"{efeito}.release"
    payload = {"efeito": efeito, "started_file": str(started), "wait_file": str(release)}
    return payload, started, release


def test_three_workers_run_300_tasks_exactly_once(lq):
    workers = [lq.start_worker() for _ in range(3)]
    wait_all_ready(workers)
    keys = [f"e{i}" for i in range(300)]
    ids = lq.insert_many([{"efeito": k, "sleep": 0.003} for k in keys])
    assert len(ids) == 300
    lq.wait_idle(timeout=60)

    effects = lq.effects()
    assert sorted(e["tarefa_id"] for e in effects) == sorted(ids)
    assert effects_by_key(lq) == {k: 1 for k in keys}
    assert lq.count("status = 'sucesso' AND tentativa = 1") == 300
    assert lq.count() == 300  # no retry, no dead letter
    assert len({e["pid"] for e in effects}) >= 2, "only one worker took tasks"
    assert all(w.proc.poll() is None for w in workers)


def test_sigterm_finishes_running_task_and_takes_no_other(lq, tmp_path):
    payload, started, release = _crash_payload(tmp_path, "term")
    first = lq.insert(payload)
    w = lq.start_worker()
    eventually(started.exists, message="task started")
    second = lq.insert({"efeito": "second"})

    w.signal(signal.SIGTERM)
    eventually(lambda: "SIGTERM recebido" in w.log(), message="SIGTERM handled")
    assert w.proc.poll() is None  # still finishing the task
    release.touch()
    assert w.wait_exit(20) == 0

    assert lq.row(first)["status"] == "sucesso"
    assert lq.row(second)["status"] == "pendente"
    assert [(e["tarefa_id"], e["chave"]) for e in lq.effects()] == [(first, "term")]
    if lq.mode == "cs":  # the worker left the server holding nothing
        eventually(lambda: lq.server_status()["locks"] == 0, 5, message="locks liberados")


def test_second_sigterm_exits_at_once(queue, tmp_path):
    payload, started, _release = _crash_payload(tmp_path, "term2")
    first = queue.insert(payload)
    w = queue.start_worker()
    eventually(started.exists, message="task started")
    w.signal(signal.SIGTERM)
    eventually(lambda: "SIGTERM recebido" in w.log(), message="first SIGTERM handled")
    t0 = time.monotonic()
    w.signal(signal.SIGTERM)
    code = w.wait_exit(10)
    assert code != 0
    assert time.monotonic() - t0 < 5
    assert queue.effects() == []  # the unfinished task's writes were rolled back
    assert queue.row(first)["status"] == "processando"  # left for the rescue


def test_halt_finishes_running_task_and_spares_later_workers(lq, tmp_path):
    payload, started, release = _crash_payload(tmp_path, "halt")
    first = lq.insert(payload)
    w = lq.start_ready_worker()
    eventually(started.exists, message="task started")
    with QueueAdmin.from_settings(lq.settings()) as admin:
        admin.halt(por="teste")
    release.touch()
    assert w.wait_exit(20) == 0
    assert "HALT recebido no canal" in w.log()
    assert lq.row(first)["status"] == "sucesso"
    later = lq.insert({"efeito": "after"})
    assert lq.row(later)["status"] == "pendente"
    assert [(e["tarefa_id"], e["chave"]) for e in lq.effects()] == [(first, "halt")]

    # A worker started after the HALT is not stopped by it (on MySQL native the
    # request stays in the control table).
    w2 = lq.start_ready_worker()
    lq.wait_status(later, "sucesso")
    assert w2.proc.poll() is None
    assert "HALT" not in w2.log()


def test_halt_stops_every_thread_of_a_concurrent_worker(lq):
    w = lq.start_ready_worker(QUEUE_CONCURRENCY="3")
    ids = lq.insert_many([{"efeito": f"c{i}"} for i in range(6)])
    for task_id in ids:
        lq.wait_status(task_id, "sucesso")
    with QueueAdmin.from_settings(lq.settings()) as admin:
        admin.halt()
    assert w.wait_exit(20) == 0, w.log()
    assert "HALT recebido no canal" in w.log()
    later = lq.insert({"efeito": "after"})
    assert lq.row(later)["status"] == "pendente"
    assert sorted(e["tarefa_id"] for e in lq.effects()) == sorted(ids)


def test_halt_notification_stops_worker_cleanly(queue):
    w = queue.start_ready_worker()
    queue.sql("SELECT pg_notify(%s, 'HALT')", (queue.fila,))
    assert w.wait_exit(15) == 0
    assert "HALT" in w.log()


def test_halt_is_sent_with_notify_statement(queue):
    w = queue.start_ready_worker()
    task_id = queue.insert({"efeito": "before"})
    queue.wait_status(task_id, "sucesso")
    queue.sql(f'NOTIFY "{queue.fila}", \'HALT\'')
    assert w.wait_exit(15) == 0
    later = queue.insert({"efeito": "after"})
    assert queue.row(later)["status"] == "pendente"
    assert [e["chave"] for e in queue.effects()] == ["before"]


def test_dict_payload_reaches_worker_as_its_json_text(queue):
    payload = {"report": True, "x": [1, 2]}
    task_id = queue.client().insert_task("o", "d", "p", None, payload)
    queue.start_worker()
    queue.wait_status(task_id, "sucesso")
    report = json.loads(queue.effects()[0]["chave"])
    assert report["payload_type"] == "str"
    assert json.loads(report["payload"]) == payload
