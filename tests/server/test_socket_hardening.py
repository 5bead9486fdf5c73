"""Hardening of the real socket server (a subprocess): unauthenticated connections,
locks per client, slow clients, log injection, queue names and the producer token."""

from __future__ import annotations

import time
from typing import Callable

import pytest

from nsj_queue_lib.engine.socket.locker import SocketLocker
from nsj_queue_lib.engine.socket.notifier import SocketNotifier
from nsj_queue_lib.exceptions import ProtocolError
from tests.fixtures.servers import ServerProcess
from tests.fixtures.waiting import wait_until
from tests.server.socket_server_helpers import (
    HOST,
    TOKEN,
    RawClient,
    notify_past_a_stuck_client,
)

PRODUCER = "token-de-produtor"
Factory = Callable[..., ServerProcess]


def test_unauthenticated_connections_never_take_client_slots(
        socket_server_factory: Factory) -> None:
    server = socket_server_factory(max_clients=2, max_handshakes=3, timeout=1.0)
    silent = [RawClient(server.lock_port) for _ in range(2)]  # connect, never say hello
    try:
        with SocketLocker(HOST, server.notify_port, TOKEN, 2.0) as a, \
                SocketLocker(HOST, server.lock_port, TOKEN, 2.0) as b:
            # Both client slots go to the real clients, whatever the silent ones do.
            assert a.try_lock((1, 1)) and b.try_lock((1, 2))
        silent.append(RawClient(server.lock_port))
        with RawClient(server.lock_port) as extra:  # the handshake limit is its own
            frame = extra.read_frame()
            assert frame is not None and frame["error"]["code"] == "too_many_clients"
            assert "SERVER_MAX_HANDSHAKES" in frame["error"]["message"]
        started = time.monotonic()
        for raw in silent:  # dropped after the short handshake budget
            assert raw.closed_by_peer(timeout=3.0)
        assert time.monotonic() - started < 3.0
    finally:
        for raw in silent:
            raw.close()
    with SocketLocker(HOST, server.lock_port, TOKEN, 2.0) as c:
        assert c.ping()


def test_locks_per_client_are_capped(socket_server_factory: Factory) -> None:
    server = socket_server_factory(max_locks=5)
    with SocketLocker(HOST, server.lock_port, TOKEN, 2.0) as locker, \
            SocketLocker(HOST, server.notify_port, TOKEN, 2.0) as other:
        for i in range(5):
            assert locker.try_lock((7, i))
        assert locker.try_lock((7, 0))  # re-taking a held lock is not a new one
        with pytest.raises(ProtocolError, match="too_many_locks"):
            locker.try_lock((7, 99))
        assert other.try_lock((7, 99))  # the cap is per client
        assert locker.unlock((7, 4)) and locker.try_lock((7, 98))
    assert wait_until(lambda: "limite de 5 locks por conexão" in server.log())


def test_a_client_that_stops_reading_never_delays_wake_ups(socket_server_factory: Factory) -> None:
    server = socket_server_factory(timeout=5.0)
    stuck = RawClient(server.notify_port)
    assert stuck.hello()["ok"] and stuck.call("listen")["ok"]  # then never reads again
    with SocketNotifier(HOST, server.notify_port, TOKEN, 5.0) as worker, \
            SocketNotifier(HOST, server.lock_port, TOKEN, 5.0) as producer:
        worker.listen()
        slowest = notify_past_a_stuck_client(worker, producer, server.log)
        assert slowest < 0.5, slowest
    assert wait_until(lambda: "cliente lento" in server.log(), timeout=5.0)
    stuck.close()


def test_client_fields_are_escaped_in_the_log(socket_server_process: ServerProcess) -> None:
    with RawClient(socket_server_process.lock_port) as raw:
        assert raw.hello(client="bom\nFORJADO cliente", role="r\r\nFORJADO papel")["ok"]
        assert raw.call("notify", payload="p\nFORJADO notify")["ok"]
    assert wait_until(lambda: "p\\nFORJADO notify" in socket_server_process.log())
    lines = socket_server_process.log().splitlines()
    assert not any(line.startswith("FORJADO") for line in lines), lines[-5:]


@pytest.mark.parametrize("queue", ["fila;drop", "fila\nx", "1fila", "a" * 70])
def test_queue_names_follow_the_settings_rule(socket_server_process: ServerProcess,
                                              queue: str) -> None:
    with RawClient(socket_server_process.lock_port) as raw:
        reply = raw.hello(queue=queue)
        assert reply["ok"] is False and reply["error"]["code"] == "bad_request"
        assert raw.closed_by_peer()


def test_producer_token_notifies_but_cannot_halt_lock_or_listen(
        socket_server_factory: Factory) -> None:
    server = socket_server_factory(producer_token=PRODUCER)
    with SocketNotifier(HOST, server.notify_port, TOKEN, 2.0) as worker:
        worker.listen()
        with SocketNotifier(HOST, server.notify_port, PRODUCER, 2.0) as producer:
            producer.notify("")
            assert [n.payload for n in worker.wait(2.0)] == [""]
            with pytest.raises(ProtocolError, match="unauthorized"):
                producer.notify("HALT")
            assert worker.wait(0.3) == []  # no HALT reached the worker
        with SocketLocker(HOST, server.lock_port, PRODUCER, 2.0) as locker:
            with pytest.raises(ProtocolError, match="unauthorized"):
                locker.try_lock((1, 1))
        with RawClient(server.notify_port) as raw:
            assert raw.hello(token=PRODUCER)["ok"]
            assert raw.call("listen")["error"]["code"] == "unauthorized"
