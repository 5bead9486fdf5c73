"""Helpers of the socket server tests: raw protocol client, child processes, free ports
(the server subprocess itself: tests/fixtures/servers.py, ServerProcess)."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENTRY = HERE / "server_entry.py"
LOCK_HOLDER = HERE / "lock_holder.py"
TOKEN = "segredo-de-teste"
HOST = "127.0.0.1"


def child_env() -> dict[str, str]:
    """Environment for child processes: the repository importable, no DB settings needed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def read_line(stream: Any, timeout: float) -> str:
    """Read one line from a child's pipe, waiting at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    data = b""
    fd = stream.fileno()
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"nenhuma linha em {timeout} s (lido: {data!r})")
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 1)
            if not chunk:
                raise EOFError(f"processo encerrou a saída (lido: {data!r})")
            data += chunk
    return data.decode().strip()


class RawClient:
    """A protocol-level client to send arbitrary bytes and read frames."""

    def __init__(self, port: int, host: str = HOST, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buffer = b""
        self.next_id = 1

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read_frame(self, timeout: float = 5.0) -> Optional[dict[str, Any]]:
        """Next frame, or None at EOF; raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("nenhum frame recebido")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send a request and return its reply (answering nothing else)."""
        msg_id = self.next_id
        self.next_id += 1
        self.send({"id": msg_id, "op": op, **fields})
        while True:
            frame = self.read_frame()
            assert frame is not None, f"conexão encerrada aguardando '{op}'"
            if frame.get("id") == msg_id and "op" not in frame:
                return frame

    def hello(self, token: Optional[str] = TOKEN, **fields: Any) -> dict[str, Any]:
        return self.call("hello", version=1, token=token, **fields)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the server closes the connection within `timeout` (frames skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.read_frame(max(0.01, deadline - time.monotonic())) is None:
                    return True
            except TimeoutError:
                return False
            except OSError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spawn_lock_holder(port: int, key: tuple[int, int],
                      token: str = TOKEN) -> subprocess.Popen[bytes]:
    """Child process holding `key` through SocketLocker; returns once it holds it."""
    proc = subprocess.Popen([sys.executable, str(LOCK_HOLDER), HOST, str(port), token,
                             str(key[0]), str(key[1])], stdout=subprocess.PIPE,
                            env=child_env(), cwd=str(ROOT))
    assert proc.stdout is not None
    assert read_line(proc.stdout, 15.0) == "LOCKED"
    return proc


def free_port() -> int:
    """A TCP port free right now on HOST (for processes that need a fixed port)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def notify_past_a_stuck_client(worker: Any, producer: Any, log: Callable[[], str]) -> float:
    """Notify ~8 KB payloads (up to ~32 MB) while another listener reads nothing, until
    the server logs that it dropped the slow client; every wake-up must still reach the
    healthy `worker` within 2 s.  Returns the slowest notify, in seconds."""
    payload = "x" * 7900
    slowest = 0.0
    for i in range(4000):
        started = time.monotonic()
        producer.notify(payload)
        slowest = max(slowest, time.monotonic() - started)
        assert worker.wait(2.0), "o worker saudável deixou de receber"
        if i % 100 == 99 and "cliente lento" in log():
            break
    return slowest
