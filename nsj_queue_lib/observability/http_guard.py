"""HTTP hardening shared by the dashboard and the metrics endpoint (http.server).

`GuardedServer` and `GuardedHandler` put bounds on what a client can hold or send:

* a read/write timeout on every socket operation (`Limits.read_timeout`) and a
  deadline for receiving a whole request, line, headers and body
  (`Limits.request_deadline`): a client that sends its request byte by byte, or
  opens a connection and sends nothing, is answered 408 and closed when the
  deadline passes (one watchdog thread per server shuts the socket down);
* request line plus headers at most `Limits.max_header_bytes` (414/431), a body at
  most `Limits.max_body_bytes` (413), read before the method runs (`self.body`);
  a malformed or repeated Content-Length is 400, Transfer-Encoding 411;
* at most `Limits.max_threads` connections served at once: one more is answered
  503 by the accepting thread, without a thread of its own;
* errors in Portuguese, as text/plain, with Connection: close;
* a client that goes away (reset, broken pipe, a write that times out) is logged
  at DEBUG, never as an error with a traceback.
"""

from __future__ import annotations

import io
import logging
import re
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple, Type

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Bounds of one server (seconds, bytes, threads)."""

    read_timeout: float = 10.0      # each read or write on the socket
    request_deadline: float = 20.0  # receiving a whole request
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 64 * 1024
    max_threads: int = 32


class ClientGone(ConnectionAbortedError):
    """The client closed the connection, reset it or stopped reading the response."""


# What a client going away looks like (logged at DEBUG).
DISCONNECTS: Tuple[Type[BaseException], ...] = (BrokenPipeError, ConnectionResetError,
                                                 ConnectionAbortedError)
# ... and a write that timed out: the client stopped reading.
_LEFT: Tuple[Type[BaseException], ...] = (*DISCONNECTS, TimeoutError)

ERROR_TEXTS: Dict[int, str] = {
    400: "Requisição malformada.",
    404: "Não encontrado.",
    405: "Método não permitido.",
    408: "Tempo esgotado esperando a requisição.",
    411: "Envie o corpo com Content-Length (Transfer-Encoding não é aceito).",
    413: "Corpo da requisição grande demais.",
    414: "Linha da requisição longa demais.",
    421: "Host não permitido.",
    431: "Cabeçalhos da requisição grandes demais.",
    500: "Erro interno.",
    501: "Método não suportado.",
    503: "Servidor ocupado: tente de novo em instantes.",
    505: "Versão de HTTP não suportada.",
}
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
         b"Connection: close\r\nRetry-After: 1\r\nContent-Length: %d\r\n\r\n%s")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,15}")
BUSY_WARNING_EVERY = 60.0  # seconds between two warnings about refused connections
# After refusing a request that was not read to its end: read (and drop) what the client
# still sends, for so long and so much at most, before closing; closing with unread
# input would reset the connection and the client could lose the answer.
DRAIN_SECONDS = 1.0
DRAIN_BYTES = 256 * 1024


class _Refused(Exception):
    """The request is refused with `code` (an ERROR_TEXTS key)."""

    def __init__(self, code: int, detail: str = "") -> None:
        super().__init__(detail or ERROR_TEXTS.get(code, str(code)))
        self.code = code


class _Writer(io.BufferedIOBase):
    """The response side of the socket: every failure to send is `ClientGone`."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        try:
            self._sock.sendall(b)
        except OSError as exc:  # reset, broken pipe, timed out (client not reading)
            raise ClientGone(str(exc) or type(exc).__name__) from exc
        with memoryview(b) as view:
            return view.nbytes

    def fileno(self) -> int:
        return self._sock.fileno()


class GuardedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with bounded threads and a watchdog for request deadlines."""

    daemon_threads = True
    block_on_close = False  # stop() does not wait for clients: their sockets are shut
    request_queue_size = 128  # listen backlog (5 by default: a burst would wait for SYN retries)

    def __init__(self, address: Tuple[str, int], handler: type, limits: Limits,
                 name: str = "http") -> None:
        self.limits = limits
        self.name = name
        self._slots = threading.BoundedSemaphore(limits.max_threads)
        self._cond = threading.Condition()
        self._deadlines: Dict[socket.socket, float] = {}
        self._open: set = set()
        self._closed = False
        self.refused_busy = 0
        self._busy_warned = 0.0
        super().__init__(address, handler)
        self._watchdog = threading.Thread(target=self._watch, name=f"{name}_prazos",
                                          daemon=True)
        self._watchdog.start()

    # -- a bounded number of handler threads --------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse_busy(request, client_address)
            return
        with self._cond:
            self._open.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self._cond:
            self._deadlines.pop(request, None)
            self._open.discard(request)
        self._slots.release()

    def _refuse_busy(self, request: socket.socket, client_address: Any) -> None:
        """503 written by the accepting thread (never blocks it), then closed."""
        self.refused_busy += 1
        now = time.monotonic()
        if now - self._busy_warned >= BUSY_WARNING_EVERY:
            self._busy_warned = now
            logger.warning("%s: conexão de %s recusada: %s atendimentos simultâneos em curso "
                           "(limite); %s recusadas até agora", self.name, client_address[0],
                           self.limits.max_threads, self.refused_busy)
        else:
            logger.debug("%s: conexão de %s recusada (limite de atendimentos)", self.name,
                         client_address[0])
        text = ERROR_TEXTS[503].encode("utf-8")
        try:
            request.setblocking(False)
            request.send(_BUSY % (len(text), text))
        except OSError:
            pass
        self.shutdown_request(request)

    # -- request deadlines ------------------------------------------------------------------
    def arm(self, conn: socket.socket, seconds: float) -> float:
        """Shut `conn` down for reading in `seconds` unless `disarm()`ed; the deadline."""
        deadline = time.monotonic() + seconds
        with self._cond:
            self._deadlines[conn] = deadline
            self._cond.notify()
        return deadline

    def disarm(self, conn: socket.socket) -> None:
        with self._cond:
            self._deadlines.pop(conn, None)

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for conn in [c for c, d in self._deadlines.items() if d <= now]:
                    del self._deadlines[conn]
                    _shut(conn, socket.SHUT_RD)  # the handler's read returns: 408
                wait = min(self._deadlines.values(), default=now + 3600) - now
                self._cond.wait(max(0.01, wait))

    def server_close(self) -> None:
        super().server_close()
        with self._cond:
            self._closed = True
            for conn in self._open:
                _shut(conn, socket.SHUT_RDWR)
            self._cond.notify()

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, _LEFT):
            logger.debug("%s: cliente %s saiu: %s", self.name, client_address[0], exc)
        else:
            logger.error("%s: erro ao atender %s", self.name, client_address[0], exc_info=True)

    @property
    def busy_threads(self) -> int:
        with self._cond:
            return len(self._open)


def _drain(conn: socket.socket) -> None:
    """Lingering close: end our side, then drop the client's input until it closes, or
    DRAIN_BYTES or DRAIN_SECONDS."""
    deadline = time.monotonic() + DRAIN_SECONDS
    left = DRAIN_BYTES
    try:
        conn.shutdown(socket.SHUT_WR)
        while left > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            conn.settimeout(remaining)
            got = conn.recv(min(left, 65536))
            if not got:
                return
            left -= len(got)
    except OSError:
        pass


def _shut(conn: socket.socket, how: int) -> None:
    try:
        conn.shutdown(how)
    except OSError:
        pass


class GuardedHandler(BaseHTTPRequestHandler):
    """Reads the request within the server's limits before `do_<METHOD>` runs.

    `self.body` holds the request body (b"" without one).  Subclasses catch
    DISCONNECTS before any `except Exception` of their own and re-raise them."""

    server: GuardedServer
    log_name = "HTTP"  # in log lines
    body: bytes = b""
    _deadline = 0.0
    _read_whole = False  # the request was read to its end (nothing left to drain)

    def setup(self) -> None:
        # A per-connection value (the class attribute is the default setup() reads).
        self.timeout = self.server.limits.read_timeout  # type: ignore[misc]
        super().setup()
        self.wfile = _Writer(self.connection)

    def finish(self) -> None:
        super().finish()
        if not self._read_whole:
            _drain(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s: %s - %s", self.log_name, self.address_string(), format % args)

    # -- one request ---------------------------------------------------------------------
    def handle_one_request(self) -> None:
        self.close_connection = True
        self.requestline, self.request_version, self.command = "", "", ""
        self.body = b""
        self._read_whole = False
        limits = self.server.limits
        self._deadline = self.server.arm(self.connection, limits.request_deadline)
        try:
            try:
                if not self._read_request():
                    return
            finally:
                self.server.disarm(self.connection)
        except _Refused as refused:
            logger.debug("%s: requisição de %s recusada (%s): %s", self.log_name,
                         self.address_string(), refused.code, refused)
            self.send_error(refused.code)
            return
        except _LEFT as exc:
            self._gone(exc)
            return
        method = getattr(self, "do_" + self.command, None)
        if method is None:
            self.send_error(501)
            return
        try:
            method()
            self.wfile.flush()
        except _LEFT as exc:
            self._gone(exc)

    def _gone(self, exc: BaseException) -> None:
        logger.debug("%s: cliente %s saiu no meio da requisição %r: %s", self.log_name,
                     self.address_string(), self.requestline[:200],
                     str(exc) or type(exc).__name__)

    def _ended(self, got: bytes) -> bool:
        """The client stopped sending (EOF): 408 if the deadline passed, else it left."""
        if time.monotonic() >= self._deadline:
            raise _Refused(408)
        if got:
            self._gone(ClientGone("conexão fechada no meio da requisição"))
        return False

    def _read_request(self) -> bool:
        """Request line, headers and body within the limits (False: nothing to answer)."""
        room = self.server.limits.max_header_bytes
        try:
            line = self.rfile.readline(room + 1)
        except TimeoutError:
            raise _Refused(408) from None
        if not line.endswith(b"\n"):
            if len(line) > room:
                raise _Refused(414)
            return self._ended(line)
        head: List[bytes] = []
        room -= len(line)
        while True:
            try:
                header = self.rfile.readline(room + 1)
            except TimeoutError:
                raise _Refused(408) from None
            if not header.endswith(b"\n"):
                if len(header) > room:
                    raise _Refused(431)
                return self._ended(line + b"".join(head) + header)
            room -= len(header)
            head.append(header)
            if header in (b"\r\n", b"\n"):
                break
        self.raw_requestline = line
        socket_file, self.rfile = self.rfile, io.BytesIO(b"".join(head))
        try:
            parsed = self.parse_request()  # answers 400/431/505 itself
        finally:
            self.rfile = socket_file
        if not parsed:
            return False
        self.close_connection = True  # one request per connection (HTTP/1.0 answers)
        self.body = self._read_body()
        self._read_whole = True
        return True

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise _Refused(411, "Transfer-Encoding")
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return b""
        if len(set(v.strip() for v in values)) != 1 or not _CONTENT_LENGTH.fullmatch(
                values[0].strip()):
            raise _Refused(400, f"Content-Length inválido: {values[0][:40]!r}")
        length = int(values[0])
        if length > self.server.limits.max_body_bytes:
            raise _Refused(413, f"{length} bytes")
        try:
            data = self.rfile.read(length) if length else b""
        except TimeoutError:
            raise _Refused(408) from None
        if len(data) < length:
            if time.monotonic() >= self._deadline:
                raise _Refused(408)
            raise ClientGone("conexão fechada antes do fim do corpo")
        return data

    # -- errors --------------------------------------------------------------------------
    def send_error(self, code: int, message: Optional[str] = None,
                   explain: Optional[str] = None) -> None:
        """A short Portuguese text/plain answer (the standard library's English page is
        not used), then the connection is closed."""
        if message:
            logger.debug("%s: %s para %s: %s", self.log_name, code, self.address_string(),
                         message)
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # would send the body alone: no status
            self.request_version = "HTTP/1.0"
        body = (ERROR_TEXTS.get(code, "Erro.") + "\n").encode("utf-8")
        try:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)
        except _LEFT as exc:
            self._gone(exc)
