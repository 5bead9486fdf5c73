"""The dashboard's HTTP hardening with real sockets, against a real PostgreSQL: Host
checked on an all-interfaces bind (DNS rebinding), malformed and oversized requests
refused with 4xx (no traceback), half-open connections holding a bounded number of
threads and answered 408 at their deadline, clients that leave logged at DEBUG, a
large payload cut in the page and streamed whole by /payload."""

from __future__ import annotations

import hashlib
import logging
import os
import select
import socket
import struct
import threading
import time
import urllib.parse
from typing import List, Tuple

import pytest

from nsj_queue_lib.dashboard.pages import PAYLOAD_PREVIEW
from nsj_queue_lib.dashboard.server import DASHBOARD_LIMITS, DashboardServer
from nsj_queue_lib.observability.http_guard import Limits
from tests.dashboard.conftest import start_dashboard
from tests.fixtures.http import exchange, read_answer
from tests.fixtures.waiting import eventually

TOKEN = "segredo-de-teste-123"






def get(port: int, path: str = "/", host: str = "127.0.0.1") -> Tuple[int, bytes, bytes]:
    return exchange(port, f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                          "Connection: close\r\n\r\n".encode())


def task_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def inproc(pg_queue):
    """A DashboardServer in a thread of this process with short limits (timeouts the
    test can wait for), on the queue's database."""
    servers: List[DashboardServer] = []

    def start(**limits) -> DashboardServer:
        server = DashboardServer(pg_queue.settings(), host="127.0.0.1", port=0, token=TOKEN,
                                 limits=Limits(**{"read_timeout": 1.0, "request_deadline": 2.0,
                                                  "max_threads": 8, **limits}))
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_host_header_is_checked_when_bound_to_all_interfaces(pg_queue, tmp_path):
    env = dict(pg_queue.server.env(), DASHBOARD_BIND_HOST="0.0.0.0",
               DASHBOARD_ALLOWED_HOSTS="painel.example, *.interno.example")
    dash = start_dashboard(pg_queue, tmp_path, token=TOKEN, db_env=env)
    port = dash.port
    table = pg_queue.table.encode()
    for host in ("evil.example", f"evil.example:{port}", "painel.example.evil.com",
                 "interno.example", "127.0.0.1.evil.example", "evil.example@127.0.0.1",
                 "0.0.0.0"):
        status, head, body = get(port, "/", host)
        assert status == 421, (host, status, head)
        assert "Host não permitido".encode() in body and table not in body
        assert b"DASHBOARD_ALLOWED_HOSTS" in body
    # every route, and a POST, before anything else happens
    fila = urllib.parse.urlencode({"f": pg_queue.table})
    assert get(port, f"/fila?{fila}", "evil.example")[0] == 421
    form = f"op=pause&{fila}".encode()
    status, _, _ = exchange(port, b"POST /acao HTTP/1.1\r\nHost: evil.example\r\n"
                            b"Content-Type: application/x-www-form-urlencoded\r\n"
                            + f"Content-Length: {len(form)}\r\n\r\n".encode() + form)
    assert status == 421
    # no Host at all (HTTP/1.0) and two Host headers
    assert exchange(port, b"GET / HTTP/1.0\r\n\r\n")[0] == 421
    assert exchange(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
                          b"\r\n")[0] == 421
    # the loopback names and the configured ones are served
    for host in (f"127.0.0.1:{port}", "localhost", f"LOCALHOST:{port}", f"[::1]:{port}",
                 "painel.example", f"painel.example:{port}", "a.interno.example",
                 "x.y.interno.example."):
        status, head, body = get(port, "/", host)
        assert status == 200, (host, status, head)
        assert table in body
    log = dash.proc.log()
    assert "Traceback" not in log
    assert log.count("Host 'evil.example' recusado") == 1  # warned once per name


def test_malformed_and_oversized_requests_are_refused(pg_queue, tmp_path):
    dash = start_dashboard(pg_queue, tmp_path, token=TOKEN)
    port = dash.port
    post = b"POST /entrar HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    cases = {
        "content-length abc": (post + b"Content-Length: abc\r\n\r\ntoken=x", 400),
        "content-length -1": (post + b"Content-Length: -1\r\n\r\n", 400),
        "content-length 1e3": (post + b"Content-Length: 1e3\r\n\r\n", 400),
        "two lengths": (post + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
        "chunked": (post + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 411),
        "body too large": (post + b"Content-Length: 50000000\r\n\r\n", 413),
        "body too large, sent": (post + b"Content-Length: 40000\r\n\r\n" + b"t" * 40000, 413),
        "huge header": (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"a" * 100_000
                        + b"\r\n\r\n", 431),
        "many headers": (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         + b"".join(b"X-%d: 1\r\n" % i for i in range(1500)) + b"\r\n", 431),
        "huge request line": (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n", 414),
        "garbage": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 hello\r\n\r\n", 400),
        "bad version": (b"GET / HTTP/7.0\r\nHost: 127.0.0.1\r\n\r\n", 505),
        "unknown method": (b"BREW / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 501),
    }
    for name, (request, want) in cases.items():
        status, head, body = exchange(port, request)
        assert status == want, (name, status, head, body)
        assert b"Traceback" not in body and len(body) < 200, name
        assert b"text/plain; charset=utf-8" in head and body.decode("utf-8").strip(), name
    # still serving, and nothing but DEBUG about it
    assert get(port)[0] == 200
    log = dash.proc.log()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_half_open_connections_hold_a_bounded_number_of_threads(pg_queue, tmp_path):
    """The real process with its default limits: 150 half-open requests; the process
    keeps at most DASHBOARD_LIMITS.max_threads handler threads, the rest are answered
    503 at once by the accepting thread."""
    dash = start_dashboard(pg_queue, tmp_path, token=TOKEN)
    before = task_count(dash.proc.pid)
    socks = []
    try:
        for _ in range(150):
            sock = socket.create_connection(("127.0.0.1", dash.port), timeout=10)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Lento: 1\r\n")  # no end
            socks.append(sock)
        limit = DASHBOARD_LIMITS.max_threads
        # the refused ones are closed (503 or a reset) without waiting for a timeout
        eventually(lambda: sum(1 for s in socks if select.select([s], [], [], 0)[0])
                   >= 150 - limit, timeout=10, message="conexões além do limite fechadas")
        threads = task_count(dash.proc.pid)
        assert threads <= before + limit, (before, threads)
        answers = [read_answer(s)[0] for s in socks if select.select([s], [], [], 0)[0]]
        assert len(answers) == 150 - limit
        assert set(answers) <= {503, 0} and answers.count(503) > 0, answers
    finally:
        for sock in socks:
            sock.close()
    # the held ones end at their deadline (or at once, now that they are closed)
    eventually(lambda: get(dash.port)[0] == 200, timeout=DASHBOARD_LIMITS.request_deadline + 5,
               message="painel atende de novo")
    assert "Traceback" not in dash.proc.log()


def test_requests_that_never_end_are_answered_408_at_their_deadline(inproc):
    server = inproc()
    base = threading.active_count()
    socks = []
    for _ in range(100):  # 8 held by handler threads, 92 answered 503 at once
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(sock)
    eventually(lambda: server._httpd.refused_busy == 92, timeout=10, message="92 recusadas")
    assert server._httpd.busy_threads == 8
    assert threading.active_count() <= base + 8
    started = time.monotonic()
    answers = [read_answer(sock)[0] for sock in socks]
    waited = time.monotonic() - started
    assert set(answers) <= {0, 408, 503} and 503 in answers, answers
    assert answers.count(408) == 8 and waited < 2.0 + 2.0
    for sock in socks:
        sock.close()
    eventually(lambda: server._httpd.busy_threads == 0, message="threads liberadas")
    assert get(server.port)[0] == 200

    # a client that trickles its request (a byte every 0.3 s, within the 1 s read
    # timeout) is cut at the 2 s deadline all the same
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Devagar: " + b"a" * 100
        started = time.monotonic()
        for byte in request:
            sock.sendall(bytes([byte]))
            if select.select([sock], [], [], 0.3)[0]:
                break
        status, _, body = read_answer(sock)
        assert status == 408 and b"Tempo esgotado" in body
        assert time.monotonic() - started < 2.0 + 1.5


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the server sees a reset connection."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_clients_that_leave_are_logged_at_debug_only(pg_queue, inproc, caplog):
    big = "x" * (8 * 1024 * 1024)
    task = pg_queue.insert(big, processo="grande")
    server = inproc(read_timeout=5.0, request_deadline=5.0)
    path = "/payload?" + urllib.parse.urlencode({"f": pg_queue.table, "id": task})
    caplog.set_level(logging.DEBUG, logger="nsj_queue_lib")
    n = 20
    for _ in range(n):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert sock.recv(1024).startswith(b"HTTP/1.0 200")
        _reset(sock)

    def gone() -> int:
        return sum(1 for r in caplog.records if "saiu no meio da requisição" in r.getMessage())

    eventually(lambda: gone() == n and server._httpd.busy_threads == 0, timeout=20,
               message=f"{n} saídas registradas")
    assert all(r.levelno == logging.DEBUG for r in caplog.records
               if "saiu" in r.getMessage())
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert not any(r.exc_info for r in caplog.records)
    assert get(server.port)[0] == 200


def test_a_large_payload_is_cut_in_the_page_and_streamed_whole(pg_queue, tmp_path):
    dash = start_dashboard(pg_queue, tmp_path, token=TOKEN)
    payload = ("0123456789abcdef" * (50 * 1024 * 1024 // 16))[:-3] + "fim"  # 50 MB
    task = pg_queue.insert(payload, processo="grande")
    status, head, body = get(dash.port, "/cadeia?" + urllib.parse.urlencode(
        {"f": pg_queue.table, "id": task}))
    assert status == 200
    assert len(body) < PAYLOAD_PREVIEW + 20_000, len(body)  # was the whole 50 MB
    page = body.decode()
    assert "Payload cortado" in page and f"{len(payload)} caracteres" in page
    link = "/payload?" + urllib.parse.urlencode({"f": pg_queue.table, "id": task})
    assert f'href="{link.replace("&", "&amp;")}"' in page
    # the link serves it whole, in slices, as text
    digest = hashlib.sha256()
    total = 0
    with socket.create_connection(("127.0.0.1", dash.port), timeout=30) as sock:
        sock.sendall(f"GET {link} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += sock.recv(65536)
        head, _, rest = buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200") and b"text/plain; charset=utf-8" in head
        digest.update(rest)
        total += len(rest)
        while True:
            got = sock.recv(1 << 20)
            if not got:
                break
            digest.update(got)
            total += len(got)
    assert total == len(payload)
    assert digest.hexdigest() == hashlib.sha256(payload.encode()).hexdigest()
    # a small payload stays whole in the page; an attempt without payload: 404
    small = pg_queue.insert({"efeito": "pequeno"})
    page = get(dash.port, "/cadeia?" + urllib.parse.urlencode(
        {"f": pg_queue.table, "id": small}))[2].decode()
    assert "Payload cortado" not in page and "pequeno" in page
    empty = pg_queue.insert(None)
    assert get(dash.port, "/payload?" + urllib.parse.urlencode(
        {"f": pg_queue.table, "id": empty}))[0] == 404
