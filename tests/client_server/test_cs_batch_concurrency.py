"""Batch mode and concurrency per process in client/server mode (PostgreSQL and MariaDB),
with the real socket server and real worker processes."""

from __future__ import annotations

from tests.fixtures.queue import effects_by_key
from tests.fixtures.waiting import eventually


def test_batch_mode_with_the_socket_server(csq):
    csq.start_server()
    ids = csq.insert_many([{"efeito": f"b{i}", "fail": i == 2} for i in range(6)])
    worker = csq.start_ready_worker(QUEUE_BATCH_SIZE="6", QUEUE_MAX_RETRY="1")
    for task_id in ids:
        csq.wait_chain_done(task_id)
    assert effects_by_key(csq) == {f"b{i}": 1 for i in range(6) if i != 2}
    assert csq.row(ids[2])["status"] == "falha"
    # each success with its own message (the batch marks them together at its end)
    assert all(csq.row(i)["mensagem"] == f"ok {i}" for i in ids if i != ids[2])
    assert worker.proc.poll() is None


def test_concurrency_with_the_socket_server(csq):
    csq.start_server()
    worker = csq.start_ready_worker(QUEUE_CONCURRENCY="3")
    ids = csq.insert_many([{"efeito": f"c{i}", "sleep": 1.0} for i in range(6)])
    eventually(lambda: csq.count("status = 'processando'") == 3, 15,
               message="3 tasks running at once")
    csq.wait_idle()
    assert sorted(e["tarefa_id"] for e in csq.effects()) == sorted(ids)
    assert worker.proc.poll() is None
