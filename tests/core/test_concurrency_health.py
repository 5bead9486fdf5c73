"""The health of a QUEUE_CONCURRENCY worker names a thread that lost its connection.

A real worker process (3 task threads + the listener) logs in as a PostgreSQL role of its
own; the test terminates one thread's backend and sets the role's CONNECTION LIMIT to 0,
so that thread cannot reconnect.  `python -m nsj_queue_lib.health` (the probe command)
must report the worker unhealthy and say which kind of thread is down, the other threads
go on working, and once the role may connect again the worker is healthy again.
"""

from __future__ import annotations

import pytest

from tests.core.test_connections_per_worker import Limited
from tests.fixtures.processes import run_python, wait_ready
from tests.fixtures.waiting import eventually

THREADS = 3


def _probe(env: dict):
    return run_python(["-m", "nsj_queue_lib.health"], env=env)


def _listener_pid(queue, login: Limited):
    """The listener's backend: the one holding the listener turn (an advisory lock) while
    the task threads are idle."""
    return queue.value(
        "SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE a.usename = %s AND l.locktype = 'advisory' AND l.granted", (login.name,))


@pytest.mark.parametrize("victim", ["task-thread", "listener"])
def test_health_reports_a_thread_without_connection(pg_queue, tmp_path, victim):
    health_file = tmp_path / "worker.health"
    login = Limited(pg_queue, THREADS + 1)
    try:
        env = pg_queue.env(QUEUE_HEALTH_FILE=str(health_file))
        worker = pg_queue.start_worker(QUEUE_CONCURRENCY=str(THREADS),
                                       QUEUE_HEALTH_FILE=str(health_file), **login.env())
        wait_ready(worker)
        eventually(lambda: _probe(env).returncode == 0, 30, message="worker saudável")
        eventually(lambda: login.sessions() == THREADS + 1, 30, message="4 conexões")
        listener = eventually(lambda: _listener_pid(pg_queue, login), 30,
                              message="listener com a vez")
        pids = [r["pid"] for r in pg_queue.sql(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s", (login.name,))]
        target = listener if victim == "listener" else min(set(pids) - {listener})
        pg_queue.sql(f'ALTER ROLE "{login.name}" CONNECTION LIMIT 0')
        assert pg_queue.value("SELECT pg_terminate_backend(%s)", (target,)) is True
        # A backlog wakes every task thread: the one whose backend is gone finds out.
        ids = pg_queue.insert_many([{"efeito": f"e{i}", "sleep": 0.2} for i in range(8)])
        expected = ("1 de 3 threads: conexão com o banco perdida" if victim == "task-thread"
                    else "listener sem conexão")

        def unhealthy():
            res = _probe(env)
            return res.returncode == 1 and expected in res.stdout and res

        res = eventually(unhealthy, 60, interval=0.5, message=f"saúde aponta {victim}")
        assert "não saudável" in res.stdout or "problema" in res.stdout, res.stdout
        # The other threads still run every task, once each; the process lives on.
        pg_queue.wait_idle(timeout=60)
        assert [pg_queue.row(i)["status"] for i in ids] == ["sucesso"] * len(ids)
        assert sorted(e["tarefa_id"] for e in pg_queue.effects()) == sorted(ids)
        assert worker.proc.poll() is None, worker.log()
        # The role may connect again: the thread reconnects and the worker is healthy.
        pg_queue.sql(f'ALTER ROLE "{login.name}" CONNECTION LIMIT {THREADS + 1}')
        eventually(lambda: _probe(env).returncode == 0, 90, interval=0.5,
                   message="saudável de novo")
        assert login.sessions() == THREADS + 1
        assert worker.stop(timeout=30) == 0, worker.log()
    finally:
        for proc in pg_queue.workers:
            proc.stop(timeout=10)
        login.drop()
