"""QUEUE_CONCURRENCY > 1: task threads in one real worker process, on PostgreSQL (its
sessions, the listener turn, kill -9).  Parallel threads and SIGTERM/HALT with concurrency
on every backend: tests/contract/test_contract_lifecycle.py."""

from __future__ import annotations

import json
import time

from tests.core.test_listener_turn import _sessions_of
from tests.fixtures.processes import wait_ready
from tests.fixtures.waiting import eventually


def _insert_many(queue, pg_server, payloads) -> list:
    conn = pg_server.connect(autocommit=False)
    try:
        ids = queue.client(conn).insert_tasks(
            [{"origem": "o", "destino": "d", "processo": "p", "payload": p} for p in payloads])
        conn.commit()
    finally:
        conn.close()
    return ids


def _running(queue) -> int:
    return int(queue.value(f"SELECT count(*) FROM {queue.table} WHERE status = 'processando'"))


def test_tasks_run_in_parallel_threads_with_one_connection_each_plus_a_listener(
        pg_queue, pg_server, tmp_path):
    health = tmp_path / "w.health"
    worker = pg_queue.start_worker(QUEUE_CONCURRENCY="4", QUEUE_HEALTH_FILE=str(health))
    wait_ready(worker)
    # 4 task connections + 1 listener connection, whatever the load.
    eventually(lambda: _sessions_of(pg_queue, worker.pid) == 5, message="N + 1 sessions")
    ids = _insert_many(pg_queue, pg_server, [{"efeito": f"p{i}", "sleep": 1.0} for i in range(8)])
    eventually(lambda: _running(pg_queue) == 4, timeout=10, message="4 tasks running at once")
    pg_queue.wait_idle(timeout=30)
    effects = pg_queue.effects()
    assert sorted(e["tarefa_id"] for e in effects) == sorted(ids)
    assert {e["pid"] for e in effects} == {worker.pid}
    assert _sessions_of(pg_queue, worker.pid) == 5
    # The heartbeat covers every thread: it counts the tasks of all of them.
    eventually(lambda: json.loads(health.read_text()).get("tarefas_executadas") == 8,
               timeout=15, message="health counts every thread's tasks")
    assert json.loads(health.read_text())["ok"] is True


def test_kill9_with_concurrency_rescues_every_running_task_once(pg_queue, pg_server, tmp_path):
    release = tmp_path / "release"
    payloads = [{"efeito": f"k{i}", "wait_file": str(release)} for i in range(3)]
    ids = _insert_many(pg_queue, pg_server, payloads)
    worker = pg_queue.start_worker(QUEUE_CONCURRENCY="3")
    eventually(lambda: _running(pg_queue) == 3, timeout=15, message="3 tasks running")
    worker.kill9()
    release.touch()
    pg_queue.start_worker(QUEUE_CONCURRENCY="3")  # rescues at start
    eventually(lambda: all(any(r["status"] == "sucesso" for r in pg_queue.chain(i)) for i in ids),
               timeout=30, message="each task done by its retry")
    effects = pg_queue.effects()
    assert sorted(e["tarefa_id"] for e in effects) == sorted(
        next(r["id"] for r in pg_queue.chain(i) if r["status"] == "sucesso") for i in ids)
    assert len(effects) == 3


def test_listeners_of_several_processes_take_turns(pg_queue, pg_server):
    """With QUEUE_CONCURRENCY the process's listener takes the queue's listener turn
    while a task thread is idle: one listener of the fleet is woken per notification."""
    from tests.core.test_listener_turn import _turn

    workers = [pg_queue.start_worker(QUEUE_CONCURRENCY="3") for _ in range(3)]
    for w in workers:
        wait_ready(w)
    eventually(lambda: _turn(pg_queue) == {"holder": 1, "waiting": 2},
               message="one listener holds the turn, the others wait for it")
    ids = []
    for i in range(30):
        ids.append(pg_queue.insert({"efeito": f"c{i}"}))
        time.sleep(0.02)
    pg_queue.wait_idle(timeout=30)
    assert sorted(e["tarefa_id"] for e in pg_queue.effects()) == sorted(ids)
    assert len({e["pid"] for e in pg_queue.effects()}) >= 2, "the turn did not move"
    pg_queue.sql("SELECT pg_notify(%s, 'HALT')", (pg_queue.fila,))
    for w in workers:
        assert w.wait_exit(30) == 0, w.log()
