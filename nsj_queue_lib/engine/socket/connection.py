"""Client connection to the socket server: handshake, requests, heartbeats, reconnection.

One `SocketConnection` is one logical client.  It holds at most one TCP
connection at a time (a *link*); every successful (re)connection starts a new
server session and increments `generation`.  Each link has one reader thread
that demultiplexes the frames: replies go to the request waiting for that id,
``ping`` requests from the server are answered at once (so a client busy on a
long task keeps its session and its locks), and events (wake-ups) go to the
`on_event` callback.

A request that gets no reply within `timeout` seconds ends the link: a late
reply can then never be mistaken for another one, and the server releases the
session's locks, so client and server never disagree about who holds what.
When the link is down, the next request reconnects, with exponential backoff
between failed attempts.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import socket
import ssl
import threading
import time
from typing import Any, Callable, Optional

from nsj_queue_lib.backoff import Backoff
from nsj_queue_lib.engine.socket import legacy, tls
from nsj_queue_lib.engine.socket import protocol as p
from nsj_queue_lib.exceptions import ConfigError, CoordinationError, ProtocolError, ServerFull

logger = logging.getLogger(__name__)

_RECV_BYTES = 65536


class _Waiter:
    """A request waiting for its reply."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: Optional[p.Message] = None
        self.error: Optional[str] = None

    def resolve(self, reply: p.Message) -> None:
        self.reply = reply
        self.event.set()

    def fail(self, reason: str) -> None:
        self.error = reason
        self.event.set()


class _Link:
    """One TCP connection (one server session)."""

    def __init__(self, sock: socket.socket, session_id: str, heartbeat: float,
                 decoder: p.FrameDecoder) -> None:
        self.sock = sock
        self.session_id = session_id
        self.heartbeat = heartbeat
        self.decoder = decoder
        self.generation = 0
        self.alive = True
        self.pending: dict[Any, _Waiter] = {}
        self.send_mutex = threading.Lock()
        self.last_recv = time.monotonic()
        self.reader: Optional[threading.Thread] = None

    def send(self, message: p.Message) -> None:
        data = p.encode(message)
        with self.send_mutex:  # with TLS, it also guards reads (see engine.socket.tls)
            self.sock.sendall(data)


class SocketConnection:
    """A reconnecting, thread-safe client of the socket server."""

    def __init__(self, host: str, port: int, token: Optional[str] = None,
                 timeout: float = 5.0, *, role: str = "client", queue: Optional[str] = None,
                 on_event: Optional[Callable[[p.Message], None]] = None,
                 on_disconnect: Optional[Callable[[int, str], None]] = None,
                 backoff_initial: float = 0.2, backoff_max: float = 5.0,
                 tls_context: Optional[ssl.SSLContext] = None) -> None:
        self.host = host
        self._tls = tls_context
        self.port = int(port)
        self.timeout = float(timeout)
        self._token = token or None
        self._role = role
        self._queue = queue
        self._on_event = on_event
        self._on_disconnect = on_disconnect
        # Reconnect waits: doubling from backoff_initial, drawn in [80%, 100%].
        self._backoff = Backoff(backoff_initial, backoff_max, jitter=0.8)
        self._mutex = threading.Lock()
        self._connect_mutex = threading.Lock()
        self._ids = itertools.count(1)
        self._link: Optional[_Link] = None
        self._generation = 0
        self._next_attempt = 0.0
        self._last_error = ""
        self._closed = False
        self.channel = ""
        # Protocol version spoken: the newest, or a lower one once an older server
        # refused it.
        self.version = p.PROTOCOL_VERSION

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def generation(self) -> int:
        """Number of sessions opened so far (the current one, when connected)."""
        return self._generation

    @property
    def connected(self) -> bool:
        link = self._link
        return link is not None and link.alive

    @property
    def session_id(self) -> Optional[str]:
        """Server-side id of the current session, or None when disconnected."""
        link = self._link
        return link.session_id if link is not None and link.alive else None

    @property
    def closed(self) -> bool:
        return self._closed

    def retry_in(self) -> float:
        """Seconds until a reconnection attempt is allowed (0 when connected or allowed)."""
        if self.connected:
            return 0.0
        return max(0.0, self._next_attempt - time.monotonic())

    # -- connection ----------------------------------------------------------------
    def ensure_connected(self) -> int:
        """Connect if needed (respecting the backoff); return the current generation."""
        return self._ensure_link().generation

    def _ensure_link(self) -> _Link:
        with self._connect_mutex:
            link = self._link
            if link is not None and link.alive:
                return link
            if self._closed:
                raise CoordinationError("conexão com o servidor de fila já foi fechada")
            now = time.monotonic()
            if now < self._next_attempt:
                raise CoordinationError(
                    f"servidor {self.address} indisponível ({self._last_error}); "
                    f"nova tentativa em {self._next_attempt - now:.1f} s")
            try:
                link, leftovers = self._open()
            except CoordinationError as exc:
                self._next_attempt = now + self._backoff.next()
                self._last_error = str(exc)
                raise
            self._backoff.reset()
            self._generation += 1
            link.generation = self._generation
            with self._mutex:
                if self._closed:
                    link.sock.close()
                    raise CoordinationError("conexão com o servidor de fila já foi fechada")
                self._link = link
            link.reader = threading.Thread(target=self._read_loop, args=(link,), daemon=True,
                                           name=f"nsj-queue-socket-reader-{self.port}")
            link.reader.start()
            log = logger.info if link.generation > 1 else logger.debug
            log("Conectado ao servidor %s (sessão %s, geração %d).", self.address,
                link.session_id, link.generation)
        for frame in leftovers:
            self._dispatch(link, frame)
        return link

    def _open(self) -> tuple[_Link, list[p.Message]]:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise CoordinationError(f"não foi possível conectar a {self.address}: {exc}") from None
        if self._tls is not None:
            sock = self._start_tls(sock)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = p.request(p.OP_HELLO, 0, version=self.version, token=self._token,
                              role=self._role, queue=self._queue,
                              client=f"{socket.gethostname()}:{os.getpid()}")
            sock.sendall(p.encode(hello))
            decoder = p.FrameDecoder()
            reply, leftovers = self._read_hello(sock, decoder)
            if not reply.get("ok"):
                code, message = p.error_of(reply)
                if code == p.ERR_TLS_REQUIRED:
                    raise ConfigError(f"servidor {self.address} recusou a conexão: {message}")
                if code == p.ERR_UNSUPPORTED_VERSION and self.version > 1:
                    # A server of an earlier 2.x release: speak the version below (2: no
                    # `idle`; 1: no `claim` either).
                    logger.info("Servidor %s não aceita o protocolo versão %d; usando a "
                                "versão %d.", self.address, self.version, self.version - 1)
                    self.version -= 1
                    sock.close()
                    return self._open()
                error = ServerFull if code == p.ERR_TOO_MANY_CLIENTS else CoordinationError
                raise error(f"servidor {self.address} recusou a conexão: {message} ({code})")
            self.channel = str(reply.get("channel") or "")
            heartbeat = reply.get("heartbeat")
            if not isinstance(heartbeat, (int, float)) or heartbeat <= 0:
                heartbeat = self.timeout
            return _Link(sock, str(reply.get("session")), float(heartbeat), decoder), leftovers
        except (OSError, ProtocolError) as exc:
            sock.close()
            raise CoordinationError(
                f"falha no handshake com o servidor {self.address}: {exc}") from None
        except BaseException:
            sock.close()
            raise

    def _start_tls(self, sock: socket.socket) -> ssl.SSLSocket:
        """TLS handshake verifying the server's certificate and host name (SERVER_HOST).

        A certificate that does not verify, or a server without TLS, is a configuration
        error (ConfigError): retrying cannot fix it.
        """
        assert self._tls is not None
        try:
            return self._tls.wrap_socket(sock, server_hostname=self.host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise ConfigError(
                f"certificado TLS do servidor {self.address} recusado: "
                f"{exc.verify_message or exc}; confira SERVER_TLS_CA_FILE e se SERVER_HOST é "
                "um nome do certificado") from None
        except ssl.SSLError as exc:
            sock.close()
            raise ConfigError(
                f"falha na negociação TLS com o servidor {self.address} ({exc.reason or exc}): "
                "o servidor está com TLS ativo (SERVER_TLS_CERT_FILE/SERVER_TLS_KEY_FILE)? "
                "Sem TLS no servidor, use SERVER_TLS=false") from None
        except OSError as exc:
            sock.close()
            raise CoordinationError(
                f"falha na negociação TLS com o servidor {self.address}: {exc}") from None

    def _read_hello(self, sock: socket.socket,
                    decoder: p.FrameDecoder) -> tuple[p.Message, list[p.Message]]:
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CoordinationError(
                    f"servidor {self.address} não respondeu ao 'hello' (um servidor da "
                    f"nsj-queue-lib {legacy.LEGACY_VERSION} não responde: servidor e workers "
                    "precisam da mesma versão)")
            sock.settimeout(remaining)
            try:
                data = sock.recv(_RECV_BYTES)
            except socket.timeout:
                continue
            except ssl.SSLError as exc:
                raise CoordinationError(
                    f"falha de TLS com o servidor {self.address} durante o handshake: "
                    f"{exc}") from None
            if not data:
                raise CoordinationError(
                    f"servidor {self.address} encerrou a conexão durante o handshake")
            if legacy.looks_legacy(data):
                with contextlib.suppress(OSError):
                    sock.sendall(legacy.client_refusal())
                raise ConfigError(legacy.client_error(self.address))
            frames = decoder.feed(data)
            for index, frame in enumerate(frames):
                if p.is_reply(frame):
                    sock.settimeout(self.timeout)
                    return frame, frames[index + 1:]

    # -- requests ------------------------------------------------------------------
    def request(self, op: str, **fields: Any) -> tuple[Any, int]:
        """Send a request and wait for its reply; return (result, generation).

        Raises CoordinationError when the server cannot be reached or the link
        fails (no reply within `timeout` included), and ProtocolError when the
        server answers with an error.
        """
        return self.request_ahead(op, **fields)()

    def request_ahead(self, op: str, **fields: Any) -> Callable[[], tuple[Any, int]]:
        """Send a request now; return the call that waits for its reply (as `request`).

        Lets the caller overlap the round trip with other work; the reply is kept
        by the reader thread until asked for."""
        link = self._ensure_link()
        msg_id = next(self._ids)
        waiter = _Waiter()
        with self._mutex:
            if not link.alive:
                raise CoordinationError(f"conexão com {self.address} perdida")
            link.pending[msg_id] = waiter
        try:
            link.send(p.request(op, msg_id, **fields))
        except OSError as exc:
            self._drop(link, f"falha ao enviar: {exc}")
            raise CoordinationError(f"falha ao enviar '{op}' a {self.address}: {exc}") from None
        except ProtocolError:
            with self._mutex:
                link.pending.pop(msg_id, None)
            raise
        sent_at = time.monotonic()

        def reply() -> tuple[Any, int]:
            if not waiter.event.wait(max(0.0, sent_at + self.timeout - time.monotonic())):
                self._drop(link, f"sem resposta para '{op}' em {self.timeout:g} s")
                raise CoordinationError(f"servidor {self.address} não respondeu a '{op}' "
                                        f"em {self.timeout:g} s")
            if waiter.reply is None:
                raise CoordinationError(
                    f"conexão com {self.address} perdida durante '{op}': {waiter.error}")
            if not waiter.reply.get("ok"):
                code, message = p.error_of(waiter.reply)
                raise ProtocolError(f"'{op}' recusado pelo servidor: {message} ({code})")
            return waiter.reply.get("result"), link.generation

        return reply

    def send(self, op: str, **fields: Any) -> bool:
        """Send a request without waiting for its reply (pipelined); the reply is ignored.

        Only on the current link: False (nothing sent) when there is none.  Requests
        are processed in order, so a later request of this session sees its effect.
        """
        with self._mutex:
            link = self._link
        if link is None or not link.alive:
            return False
        try:
            link.send(p.request(op, next(self._ids), **fields))
            return True
        except OSError as exc:
            self._drop(link, f"falha ao enviar: {exc}")
            return False

    # -- reader thread -------------------------------------------------------------
    def _read_loop(self, link: _Link) -> None:
        reason = "conexão encerrada pelo servidor"
        silence_limit = link.heartbeat + 2 * self.timeout
        try:
            secure = tls.is_tls(link.sock)
            while link.alive:
                if not (secure and tls.has_pending(link.sock, link.send_mutex)):
                    readable, _, _ = select.select([link.sock], [], [],
                                                   min(1.0, silence_limit))
                    if not link.alive:
                        break
                    if not readable:
                        if time.monotonic() - link.last_recv > silence_limit:
                            reason = "servidor não responde (heartbeat)"
                            break
                        continue
                if secure:
                    # Read under the write lock, without blocking: one SSL object is
                    # never used by two threads at once.
                    data = tls.recv_locked(link.sock, link.send_mutex, _RECV_BYTES,
                                           self.timeout)
                    if data is None:
                        continue
                else:
                    data = link.sock.recv(_RECV_BYTES)
                if not data:
                    break
                link.last_recv = time.monotonic()
                for frame in link.decoder.feed(data):
                    self._dispatch(link, frame)
        except ProtocolError as exc:
            reason = f"violação de protocolo do servidor: {exc}"
        except (OSError, ValueError) as exc:
            reason = f"erro na conexão: {exc}"
        self._drop(link, reason)

    def _dispatch(self, link: _Link, frame: p.Message) -> None:
        if p.is_reply(frame):
            with self._mutex:
                waiter = link.pending.pop(frame.get("id"), None)
            if waiter is not None:
                waiter.resolve(frame)
            return
        op = frame.get("op")
        if op == p.OP_PING:
            try:
                link.send(p.reply_ok(frame.get("id"), "pong"))
            except OSError as exc:
                self._drop(link, f"falha ao responder ao ping: {exc}")
            return
        if self._on_event is not None:
            try:
                self._on_event(frame)
            except Exception:
                logger.exception("Erro tratando o evento %r do servidor", op)

    def _drop(self, link: _Link, reason: str) -> None:
        """End a link (idempotent): fail its pending requests and report the loss."""
        with self._mutex:
            if not link.alive:
                return
            link.alive = False
            waiters = list(link.pending.values())
            link.pending.clear()
            if self._link is link:
                self._link = None
            closing = self._closed
        for waiter in waiters:
            waiter.fail(reason)
        tls.shutdown(link.sock)
        link.sock.close()
        if closing:
            return
        logger.warning("Conexão com o servidor %s perdida (sessão %s): %s", self.address,
                       link.session_id, reason)
        if self._on_disconnect is not None:
            try:
                self._on_disconnect(link.generation, reason)
            except Exception:
                logger.exception("Erro tratando a perda de conexão")

    def close(self) -> None:
        """Close the connection (idempotent); the server releases the session's locks."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            link = self._link
        if link is not None:
            self._drop(link, "fechada pelo cliente")
            reader = link.reader
            if reader is not None and reader is not threading.current_thread():
                reader.join(self.timeout)
