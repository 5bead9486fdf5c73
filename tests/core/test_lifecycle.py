"""A task's life with worker subprocesses, what only PostgreSQL has: its trigger's wake-up
(mixed-case names, a lost notification), a producer's rolled-back transaction.  The task's
life on every backend (success, retries, dead letters, claim order, scheduling, purge,
kill -9 rescue, HALT, pause, batch, fan-out, webhook) is the contract suite, tests/contract."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
import uuid

from tests.fixtures.queue import Queue


def _seconds(delta: dt.timedelta) -> float:
    return delta.total_seconds()


def test_rolled_back_producer_transaction_never_runs(queue, pg_server):
    queue.start_ready_worker()
    conn = pg_server.connect(autocommit=False)
    try:
        client = queue.client(conn)
        lost_id = client.insert_task("teste", "teste", "teste", "rb", {"efeito": "rolled_back"})
        conn.rollback()
        control_id = client.insert_task("teste", "teste", "teste", "ok", {"efeito": "control"})
        conn.commit()
    finally:
        conn.close()

    queue.wait_status(control_id, "sucesso")
    queue.wait_idle()
    assert queue.count(f"id = {lost_id}") == 0
    assert [r["id"] for r in queue.rows()] == [control_id]
    assert [(e["tarefa_id"], e["chave"]) for e in queue.effects()] == [(control_id, "control")]


def test_lost_notification_is_picked_up_by_periodic_poll(queue):
    queue.sql(f'ALTER TABLE "{queue.schema}"."{queue.fila}" DISABLE TRIGGER ALL')
    queue.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="1")
    started = time.monotonic()
    task_id = queue.insert({"efeito": "lost"})
    queue.wait_status(task_id, "sucesso", timeout=5)
    assert time.monotonic() - started < 5
    assert len(queue.effects()) == 1


def test_mixed_case_queue_name_wakes_worker_on_insert(pg_server):
    q = Queue.create(pg_server, schema=f"t_{uuid.uuid4().hex[:10]}", fila="FilaX")
    try:
        # A 60 s poll: only the trigger's notification can run the task in time.
        # Quoted names keep their case (unquoted ones fold to lower case, as in SQL).
        q.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="60")
        assert q.env()["QUEUE_TABLE"] == f'{q.schema}."FilaX"'
        task_id = q.insert({"efeito": "case"})
        q.wait_status(task_id, "sucesso", timeout=5)
        assert [e["chave"] for e in q.effects()] == ["case"]
    finally:
        q.destroy()


def test_payload_hash_and_json_of_dict_payload(dbq):
    task_id = dbq.client().insert_task("o", "d", "p", "c", {"a": 1, "b": "ç"})
    row = dbq.row(task_id)
    assert json.loads(row["payload"]) == {"a": 1, "b": "ç"}
    assert row["payload_hash"] == hashlib.sha256(row["payload"].encode()).hexdigest()


