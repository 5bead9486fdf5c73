"""Concurrency per process in client/server mode (PostgreSQL and MariaDB), with the real
socket server and real worker processes (batch mode there: tests/contract)."""

from __future__ import annotations

from tests.fixtures.waiting import eventually


def test_concurrency_with_the_socket_server(csq):
    csq.start_server()
    worker = csq.start_ready_worker(QUEUE_CONCURRENCY="3")
    ids = csq.insert_many([{"efeito": f"c{i}", "sleep": 1.0} for i in range(6)])
    eventually(lambda: csq.count("status = 'processando'") == 3, 15,
               message="3 tasks running at once")
    csq.wait_idle()
    assert sorted(e["tarefa_id"] for e in csq.effects()) == sorted(ids)
    assert worker.proc.poll() is None
