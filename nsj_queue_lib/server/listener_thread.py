"""One thread per connected client: reads its frames, answers them, watches its health.

The thread owns the reading side of the socket.  Writes (replies, heartbeat
pings, and wake-ups sent by other threads) go through `send`, serialised by a
per-connection mutex and bounded by the socket timeout (TIMEOUT_SOCKET_MESSAGE).

Health rules (see docs/protocol.md):

* ``hello`` must arrive within the handshake budget (2 s, or ``timeout`` if shorter);
  once it ran out the connection no longer counts against SERVER_MAX_HANDSHAKES.
* An incomplete frame must be completed within ``timeout`` seconds.
* After ``heartbeat_interval`` seconds without receiving anything, the server
  sends a ``ping``; if nothing arrives within ``timeout`` seconds after it, the
  peer is considered dead.  A client busy on a long task still answers from its
  reader thread, so its locks are kept; a dead or frozen peer loses them.

Whatever ends the connection, `run` releases every lock of the session and
unregisters it from the server (through the `on_closed` callback).
"""

from __future__ import annotations

import itertools
import logging
import os
import select
import socket
import ssl
import threading
import time
from typing import Callable, Optional

from nsj_queue_lib.engine.socket import protocol as p
from nsj_queue_lib.engine.socket import tls
from nsj_queue_lib.engine.socket.legacy import looks_legacy, server_refusal, versions_text
from nsj_queue_lib.exceptions import ProtocolError
from nsj_queue_lib.server.rpc_interpreter import RpcInterpreter, Session

logger = logging.getLogger(__name__)

_RECV_BYTES = 65536
_LEGACY_LINGER = 1.0  # seconds a refused 1.2.2 client gets to read the refusal
_MAX_SELECT_WAIT = 1.0
_REFUSE_LINGER = 0.2  # seconds a refused plain-text client gets to read the refusal
_EVENT_LOCK_WAIT = 0.05  # seconds a wake-up waits for a write in progress to the same client
_ping_ids = itertools.count(1)


class ListenerThread(threading.Thread):
    """Serve one client connection until it ends."""

    def __init__(self, sock: socket.socket, session: Session, interpreter: RpcInterpreter, *,
                 timeout: float, heartbeat_interval: float,
                 on_closed: Callable[[ListenerThread, str], None],
                 max_frame: int = p.MAX_FRAME_BYTES,
                 handshake_timeout: Optional[float] = None,
                 tls_context: Optional[ssl.SSLContext] = None,
                 on_handshake_over: Optional[Callable[[ListenerThread], None]] = None) -> None:
        super().__init__(name=f"nsj-queue-client-{session.conn_id}", daemon=True)
        self.sock = sock
        self.session = session
        self._interpreter = interpreter
        self._timeout = timeout
        self._heartbeat = heartbeat_interval
        # Budget of an unauthenticated connection: it holds no client slot meanwhile.
        self._handshake = min(handshake_timeout or timeout, timeout)
        self._on_closed = on_closed
        # Called when the handshake budget ran out, before the (slow) legacy refusal:
        # the connection stops counting against SERVER_MAX_HANDSHAKES at once.
        self._on_handshake_over = on_handshake_over
        # TLS: the socket is wrapped in this thread (a slow handshake never blocks the
        # accept loop); from then on `_send_mutex` guards reads too (see engine.socket.tls).
        self._tls_context = tls_context
        self._decoder = p.FrameDecoder(max_frame)
        self._send_mutex = threading.Lock()
        self._reason: Optional[str] = None
        self._reason_mutex = threading.Lock()
        now = time.monotonic()
        self._connected_at = now
        self._last_recv = now
        self._partial_since: Optional[float] = None
        self._ping_id: Optional[str] = None
        self._ping_sent_at = 0.0
        sock.settimeout(timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not TCP (tests may use socketpairs)

    # -- called from other threads -------------------------------------------------
    def send(self, message: p.Message) -> bool:
        """Send one frame; on failure the connection is aborted and False returned."""
        try:
            data = p.encode(message)
        except (ProtocolError, TypeError, ValueError) as exc:
            logger.error("Mensagem não enviada à sessão %s: %s", self.session.conn_id, exc)
            return False
        try:
            with self._send_mutex:
                self.sock.sendall(data)
            return True
        except OSError as exc:
            self.abort(f"falha ao enviar: {exc}")
            return False

    def send_event(self, message: p.Message) -> bool:
        """Send a wake-up without ever blocking the caller (the server's wake loop).

        A client whose socket buffer is full (it stopped reading) or that is in the
        middle of a slow write is dropped: one slow client never delays the others.
        """
        try:
            data = p.encode(message)
        except (ProtocolError, TypeError, ValueError) as exc:
            logger.error("Mensagem não enviada à sessão %s: %s", self.session.conn_id, exc)
            return False
        if not self._send_mutex.acquire(timeout=_EVENT_LOCK_WAIT):
            self.abort("cliente lento: escrita anterior ainda pendente")
            return False
        if tls.is_tls(self.sock):
            try:
                delivered = tls.try_send_locked(self.sock, data, self._timeout)
            except OSError as exc:
                self._send_mutex.release()
                self.abort(f"falha ao enviar: {exc}")
                return False
            self._send_mutex.release()
            if not delivered:
                self.abort("cliente lento: não lê o que o servidor envia")
            return delivered
        try:
            # The descriptor is non-blocking (the socket has a timeout, which CPython
            # implements with O_NONBLOCK + poll): a direct write never waits, where
            # sock.send() would wait up to the timeout for buffer space.
            sent = os.write(self.sock.fileno(), data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self.abort(f"falha ao enviar: {exc}")
            return False
        finally:
            self._send_mutex.release()
        if sent < len(data):  # a partial frame cannot be completed without waiting
            self.abort("cliente lento: não lê o que o servidor envia")
            return False
        return True

    def abort(self, reason: str) -> None:
        """End the connection (idempotent); `run` notices and cleans up."""
        with self._reason_mutex:
            if self._reason is None:
                self._reason = reason
        tls.shutdown(self.sock)

    # -- connection thread ---------------------------------------------------------
    def run(self) -> None:
        reason = "conexão encerrada pelo cliente"
        try:
            reason = self._serve()
        except Exception as exc:  # a bug must not take the server down
            logger.exception("Erro inesperado na sessão %s", self.session.conn_id)
            reason = f"erro interno: {exc}"
        finally:
            with self._reason_mutex:
                if self._reason is None:
                    self._reason = reason
                final = self._reason
            try:
                self.sock.close()
            except OSError:
                pass
            self._on_closed(self, final)

    def _serve(self) -> str:
        if self._tls_context is not None:
            problem = self._start_tls(self._tls_context)
            if problem:
                return problem
        while self._reason is None:
            wait, expired = self._next_deadline()
            if expired:
                return expired
            secure = tls.is_tls(self.sock)
            if not (secure and tls.has_pending(self.sock, self._send_mutex)):
                try:
                    readable, _, _ = select.select([self.sock], [], [],
                                                   min(wait, _MAX_SELECT_WAIT))
                except (OSError, ValueError) as exc:
                    return f"erro no socket: {exc}"
                if not readable:
                    continue
            try:
                if secure:
                    data = tls.recv_locked(self.sock, self._send_mutex, _RECV_BYTES,
                                           self._timeout)
                    if data is None:
                        continue  # an incomplete TLS record
                else:
                    data = self.sock.recv(_RECV_BYTES)
            except socket.timeout:
                continue
            except OSError as exc:
                return f"erro de leitura: {exc}"
            if not data:
                return "conexão encerrada pelo cliente"
            problem = self._received(data)
            if problem:
                return problem
        return self._reason

    def _start_tls(self, context: ssl.SSLContext) -> Optional[str]:
        """TLS handshake within the handshake budget; a reason to close, or None.

        A client that speaks plain text gets a plain-text error frame saying that
        the server requires TLS (instead of an opaque handshake failure).
        """
        self.sock.settimeout(self._handshake)
        try:
            first = self.sock.recv(1, socket.MSG_PEEK)
            if not first:
                return "conexão encerrada pelo cliente"
            if first[0] != tls.TLS_RECORD_HANDSHAKE:
                message = ("este servidor exige TLS: configure SERVER_TLS=true no cliente "
                           "(e SERVER_TLS_CA_FILE se o certificado não for de uma CA do sistema)")
                self._reject_plaintext(message)
                return "cliente sem TLS recusado (o servidor exige TLS)"
            self.sock = context.wrap_socket(self.sock, server_side=True,
                                            do_handshake_on_connect=False)
            self.sock.do_handshake()
        except (socket.timeout, ssl.SSLError, OSError, ValueError) as exc:
            return f"falha no handshake TLS: {exc}"
        finally:
            self.sock.settimeout(self._timeout)
        return None

    def _reject_plaintext(self, message: str) -> None:
        """Error frame to a plain-text client; its unread input is consumed first and the
        connection half-closed, so the peer reads our frame instead of a reset."""
        try:
            self.sock.recv(_RECV_BYTES)
            self.sock.sendall(p.encode(p.reply_error(None, p.ERR_TLS_REQUIRED, message)))
            self.sock.shutdown(socket.SHUT_WR)
            readable, _, _ = select.select([self.sock], [], [], _REFUSE_LINGER)
            if readable:
                self.sock.recv(_RECV_BYTES)
        except (OSError, ValueError):
            pass

    def _refuse_legacy(self, what: str) -> str:
        # No line here: the server's refusal log reports the close reason (bounded per
        # address), so a flood of silent connections cannot fill the log.
        try:
            with self._send_mutex:
                self.sock.sendall(server_refusal())
            # Half-close and linger briefly: a 1.2.2 worker acknowledges every message
            # before reading it, and an early close would turn our text into a broken pipe.
            self.sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + _LEGACY_LINGER
            while time.monotonic() < deadline:
                readable, _, _ = select.select([self.sock], [], [], deadline - time.monotonic())
                if readable and not self.sock.recv(_RECV_BYTES):
                    break
        except (OSError, ValueError):
            pass
        return f"protocolo incompatível: {what}; {versions_text()}"

    def _next_deadline(self) -> tuple[float, Optional[str]]:
        """Seconds until the next health event, or the reason the connection expired."""
        now = time.monotonic()
        deadlines: list[float] = []
        if not self.session.authenticated:
            if now - self._connected_at > self._handshake:
                if self._on_handshake_over is not None:
                    self._on_handshake_over(self)
                if self._decoder.buffered == 0:
                    # Silent since it connected: a 1.2.2 worker waits like this for its
                    # NOTIFY; tell it, in its own framing, why it will never get one.
                    return 0.0, ("'hello' não recebido a tempo; "
                                 + self._refuse_legacy("não enviou o 'hello' (cliente 1.2.2?)"))
                return 0.0, "'hello' não recebido a tempo"
            deadlines.append(self._connected_at + self._handshake)
        if self._partial_since is not None:
            if now - self._partial_since > self._timeout:
                return 0.0, "frame incompleto além do timeout"
            deadlines.append(self._partial_since + self._timeout)
        if self._ping_id is not None:
            if now - self._ping_sent_at > self._timeout:
                return 0.0, "cliente não respondeu ao ping (heartbeat)"
            deadlines.append(self._ping_sent_at + self._timeout)
        elif self.session.authenticated:
            if now - self._last_recv >= self._heartbeat:
                self._ping_id = f"srv-{next(_ping_ids)}"
                self._ping_sent_at = now
                self.send(p.request(p.OP_PING, self._ping_id))
                deadlines.append(now + self._timeout)
            else:
                deadlines.append(self._last_recv + self._heartbeat)
        return max(0.0, min(deadlines, default=now + _MAX_SELECT_WAIT) - now), None

    def _received(self, data: bytes) -> Optional[str]:
        """Handle received bytes; return a reason to close the connection, or None."""
        if not self.session.authenticated and data[:1] == bytes([tls.TLS_RECORD_HANDSHAKE]):
            # The close reason reaches the server's refusal log (bounded per address).
            return ("cliente TLS recusado: o cliente usa TLS (SERVER_TLS=true), mas este "
                    "servidor está sem TLS (defina SERVER_TLS_CERT_FILE e SERVER_TLS_KEY_FILE)")
        if not self.session.authenticated and looks_legacy(data):
            return self._refuse_legacy("enviou mensagens do protocolo da 1.2.2")
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            # Before `hello` only the refusal log reports it (bounded per address).
            if self.session.authenticated:
                logger.warning("Sessão %s (%s) encerrada: %s", self.session.conn_id,
                               self.session.peer, exc)
            return f"violação de protocolo: {exc}"
        now = time.monotonic()
        if frames:
            self._last_recv = now
            self._ping_id = None  # any frame proves the peer is alive
        if self._decoder.buffered == 0:
            self._partial_since = None
        elif frames or self._partial_since is None:
            self._partial_since = now
        for frame in frames:
            if p.is_reply(frame):
                continue  # answer to a heartbeat ping; liveness already recorded
            outcome = self._interpreter.handle(self.session, frame)
            if outcome.reply is not None and not self.send(outcome.reply):
                return self._reason or "falha ao enviar resposta"
            if outcome.close:
                code, message = p.error_of(outcome.reply or {})
                return f"recusado: {code} ({message})"
        return None
