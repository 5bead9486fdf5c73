"""The metrics/healthz endpoint's HTTP hardening (nsj_queue_lib.observability.http_guard) with real
sockets: in a real worker process (METRICS_PORT) with its default limits, and in a
MetricsEndpoint of this process with short ones."""

from __future__ import annotations

import logging
import os
import select
import socket
import struct
import threading
import time
from typing import List, Tuple

import pytest

from nsj_queue_lib.observability.http_guard import Limits
from nsj_queue_lib.observability.metrics import METRICS_LIMITS, MetricsEndpoint
from tests.fixtures.http import exchange, read_answer
from tests.fixtures.processes import wait_ready
from tests.fixtures.waiting import eventually
from tests.server.socket_server_helpers import free_port


def get(port: int, path: str = "/metrics") -> Tuple[int, bytes, bytes]:
    return exchange(port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())


@pytest.fixture
def endpoint():
    """A MetricsEndpoint of this process (real HTTP server thread) with short limits and
    a large exposition (about 6 MB: a client that stops reading is seen at once)."""
    endpoints: List[MetricsEndpoint] = []

    def start(**limits) -> MetricsEndpoint:
        samples = [({"n": str(i)}, i) for i in range(150_000)]
        ep = MetricsEndpoint("127.0.0.1", 0, lambda: [("teste_grande", "gauge", "muitas "
                                                       "amostras", samples)],
                             lambda: (True, "saudável"),
                             limits=Limits(**{"read_timeout": 1.0, "request_deadline": 2.0,
                                              "max_header_bytes": 8192, "max_body_bytes": 0,
                                              "max_threads": 4, **limits}))
        ep.start()
        endpoints.append(ep)
        return ep

    yield start
    for ep in endpoints:
        ep.stop()


def test_worker_metrics_endpoint_refuses_bad_requests_and_bounds_threads(pg_queue):
    port = free_port()
    worker = pg_queue.start_worker(METRICS_PORT=port)
    wait_ready(worker)
    eventually(lambda: get(port, "/healthz")[0] == 200, message="healthz 200")
    cases = {
        "content-length abc": (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n"
                               b"\r\n", 400),
        "a body": (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde", 413),
        "huge header": (b"GET /metrics HTTP/1.1\r\nX-A: " + b"a" * 100_000 + b"\r\n\r\n", 431),
        "garbage": (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400),
    }
    for name, (request, want) in cases.items():
        status, head, body = exchange(port, request)
        assert status == want, (name, status, head)
        assert b"Traceback" not in body and body.decode("utf-8").strip(), name
    # 60 half-open requests: at most METRICS_LIMITS.max_threads threads hold them
    before = len(os.listdir(f"/proc/{worker.pid}/task"))
    socks = []
    try:
        for _ in range(60):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append(sock)
        limit = METRICS_LIMITS.max_threads
        eventually(lambda: sum(1 for s in socks if select.select([s], [], [], 0)[0])
                   >= 60 - limit, timeout=10, message="recusadas além do limite")
        assert len(os.listdir(f"/proc/{worker.pid}/task")) <= before + limit
    finally:
        for sock in socks:
            sock.close()
    eventually(lambda: get(port, "/healthz")[0] == 200, message="healthz 200 de novo")
    log = worker.log()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_half_open_requests_get_408_and_slots_come_back(endpoint):
    ep = endpoint()
    base = threading.active_count()
    socks = []
    for _ in range(120):
        sock = socket.create_connection(("127.0.0.1", ep.port), timeout=10)
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        socks.append(sock)
    eventually(lambda: ep._httpd.refused_busy == 116, message="116 recusadas")
    assert ep._httpd.busy_threads == 4 and threading.active_count() <= base + 4
    started = time.monotonic()
    answers = [read_answer(sock)[0] for sock in socks]
    assert answers.count(408) == 4 and set(answers) <= {0, 408, 503}, answers
    assert 503 in answers and time.monotonic() - started < 2.0 + 2.0
    for sock in socks:
        sock.close()
    eventually(lambda: ep._httpd.busy_threads == 0, message="threads liberadas")
    status, _, body = get(ep.port)
    assert status == 200 and b"teste_grande" in body and len(body) > 4_000_000
    assert get(ep.port, "/healthz")[0] == 200
    head = exchange(ep.port, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head[0] == 200 and head[2] == b""


def test_clients_that_leave_are_logged_at_debug(endpoint, caplog):
    ep = endpoint(read_timeout=5.0, request_deadline=5.0)
    caplog.set_level(logging.DEBUG, logger="nsj_queue_lib")
    n = 10
    for _ in range(n):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", ep.port))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.0 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # reset, in the middle of the answer

    def gone() -> int:
        return sum(1 for r in caplog.records if "saiu no meio da requisição" in r.getMessage())

    eventually(lambda: gone() == n and ep._httpd.busy_threads == 0, timeout=20,
               message=f"{n} saídas registradas")
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(r.exc_info for r in caplog.records)
