"""Floods against the real socket server (a subprocess): unauthenticated connections from
another loopback address (127.0.0.2) never keep a client of 127.0.0.1 out, producer-token
sessions never take the worker slots, and neither fills the log."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Optional

import pytest

from nsj_queue_lib.engine.socket.locker import SocketLocker
from nsj_queue_lib.engine.socket.notifier import SocketNotifier, notify_server
from nsj_queue_lib.server.refusals import RefusalLog
from tests.fixtures.servers import ServerProcess
from tests.fixtures.waiting import eventually
from tests.server.socket_server_helpers import HOST, ROOT, TOKEN, RawClient, child_env

FLOOD_HOST = "127.0.0.2"
PRODUCER = "token-de-produtor"
Factory = Callable[..., ServerProcess]


def flood_socket(port: int, payload: bytes = b"") -> socket.socket:
    """A connection from FLOOD_HOST that sends `payload` (maybe nothing) and then waits."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((FLOOD_HOST, 0))
    sock.settimeout(5.0)
    sock.connect((HOST, port))
    if payload:
        sock.sendall(payload)
    return sock


class Flood(threading.Thread):
    """Opens connections from FLOOD_HOST in a loop (`total` of them, or until `stop`),
    cycling through `payloads`; keeps the last `keep` open, like a client that never
    hangs up."""

    def __init__(self, ports: list[int], payloads: list[bytes], total: Optional[int] = None,
                 keep: int = 400) -> None:
        super().__init__(daemon=True)
        self.ports, self.payloads, self.total, self.keep = ports, payloads, total, keep
        self.opened = 0
        self.errors = 0
        self.stop = threading.Event()
        self.socks: list[socket.socket] = []

    def run(self) -> None:
        while not self.stop.is_set() and (self.total is None or self.opened < self.total):
            port = self.ports[self.opened % len(self.ports)]
            payload = self.payloads[self.opened % len(self.payloads)]
            try:
                self.socks.append(flood_socket(port, payload))
            except OSError:
                self.errors += 1  # a refusal may reset before our payload is written
            self.opened += 1
            if len(self.socks) > self.keep:
                self.socks.pop(0).close()

    def close(self) -> None:
        self.stop.set()
        self.join(10)
        for sock in self.socks:
            sock.close()


def health_servidor(port: int) -> subprocess.CompletedProcess[str]:
    """`nsj-queue health --servidor` against the test server (a real CLI process)."""
    env = child_env()
    for name in list(env):
        if name.startswith(("SERVER_", "QUEUE_", "DB_")):
            del env[name]
    env.update(SERVER_HOST=HOST, LOCK_SERVICE_PORT=str(port), SERVER_AUTH_TOKEN=TOKEN,
               TIMEOUT_SOCKET_MESSAGE="5", CLIENT_SERVER_MODE="true")
    return subprocess.run([sys.executable, "-m", "nsj_queue_lib", "health", "--servidor"],
                          env=env, cwd=str(ROOT / "tests"), capture_output=True, text=True,
                          timeout=60)


def timed_ping(port: int) -> float:
    started = time.monotonic()
    with SocketLocker(HOST, port, TOKEN, 5.0) as locker:
        assert locker.ping()
    return time.monotonic() - started


def test_a_flood_from_one_address_never_keeps_clients_out(socket_server_factory: Factory) -> None:
    # The defaults of the settings: 8 handshake places, 2 s to say hello.
    server = socket_server_factory(timeout=5.0, max_handshakes=8)
    ports = [server.notify_port, server.lock_port]
    with RawClient(server.lock_port) as watcher:  # authenticated before the flood
        assert watcher.hello()["ok"]
        flood = Flood(ports, [b""])  # connect, never say hello
        flood.start()
        try:
            eventually(lambda: flood.opened >= 100, 20, message="flood em andamento")
            # Every place taken by the flood (places free up as budgets run out).
            eventually(lambda: watcher.call("status")["result"]["handshaking"] == 8, 10,
                       message="os 8 lugares de handshake tomados pelo flood")
            assert watcher.call("status")["result"]["refused"]["total"] > 50
            # Real clients from 127.0.0.1 get in at once, on both ports, again and again.
            pings = [timed_ping(port) for port in ports * 5]
            assert max(pings) < 1.0, pings
            with SocketNotifier(HOST, server.notify_port, TOKEN, 5.0) as worker:
                worker.listen()
                assert notify_server((HOST, server.lock_port), TOKEN) >= 1
                assert worker.wait(5.0)
            result = health_servidor(server.lock_port)
            assert result.returncode == 0, result.stdout + result.stderr
            assert "respondeu" in result.stdout
            assert flood.is_alive() and flood.opened < 100_000
        finally:
            flood.close()
        status = watcher.call("status")["result"]
    assert status["refused"]["total"] >= 100
    assert status["refused"]["limite de conexões não autenticadas"] > 0


def test_the_heaviest_address_gives_its_oldest_place_to_another(
        socket_server_factory: Factory) -> None:
    server = socket_server_factory(timeout=5.0, max_handshakes=3)
    with RawClient(server.lock_port) as watcher:
        assert watcher.hello()["ok"]
        silent = [flood_socket(server.lock_port) for _ in range(3)]
        try:
            eventually(lambda: watcher.call("status")["result"]["handshaking"] == 3, 5,
                       message="três conexões em handshake")
            extra = flood_socket(server.lock_port)  # the same address: refused
            silent.append(extra)
            reply = _read_frame(extra)
            assert reply is not None and reply["error"]["code"] == "too_many_clients"
            assert "SERVER_MAX_HANDSHAKES" in reply["error"]["message"]
            started = time.monotonic()
            with RawClient(server.lock_port) as client:  # another address: admitted
                assert client.hello()["ok"]
            assert time.monotonic() - started < 1.0
            # The oldest connection of 127.0.0.2 lost its place, long before its 2 s.
            assert _read_frame(silent[0], timeout=1.5) is None
        finally:
            for sock in silent:
                sock.close()


def _read_frame(sock: socket.socket, timeout: float = 5.0) -> Optional[dict]:
    """The first frame the server sent, or None when it closed without one."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except ConnectionResetError:
        return None
    return json.loads(data.split(b"\n", 1)[0])


def test_a_flood_of_300_connections_writes_a_bounded_log(socket_server_factory: Factory) -> None:
    server = socket_server_factory(timeout=5.0, max_handshakes=8)
    ports = [server.notify_port, server.lock_port]
    hello = json.dumps({"id": 0, "op": "hello", "version": 3, "token": "errado"}).encode()
    payloads = [b"", hello + b"\n", b"\x00garbage\n", b"NOTIFY###END###",
                json.dumps({"id": 1, "op": "ping"}).encode() + b"\n"]
    with RawClient(server.lock_port) as watcher:
        assert watcher.hello()["ok"]
        before = os.path.getsize(server.log_path)
        flood = Flood(ports, payloads, total=300)
        flood.start()
        try:
            flood.join(60)
            assert flood.opened == 300
            # Every one of them ends refused (the silent ones after the 2 s budget).
            eventually(lambda: watcher.call("status")["result"]["refused"]["total"] >= 300,
                       20, message="300 recusas contadas")
            refused = watcher.call("status")["result"]["refused"]
        finally:
            flood.close()
    assert refused["'hello' recusado"] > 0 and refused["violação de protocolo"] > 0
    lines = [line for line in server.log().splitlines() if FLOOD_HOST in line]
    # At most one line per kind of refusal (a handful) within the interval.
    assert 3 <= len(lines) <= 12, "\n".join(lines)
    assert os.path.getsize(server.log_path) - before < 20_000
    # The first line of each kind says why; later ones only count.  (A wrong token and a
    # request before 'hello' are one kind: whichever came first names its reason.)
    assert any("token de autenticação inválido" in line
               or "envie 'hello' antes de qualquer outra mensagem" in line
               for line in lines), lines


def test_producer_sessions_never_take_the_worker_slots(socket_server_factory: Factory) -> None:
    server = socket_server_factory(max_clients=50, producer_token=PRODUCER, timeout=5.0,
                                   log_interval=1.0)
    producers: list[RawClient] = []
    try:
        refused = 0
        for _ in range(47):
            raw = RawClient(server.notify_port)
            producers.append(raw)
            reply = raw.hello(token=PRODUCER, role="producer")
            if not reply["ok"]:
                assert reply["error"]["code"] == "too_many_clients"
                assert "reservadas ao token dos workers" in reply["error"]["message"]
                refused += 1
        assert refused == 7  # 40 producer sessions: 10 of the 50 slots stay reserved
        started = time.monotonic()
        with SocketNotifier(HOST, server.notify_port, TOKEN, 5.0) as worker:
            worker.listen()
            assert time.monotonic() - started < 1.0
            for raw in producers[:40]:
                assert raw.call("notify", payload="")["ok"]
            assert worker.wait(5.0)
        # No line per notify: a summary per interval.
        eventually(lambda: "notify(s) recebido(s)" in server.log(), 10,
                   message="resumo dos notifies")
        log = server.log()
        assert "INFO" not in "\n".join(
            line for line in log.splitlines() if "Notify recebido" in line)
        assert "40 notify(s) recebido(s)" in log
    finally:
        for raw in producers:
            raw.close()


def test_refusal_log_counts_every_refusal_and_bounds_the_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    log = RefusalLog(interval=60.0, clock=lambda: now[0])
    with caplog.at_level("DEBUG", logger="nsj_queue_lib.server.refusals"):
        for i in range(1000):
            log.note("10.0.0.9", "'hello' recusado", f"tentativa {i}")
        log.note("10.0.0.9", "violação de protocolo", "lixo")  # a new kind: one line
        log.flush()  # the interval is not over: nothing yet
        assert len(caplog.records) == 2
        now[0] += 60.0
        log.flush()
        assert len(caplog.records) == 3
        summary = caplog.records[-1].getMessage()
        assert "999 conexão(ões) de 10.0.0.9 recusada(s) nos últimos 60 s" in summary
        assert "recusas desde o início: 1001" in summary
        now[0] += 60.0
        log.flush()  # quiet since: forgotten, the next one is logged at once
        log.note("10.0.0.9", "'hello' recusado", "de novo")
        assert len(caplog.records) == 4 and "de novo" in caplog.records[-1].getMessage()
    assert log.stats()["total"] == 1002


def test_health_of_a_full_server_serving_its_workers_is_healthy(
        socket_server_factory: Factory) -> None:
    """Every client slot taken by workers: a new hello gets too_many_clients, and the
    probe reads that answer as a live server (restarting it would drop those workers)."""
    server = socket_server_factory(max_clients=5)
    workers: list[RawClient] = []
    try:
        for _ in range(5):
            raw = RawClient(server.lock_port)
            workers.append(raw)
            assert raw.hello(TOKEN)["ok"]
        extra = RawClient(server.lock_port)
        workers.append(extra)
        assert extra.hello(TOKEN)["error"]["code"] == "too_many_clients"
        result = health_servidor(server.lock_port)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "sem vagas" in result.stdout
    finally:
        for raw in workers:
            raw.close()
    result = health_servidor(server.lock_port)
    assert result.returncode == 0 and "sem vagas" not in result.stdout


def test_clients_are_counted_per_ipv4_address_and_per_ipv6_64() -> None:
    """One IPv6 host usually holds a whole /64: counted per address it could take every
    handshake place alone; an IPv4-mapped address is that IPv4 client."""
    from nsj_queue_lib.server.refusals import peer_host

    assert peer_host("127.0.0.2:5555") == "127.0.0.2"
    assert peer_host("::ffff:10.0.0.1:80") == "10.0.0.1"
    assert peer_host("2001:db8::1:443") == peer_host("2001:db8::ffff:1:9") == "2001:db8::/64"
    assert peer_host("2001:db8:0:1::1:443") == "2001:db8:0:1::/64"
