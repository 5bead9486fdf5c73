"""DB_POOL_MODE=transaction wake-ups: adaptive polling through PgBouncer, and LISTEN on a
direct connection (DB_LISTEN_HOST / DB_LISTEN_PORT) that ends the wait between two probes."""

from __future__ import annotations

import time

import pytest

from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.pooled.backend import POLL_FAST, POLL_IDLE
from nsj_queue_lib.engine.select import make_backend
from tests.fixtures.waiting import eventually, holds

pytestmark = pytest.mark.process


def _idle_notifier(q, **extra):
    settings = q.settings(**extra)
    backend = make_backend(settings)
    session = DbSession.open(settings)
    backend.check(session)
    notifier = backend.notifier(session)
    notifier.listen()
    # idle for a while: the step between two probes is at its longest
    notifier._last_seen = time.monotonic() - 100
    assert notifier._step() == POLL_IDLE
    assert notifier.wait(0.05) == []  # probes at once (nothing due), the next in POLL_IDLE
    return notifier, session


def test_an_idle_poller_slows_down_and_a_task_speeds_it_up(pooled_queue):
    notifier, session = _idle_notifier(pooled_queue)
    try:
        pooled_queue.insert({"n": 1})
        # within the idle step nothing is probed: the task waits for the next probe
        assert notifier.wait(POLL_IDLE / 2) == []
        got = eventually(lambda: notifier.wait(0.5), POLL_IDLE + 2, interval=0.0,
                         message="sondagem viu a tarefa")
        assert [n.payload for n in got] == [""]
        assert notifier._step() == POLL_FAST  # right after a task: fast again
    finally:
        notifier.close()
        session.close()


def test_listen_on_a_direct_connection_ends_the_wait_at_the_insert(pooled_queue, pg_server):
    q = pooled_queue
    notifier, session = _idle_notifier(q, DB_LISTEN_HOST=pg_server.host,
                                       DB_LISTEN_PORT=str(pg_server.port))
    try:
        # the LISTEN lives on the direct server, on a session of its own
        assert q.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                       "'nsj_queue_lib:listen' AND query ILIKE 'LISTEN%%'") >= 1
        q.insert({"n": 1})  # the insert trigger's NOTIFY
        got = notifier.wait(POLL_IDLE * 0.9)  # before the next scheduled probe
        assert [n.payload for n in got] == [""]
        # a HALT sent as NOTIFY (a tool in session mode) reaches a listening worker too
        q.sql(f"UPDATE {q.qtable} SET status = 'cancelada'")  # (as if a worker took it)
        q.sql("SELECT pg_notify(%s, 'HALT')", (q.settings().queue_name,))
        got = eventually(lambda: notifier.wait(0.5), 5, interval=0.0, message="HALT")
        assert [n.payload for n in got] == ["HALT"]
    finally:
        notifier.close()
        session.close()
    eventually(lambda: q.value("SELECT count(*) FROM pg_stat_activity WHERE application_name "
                               "= 'nsj_queue_lib:listen' AND pid <> pg_backend_pid()") == 0,
               10, message="conexão de LISTEN fechada")


def test_an_idle_pooled_worker_sends_about_one_statement_a_second(pooled_queue, tmp_path):
    """Cheap when idle: one poll a second (the due probe, which reads HALT too), besides
    the half-lease rescue and the pause flag; the heartbeat has nothing to renew."""
    from tests.fixtures.counted import WORKER, Counted
    from tests.fixtures.processes import wait_ready

    counted = Counted(tmp_path)
    # (the default lease: its rescue runs every 15 s; the test queues use 3 s)
    worker = pooled_queue.start_worker(WORKER, QUEUE_LEASE_SECONDS="30", **counted.env())
    wait_ready(worker)
    task = pooled_queue.insert({"efeito": "antes"})  # (it ran: the worker is past start-up)
    pooled_queue.wait_status(task, "sucesso")
    counted.mark()
    window = 6.0
    started = time.monotonic()
    holds(lambda: worker.proc.poll() is None, window, interval=0.2, message="worker vivo")
    elapsed = time.monotonic() - started
    [sent] = counted.stop_and_count([worker])
    # polls (1/s once idle), and at most one end of the idle wait for the rescue (its
    # check, the pause flag, HALT, a claim)
    assert sent <= elapsed * 1.2 + 5, sent
    assert sent >= elapsed * 0.5, sent  # it does poll: a task would be seen within 1 s
