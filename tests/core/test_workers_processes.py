"""Worker processes: concurrency, crashes, signals and HALT."""

from __future__ import annotations

import json
import signal
import time

from tests.fixtures.processes import wait_ready
from tests.fixtures.waiting import eventually


def _crash_payload(tmp_path, efeito: str) -> tuple:
    started = tmp_path / f"{efeito}.started"
    release = tmp_path / f"{efeito}.release"
    payload = {"efeito": efeito, "started_file": str(started), "wait_file": str(release)}
    return payload, started, release


def test_three_workers_run_300_tasks_exactly_once(queue, pg_server):
    workers = [queue.start_worker() for _ in range(3)]
    for w in workers:
        wait_ready(w)
    conn = pg_server.connect(autocommit=False)
    try:
        ids = queue.client(conn).insert_tasks(
            [{"origem": "o", "destino": "d", "processo": "p", "chave_externa": str(i),
              "payload": {"efeito": f"e{i}", "sleep": 0.005}} for i in range(300)])
        conn.commit()
    finally:
        conn.close()
    assert len(ids) == 300
    queue.wait_idle(timeout=60)

    effects = queue.effects()
    assert len(effects) == 300
    assert sorted(e["tarefa_id"] for e in effects) == sorted(ids)
    assert {e["chave"] for e in effects} == {f"e{i}" for i in range(300)}
    assert queue.count("status = 'sucesso'") == 300
    assert queue.count() == 300  # no retry, no dead letter
    assert len({e["pid"] for e in effects}) >= 2, "only one worker took tasks"
    assert all(w.proc.poll() is None for w in workers)


def test_kill9_mid_task_is_rescued_by_next_worker_start(queue, tmp_path):
    payload, started, release = _crash_payload(tmp_path, "crash")
    first = queue.insert(payload)
    w1 = queue.start_worker()
    eventually(started.exists, message="task started")
    assert queue.row(first)["status"] == "processando"
    assert queue.task_lock_held(first)

    w1.kill9()
    release.touch()
    assert queue.row(first)["status"] == "processando"  # nobody ran cleanup
    # The server ends the dead session (and its advisory lock) once it sees the socket close.
    eventually(lambda: not queue.task_lock_held(first), message="dead session's lock released")
    assert queue.effects() == []  # the killed attempt's writes were rolled back

    queue.start_worker()  # rescues at start
    retry = eventually(lambda: next((r for r in queue.chain(first)
                                     if r["tentativa"] == 2 and r["status"] == "sucesso"), None),
                       message="retry attempt succeeds")
    old = queue.row(first)
    assert old["status"] == "falha"
    assert "worker parou" in old["mensagem"]
    assert old["reenfileirado"] is True
    assert retry["id_anterior"] == first
    assert retry["status_anterior"] == "falha"
    assert retry["mensagem_anterior"] == old["mensagem"]
    assert [(e["tarefa_id"], e["chave"]) for e in queue.effects()] == [(retry["id"], "crash")]
    assert queue.count() == 2


def test_sigterm_finishes_running_task_and_takes_no_other(queue, tmp_path):
    payload, started, release = _crash_payload(tmp_path, "term")
    first = queue.insert(payload)
    w = queue.start_worker()
    eventually(started.exists, message="task started")
    second = queue.insert({"efeito": "second"})

    w.signal(signal.SIGTERM)
    eventually(lambda: "SIGTERM recebido" in w.log(), message="SIGTERM handled")
    assert w.proc.poll() is None  # still finishing the task
    release.touch()
    assert w.wait_exit(20) == 0

    assert queue.row(first)["status"] == "sucesso"
    assert queue.row(second)["status"] == "pendente"
    assert [(e["tarefa_id"], e["chave"]) for e in queue.effects()] == [(first, "term")]


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
