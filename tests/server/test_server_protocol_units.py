"""Unit tests of the pure parts: framing, lock table, request interpretation."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from nsj_queue_lib.exceptions import ProtocolError
from nsj_queue_lib.server import protocol as p
from nsj_queue_lib.server.locks import LockTable
from nsj_queue_lib.server.refusals import NotifyLog
from nsj_queue_lib.server.rpc_interpreter import RpcInterpreter, Session


def test_encode_decode_round_trip() -> None:
    message = {"id": 7, "op": "try_lock", "key": [-(2**31), 2**31 - 1], "texto": "ação"}
    data = p.encode(message)
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert p.FrameDecoder().feed(data) == [message]


def test_decoder_handles_split_and_coalesced_frames() -> None:
    frames = [{"id": i, "op": "ping"} for i in range(5)]
    stream = b"".join(p.encode(f) for f in frames)
    decoder = p.FrameDecoder()
    out = []
    for i in range(len(stream)):  # one byte at a time: the terminator is always split
        out += decoder.feed(stream[i:i + 1])
    assert out == frames
    assert p.FrameDecoder().feed(stream) == frames  # all in one read
    decoder = p.FrameDecoder()
    assert decoder.feed(stream[:10]) == [] and decoder.buffered == 10


@pytest.mark.parametrize("data", [
    b"not json\n",
    b"[1, 2]\n",
    b"\xff\xfe{}\n",
    b'{"id": true, "op": "ping"}\n',
    b'{"id": 1, "op": 5}\n',
    b'{"id": 1, "op": "ping", "x": NaN}\n',
    b"[" * 100000 + b"\n",
])
def test_decoder_rejects_malformed_frames(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        p.FrameDecoder(max_frame=200000).feed(data)


def test_decoder_rejects_oversized_frames() -> None:
    with pytest.raises(ProtocolError):
        p.FrameDecoder().feed(b"a" * (p.MAX_FRAME_BYTES + 1))  # no newline yet
    big = p.encode({"id": 1, "op": "ping", "pad": ""})[:-1] + b" " * p.MAX_FRAME_BYTES + b"\n"
    with pytest.raises(ProtocolError):
        p.FrameDecoder().feed(big)
    with pytest.raises(ProtocolError):
        p.encode({"id": 1, "op": "notify", "payload": "x" * p.MAX_FRAME_BYTES})


def test_check_key() -> None:
    assert p.check_key([1, -2]) == (1, -2)
    for bad in ([1], [1, 2, 3], [True, 1], [2**31, 0], [0, -(2**31) - 1], "1,2", [1.0, 2]):
        with pytest.raises(ValueError):
            p.check_key(bad)


def test_lock_table_is_reentrant_and_owned() -> None:
    table = LockTable()
    key = (10, 20)
    assert table.try_lock(1, key)
    assert table.try_lock(1, key)  # re-entrant, count 2
    assert not table.try_lock(2, key)
    assert not table.unlock(2, key)  # not the owner: no effect
    assert table.unlock(1, key)
    assert not table.try_lock(2, key)  # still held once
    assert table.unlock(1, key)
    assert not table.unlock(1, key)  # not held any more
    assert table.try_lock(2, key)
    assert table.holder(key) == 2


def test_lock_table_release_all_frees_every_hold() -> None:
    table = LockTable()
    for i in range(3):
        assert table.try_lock(1, (1, i))
    assert table.try_lock(1, (1, 0))
    assert table.try_lock(2, (2, 0))
    assert table.release_all(1) == 3
    assert len(table) == 1 and table.owners() == 1
    assert table.try_lock(3, (1, 0))
    assert table.release_all(99) == 0


class _FakeServer:
    def __init__(self, token: Optional[str] = None, channel: str = "fila") -> None:
        self.locks = LockTable()
        self.notifies = NotifyLog()
        self.token = token
        self.producer_token: Optional[str] = None
        self.max_locks_per_client = 10_000
        self.channel = channel
        self.heartbeat_interval = 1.0
        self.timeout = 1.0
        self.listening: set[int] = set()
        self.woken: list[str] = []
        self.idle: list[int] = []

    def promote(self, conn_id: int, producer: bool = False) -> Optional[str]:
        return None

    def set_listening(self, conn_id: int, listening: bool) -> None:
        (self.listening.add if listening else self.listening.discard)(conn_id)

    def notify_received(self, payload: str = "") -> int:
        self.woken.append(payload)
        return len(self.listening)

    def set_idle(self, conn_id: int) -> bool:
        self.idle.append(conn_id)
        return conn_id in self.listening

    def stats(self) -> dict[str, Any]:
        return {"locks": len(self.locks)}


def _hello(rpc: RpcInterpreter, session: Session, **fields: Any) -> Any:
    return rpc.handle(session, {"id": 1, "op": "hello", "version": 1, **fields})


def test_interpreter_requires_hello_and_token() -> None:
    rpc = RpcInterpreter(_FakeServer(token="abc"))
    session = Session(1, "peer", "lock")
    outcome = rpc.handle(session, {"id": 1, "op": "try_lock", "key": [1, 2]})
    assert outcome.close and outcome.reply["error"]["code"] == p.ERR_NOT_AUTHENTICATED
    assert _hello(rpc, session).close  # no token
    assert _hello(rpc, session, token="abd").reply["error"]["code"] == p.ERR_UNAUTHORIZED
    assert _hello(rpc, session, token="abc", version=4).reply["error"]["code"] == (
        p.ERR_UNSUPPORTED_VERSION)
    outcome = _hello(rpc, session, token="abc")
    assert not outcome.close and outcome.reply["ok"] and session.authenticated
    assert rpc.handle(session, {"id": 2, "op": "try_lock", "key": [1, 2]}).reply["result"]


def test_interpreter_refuses_other_queue_and_bad_arguments() -> None:
    rpc = RpcInterpreter(_FakeServer(channel="fila_a"))
    outcome = _hello(rpc, Session(1, "peer", "notify"), queue="fila_b")
    assert outcome.close and outcome.reply["error"]["code"] == p.ERR_WRONG_QUEUE
    session = Session(2, "peer", "notify")
    assert _hello(rpc, session, queue="FILA_A").reply["ok"]
    outcome = rpc.handle(session, {"id": 3, "op": "try_lock", "key": [1]})
    assert not outcome.close and outcome.reply["error"]["code"] == p.ERR_BAD_REQUEST
    outcome = rpc.handle(session, {"op": "ping"})  # every request needs an id
    assert outcome.close and outcome.reply["error"]["code"] == p.ERR_BAD_REQUEST
    outcome = rpc.handle(session, {"id": 4, "op": "frobnicate"})
    assert not outcome.close and outcome.reply["error"]["code"] == p.ERR_UNKNOWN_OP
    assert rpc.handle(session, {"id": 5, "op": "listen"}).reply["result"] is True
    assert rpc.handle(session, {"id": 6, "op": "notify", "payload": "HALT"}).reply["result"] == 1
