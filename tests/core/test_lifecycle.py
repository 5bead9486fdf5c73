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


def test_rolled_back_producer_transaction_never_runs(pg_queue, pg_server):
    pg_queue.start_ready_worker()
    conn = pg_server.connect(autocommit=False)
    try:
        client = pg_queue.client(conn)
        lost_id = client.insert_task("teste", "teste", "teste", "rb", {"efeito": "rolled_back"})
        conn.rollback()
        control_id = client.insert_task("teste", "teste", "teste", "ok", {"efeito": "control"})
        conn.commit()
    finally:
        conn.close()

    pg_queue.wait_status(control_id, "sucesso")
    pg_queue.wait_idle()
    assert pg_queue.count(f"id = {lost_id}") == 0
    assert [r["id"] for r in pg_queue.rows()] == [control_id]
    assert [(e["tarefa_id"], e["chave"]) for e in pg_queue.effects()] == [(control_id, "control")]


def test_lost_notification_is_picked_up_by_periodic_poll(pg_queue):
    pg_queue.sql(f'ALTER TABLE "{pg_queue.schema}"."{pg_queue.fila}" DISABLE TRIGGER ALL')
    pg_queue.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="1")
    started = time.monotonic()
    task_id = pg_queue.insert({"efeito": "lost"})
    pg_queue.wait_status(task_id, "sucesso", timeout=5)
    assert time.monotonic() - started < 5
    assert len(pg_queue.effects()) == 1


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


def test_payload_hash_and_json_of_dict_payload(each_db_queue):
    task_id = each_db_queue.client().insert_task("o", "d", "p", "c", {"a": 1, "b": "ç"})
    row = each_db_queue.row(task_id)
    assert json.loads(row["payload"]) == {"a": 1, "b": "ç"}
    assert row["payload_hash"] == hashlib.sha256(row["payload"].encode()).hexdigest()


