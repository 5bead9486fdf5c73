"""Back-off, signal handling and outage logging are written once (issue #12 item 1):
the socket client, the Loki sender, the queue server and the dashboard use the runtime's."""

from __future__ import annotations

import logging
import os
import signal
import threading

from nsj_queue_lib.backoff import Backoff
from nsj_queue_lib.engine.socket.connection import SocketConnection
from nsj_queue_lib.observability.loki import LokiHandler
from nsj_queue_lib.runtime.signals import on_stop_signals
from nsj_queue_lib.server.check_tasks_thread import CheckTasksThread


def test_socket_client_and_loki_sender_back_off_with_the_runtime_backoff():
    conn = SocketConnection("127.0.0.1", 1, timeout=1, backoff_initial=0.2, backoff_max=5.0)
    assert isinstance(conn._backoff, Backoff)
    assert (conn._backoff.first, conn._backoff.cap, conn._backoff.jitter) == (0.2, 5.0, 0.8)
    handler = LokiHandler("http://127.0.0.1:1", {"env": "test"}, backoff_max=4.0)
    try:
        sender = handler._sender
        assert (sender._backoff.first, sender._backoff.cap, sender._backoff.jitter) == (
            1.0, 4.0, 1.0)
    finally:
        handler.close()


def test_on_stop_signals_calls_back_and_restores_the_previous_handlers():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    got = []
    restore = on_stop_signals(got.append)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert got == [signal.SIGTERM]
    finally:
        restore()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_on_stop_signals_outside_the_main_thread_installs_nothing():
    before = signal.getsignal(signal.SIGTERM)
    result = []
    t = threading.Thread(target=lambda: result.append(on_stop_signals(print)))
    t.start()
    t.join()
    assert signal.getsignal(signal.SIGTERM) is before
    result[0]()  # (a no-op restore)


def test_check_tasks_thread_reports_outages_through_outage_report(caplog):
    answers = [RuntimeError("banco fora"), RuntimeError("banco fora"), False]

    def probe() -> bool:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    thread = CheckTasksThread(probe, lambda: 0, lambda: 1, 1.0, threading.Event())
    with caplog.at_level(logging.INFO, logger="nsj_queue_lib.server.check_tasks_thread"):
        assert [thread.check_once() for _ in range(3)] == [False, False, False]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["Verificação de tarefas pendentes: banco fora",
                     "Verificação de tarefas pendentes: restabelecido após 2 tentativa(s) "
                     "com falha"]
