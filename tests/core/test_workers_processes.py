"""Worker processes on PostgreSQL: a second SIGTERM, HALT sent by a bare NOTIFY (as 1.2.2
did), the dict payload as JSON text.  Concurrency, SIGTERM, HALT and kill -9 rescue on
every backend: tests/contract/test_contract_lifecycle.py."""

from __future__ import annotations

import json
import signal
import time

from tests.fixtures.queue import held_payload
from tests.fixtures.waiting import eventually


def test_second_sigterm_exits_at_once(pg_queue, tmp_path):
    payload, started, _release = held_payload(tmp_path, "term2")
    first = pg_queue.insert(payload)
    w = pg_queue.start_worker()
    eventually(started.exists, message="task started")
    w.signal(signal.SIGTERM)
    eventually(lambda: "SIGTERM recebido" in w.log(), message="first SIGTERM handled")
    t0 = time.monotonic()
    w.signal(signal.SIGTERM)
    code = w.wait_exit(10)
    assert code != 0
    assert time.monotonic() - t0 < 5
    assert pg_queue.effects() == []  # the unfinished task's writes were rolled back
    assert pg_queue.row(first)["status"] == "processando"  # left for the rescue


def test_halt_notification_stops_worker_cleanly(pg_queue):
    w = pg_queue.start_ready_worker()
    pg_queue.sql("SELECT pg_notify(%s, 'HALT')", (pg_queue.fila,))
    assert w.wait_exit(15) == 0
    assert "HALT" in w.log()


def test_halt_is_sent_with_notify_statement(pg_queue):
    w = pg_queue.start_ready_worker()
    task_id = pg_queue.insert({"efeito": "before"})
    pg_queue.wait_status(task_id, "sucesso")
    pg_queue.sql(f'NOTIFY "{pg_queue.fila}", \'HALT\'')
    assert w.wait_exit(15) == 0
    later = pg_queue.insert({"efeito": "after"})
    assert pg_queue.row(later)["status"] == "pendente"
    assert [e["chave"] for e in pg_queue.effects()] == ["before"]


def test_dict_payload_reaches_worker_as_its_json_text(pg_queue):
    payload = {"report": True, "x": [1, 2]}
    task_id = pg_queue.client().insert_task("o", "d", "p", None, payload)
    pg_queue.start_worker()
    pg_queue.wait_status(task_id, "sucesso")
    report = json.loads(pg_queue.effects()[0]["chave"])
    assert report["payload_type"] == "str"
    assert json.loads(report["payload"]) == payload
