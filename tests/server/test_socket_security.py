"""Robustness of the real server: authentication, bad frames, client limit, timeouts."""

from __future__ import annotations

from typing import Callable

import pytest

from nsj_queue_lib.client.lock_client import SocketLocker
from nsj_queue_lib.exceptions import CoordinationError
from tests.fixtures.servers import ServerProcess
from tests.fixtures.waiting import wait_until
from tests.server.socket_server_helpers import HOST, TOKEN, RawClient

KEY = (1, 1)


@pytest.mark.parametrize("token", ["errado", None, ""])
def test_wrong_or_missing_token_is_refused(socket_server_process: ServerProcess,
                                           token: str) -> None:
    locker = SocketLocker(HOST, socket_server_process.lock_port, token, 2.0)
    with pytest.raises(CoordinationError, match="unauthorized"):
        locker.try_lock(KEY)
    locker.close()
    with RawClient(socket_server_process.notify_port) as raw:
        reply = raw.hello(token=token)
        assert reply["ok"] is False and reply["error"]["code"] == "unauthorized"
        assert raw.closed_by_peer()
    with SocketLocker(HOST, socket_server_process.lock_port, TOKEN, 2.0) as good:
        assert good.try_lock(KEY)


def test_server_without_token_accepts_clients(
        socket_server_factory: Callable[..., ServerProcess]) -> None:
    server = socket_server_factory(token=None)
    with SocketLocker(HOST, server.lock_port, None, 2.0) as locker:
        assert locker.try_lock(KEY)


def test_request_before_hello_closes_the_connection(socket_server_process: ServerProcess) -> None:
    with RawClient(socket_server_process.lock_port) as raw:
        reply = raw.call("try_lock", key=[1, 2])
        assert reply["error"]["code"] == "not_authenticated"
        assert raw.closed_by_peer()


def test_unsupported_protocol_version_is_refused(socket_server_process: ServerProcess) -> None:
    with RawClient(socket_server_process.lock_port) as raw:
        reply = raw.call("hello", version=99, token=TOKEN)
        assert reply["error"]["code"] == "unsupported_version"
        assert raw.closed_by_peer()


@pytest.mark.parametrize("garbage", [
    b"isto nao e json\n",
    b"\x00\xff\xfe\xfd\n",
    b"[1, 2, 3]\n",
    b"{\"id\": 1, \"op\": \"try_lock\"",  # never completed: incomplete-frame timeout
    b"a" * (70 * 1024),  # oversized, no newline
    b"{\"id\": 1, \"op\": \"ping\", \"x\": \"" + b"b" * (70 * 1024) + b"\"}\n",  # oversized line
])
def test_bad_frames_close_only_that_connection(socket_server_process: ServerProcess,
                                               garbage: bytes) -> None:
    with SocketLocker(HOST, socket_server_process.notify_port, TOKEN, 2.0) as good, \
            RawClient(socket_server_process.lock_port) as bad:
        assert good.try_lock(KEY)
        assert bad.hello()["ok"]
        try:
            bad.send_bytes(garbage)
        except OSError:
            pass  # the server may close while a large frame is still being sent
        assert bad.closed_by_peer(timeout=5.0)
        assert good.is_held(KEY) and good.unlock(KEY) and good.try_lock(KEY)
    assert wait_until(lambda: "violação de protocolo" in socket_server_process.log()
                      or "frame incompleto" in socket_server_process.log())


def test_connection_without_hello_is_closed_after_the_timeout(
        socket_server_process: ServerProcess) -> None:
    with RawClient(socket_server_process.lock_port) as raw:
        assert raw.closed_by_peer(timeout=5.0)
    assert wait_until(lambda: "'hello' não recebido a tempo" in socket_server_process.log())


def test_client_over_max_client_threads_gets_an_error_and_is_closed(
        socket_server_factory: Callable[..., ServerProcess]) -> None:
    server = socket_server_factory(max_clients=3)
    lockers = [SocketLocker(HOST, server.notify_port, TOKEN, 2.0) for _ in range(3)]
    try:
        for locker in lockers:
            assert locker.ping()
        extra = SocketLocker(HOST, server.lock_port, TOKEN, 2.0)
        with pytest.raises(CoordinationError, match="MAX_CLIENT_THREADS"):
            extra.try_lock(KEY)
        extra.close()
        # The slot is checked when the client authenticates (unauthenticated connections
        # never hold one): the refusal answers its hello, then the server closes.
        with RawClient(server.lock_port) as raw:
            reply = raw.hello()
            assert reply["ok"] is False and reply["error"]["code"] == "too_many_clients"
            assert raw.closed_by_peer()
        lockers.pop().close()
        newcomer = SocketLocker(HOST, server.lock_port, TOKEN, 2.0)
        assert wait_until(newcomer.ping, timeout=5.0)
        newcomer.close()
    finally:
        for locker in lockers:
            locker.close()
