"""Notify service of the real server, reconnection after a restart, and graceful stop."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from nsj_queue_lib.client.lock_client import SocketLocker
from nsj_queue_lib.client.notify_client import SocketNotifier, notify_server
from nsj_queue_lib.config import Settings
from nsj_queue_lib.engine.base import HALT_PAYLOAD, Notification
from nsj_queue_lib.engine.socket.protocol import OP_PING
from nsj_queue_lib.exceptions import CoordinationError
from tests.fixtures.servers import ServerProcess
from tests.fixtures.waiting import wait_until
from tests.server.socket_server_helpers import HOST, TOKEN, child_env

KEY = (3, 3)
CHANNEL = "fila_teste"


def _notifier(server: ServerProcess, version: int = 0) -> SocketNotifier:
    notifier = SocketNotifier(HOST, server.notify_port, TOKEN, 2.0, queue=CHANNEL)
    if version:  # a client of an earlier 2.x release
        notifier._conn.version = version
    notifier.listen()
    return notifier


def _drain(notifier: SocketNotifier, quiet: float = 0.6) -> None:
    """Consume wake-ups until none arrives for `quiet` seconds."""
    while notifier.wait(quiet):
        pass


def test_work_available_wakes_every_legacy_listener_and_one_idle_listener(
        socket_server_process: ServerProcess) -> None:
    """Protocol version 1 and 2 listeners get every wake-up, as before; of the idle
    version 3 listeners one is woken per notify, the most recently idle first, and a
    woken one gets no more until it waits again.  HALT reaches everyone."""
    legacy = [_notifier(socket_server_process, version) for version in (1, 2)]
    idle = [_notifier(socket_server_process) for _ in range(3)]
    workers = legacy + idle
    try:
        assert notify_server((HOST, socket_server_process.notify_port), TOKEN) == 3
        for worker in legacy:
            assert worker.wait(5.0) == [Notification(CHANNEL, "")]
        assert idle[2].wait(5.0) == [Notification(CHANNEL, "")]  # the last to listen
        assert idle[0].wait(0.3) == [] and idle[1].wait(0.3) == []
        workers[0].notify()  # a worker can announce work too
        for worker in legacy:
            assert worker.wait(5.0) == [Notification(CHANNEL, "")]
        # idle[1] waited last: it is woken; idle[2] has not waited since its wake-up
        assert idle[1].wait(5.0) == [Notification(CHANNEL, "")]
        assert idle[2]._pending == [] and idle[0].wait(0.3) == []
        notify_server(HOST, TOKEN, port=socket_server_process.notify_port, payload=HALT_PAYLOAD)
        for worker in workers:
            assert worker.wait(5.0) == [Notification(CHANNEL, HALT_PAYLOAD)]
    finally:
        for worker in workers:
            worker.close()


def test_wake_ups_received_while_busy_are_kept_and_coalesced(
        socket_server_process: ServerProcess) -> None:
    with _notifier(socket_server_process, version=2) as worker:  # a listener woken by every notify
        assert notify_server((HOST, socket_server_process.notify_port), TOKEN) == 1
        assert notify_server((HOST, socket_server_process.notify_port), TOKEN) == 1
        # Both events were written before notify_server returned; the reply to a ping on
        # the worker's own link comes after them, so both were read once it is back.
        worker._conn.request(OP_PING)
        assert worker._pending == [Notification(CHANNEL, "")]  # arrived while "busy"
        assert worker.wait(0) == [Notification(CHANNEL, "")]
        assert worker.wait(0.2) == []


def test_a_notify_while_no_listener_is_idle_wakes_the_next_idle_one(
        socket_server_process: ServerProcess) -> None:
    with _notifier(socket_server_process) as worker:
        assert notify_server((HOST, socket_server_process.notify_port), TOKEN) == 1
        assert wait_until(lambda: worker._pending, timeout=5.0)
        assert notify_server((HOST, socket_server_process.notify_port), TOKEN) == 0  # it is busy
        assert worker.wait(0) == [Notification(CHANNEL, "")]  # (wait(0) is not idle)
        # Its next wait says `idle`: the wake-up owed since the second notify comes.
        assert worker.wait(5.0) == [Notification(CHANNEL, "")]
        assert worker.wait(0.3) == []  # owed once, not per notify


def test_due_tasks_check_wakes_waiting_workers(
        socket_server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    due = tmp_path / "due"  # the test server's check reports due tasks while it exists
    server = socket_server_factory(due_file=str(due), check_interval=0.2)
    with _notifier(server) as worker:
        assert worker.wait(0.8) == []  # nothing due: no wake-up
        due.touch()
        assert worker.wait(5.0) == [Notification(CHANNEL, "")]
        due.unlink()
        _drain(worker)
        assert worker.wait(0.8) == []


def test_clients_reconnect_after_a_server_restart(socket_server_process: ServerProcess) -> None:
    locker = SocketLocker(HOST, socket_server_process.notify_port, TOKEN, 2.0)
    worker = _notifier(socket_server_process)
    try:
        assert locker.try_lock(KEY)
        generation = locker.generation
        assert socket_server_process.stop() == 0
        assert wait_until(lambda: not locker.connected, timeout=5.0)
        assert not locker.is_held(KEY)
        assert locker.lost_locks(clear=False) == {KEY}
        assert locker.connection_lost
        with pytest.raises(CoordinationError):
            locker.try_lock(KEY)  # server down: a clear error, not a hang
        socket_server_process.start(socket_server_process.notify_port,
                                    socket_server_process.lock_port)

        def relocked() -> bool:
            try:
                return locker.try_lock(KEY)
            except CoordinationError:
                return False

        assert wait_until(relocked, timeout=15.0, interval=0.1)
        assert locker.generation > generation and locker.is_held(KEY)
        assert locker.lost_locks() == {KEY} and not locker.connection_lost
        # The waiting worker registers again and gets a wake-up for what it may have missed.
        assert worker.wait(15.0) == [Notification(CHANNEL, "")]
        assert worker.connected
        assert notify_server((HOST, socket_server_process.notify_port), TOKEN) == 1
        assert worker.wait(5.0) == [Notification(CHANNEL, "")]
    finally:
        locker.close()
        worker.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_stops_gracefully(socket_server_factory: Callable[..., ServerProcess],
                                      sig: int) -> None:
    server = socket_server_factory()
    locker = SocketLocker(HOST, server.lock_port, TOKEN, 2.0)
    try:
        assert locker.try_lock(KEY)
        assert server.stop(sig) == 0
        assert wait_until(lambda: not locker.connected, timeout=5.0)
        assert "Servidor encerrado." in server.log()  # the process has exited
    finally:
        locker.close()


def test_notify_server_accepts_settings(socket_server_process: ServerProcess) -> None:
    settings = Settings.from_env({
        "SERVER_HOST": HOST, "NOTIFY_SERVICE_PORT": str(socket_server_process.notify_port),
        "SERVER_AUTH_TOKEN": TOKEN, "QUEUE_NAME": CHANNEL, "QUEUE_TABLE": CHANNEL,
    }, load_dotenv=False, require=("queue",))
    with SocketNotifier.from_settings(settings) as worker:
        worker.listen()
        assert notify_server(settings) == 1
        assert worker.wait(5.0) == [Notification(CHANNEL, "")]
    other_queue = settings.replace(queue_name="outra_fila")
    with pytest.raises(CoordinationError, match="wrong_queue"):
        notify_server(other_queue)


def test_server_main_reports_missing_settings(tmp_path: Path) -> None:
    env = {k: v for k, v in child_env().items()
           if not k.startswith(("DB_", "DATABASE_", "QUEUE_"))}
    proc = subprocess.run([sys.executable, "-m", "nsj_queue_lib.server.server_main"],
                          env=env, cwd=str(tmp_path), capture_output=True, timeout=60)
    assert proc.returncode == 2
    assert b"DB_HOST" in proc.stderr
