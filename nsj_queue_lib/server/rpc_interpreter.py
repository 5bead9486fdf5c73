"""Interpretation of the requests of one client session (no socket code here).

`RpcInterpreter.handle(session, message)` returns the reply to send and
whether the connection must be closed after it.  The session must start with
a valid ``hello`` (protocol version, auth token, optional queue name); any
other request before it is refused and the connection closed.  A session that
authenticated with the producer token (SERVER_PRODUCER_TOKEN) may only ping and
notify, never HALT, lock or listen, and never takes the client slots reserved for the
worker token.  Every client-supplied value that reaches a log line is escaped
(`protocol.log_safe`).  A refused `hello` is logged by the server's refusal log (at
most one line per kind, address and interval); a `notify` other than HALT by its
notify log (DEBUG, plus a periodic summary).
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Protocol

from nsj_queue_lib.config import validate_identifier
from nsj_queue_lib.engine.base import HALT_PAYLOAD
from nsj_queue_lib.engine.socket import protocol as p
from nsj_queue_lib.engine.socket.protocol import log_safe
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.server.locks import LockLimitExceeded, LockTable
from nsj_queue_lib.server.refusals import NotifyLog
from nsj_queue_lib.version import __version__

logger = logging.getLogger(__name__)


class ServerContext(Protocol):
    """What the interpreter needs from the server."""

    locks: LockTable
    notifies: NotifyLog
    token: Optional[str]
    producer_token: Optional[str]
    max_locks_per_client: int
    channel: str
    heartbeat_interval: float
    timeout: float

    def promote(self, conn_id: int, producer: bool = False) -> Optional[str]:
        """Move an authenticated session to a client slot; the refusal text if full."""

    def set_listening(self, conn_id: int, listening: bool) -> None: ...

    def set_idle(self, conn_id: int) -> bool:
        """A version 3 listener waits for work (one targeted wake-up)."""

    def notify_received(self, payload: str = "") -> int:
        """A client's notify: wake workers (every listener for HALT)."""

    def stats(self) -> dict[str, Any]: ...

    def claim_tasks(self, conn_id: int, namespace: Any, limit: int,
                    version: int = 2) -> Optional[list[int]]:
        """Due task ids locked for the session, or None when claims are not served."""


@dataclass
class Session:
    """State of one client connection."""

    conn_id: int
    peer: str
    service: str  # "notify" or "lock": the port it connected to
    authenticated: bool = False
    role: str = ""
    client_name: str = ""
    listening: bool = False
    producer: bool = False  # authenticated with the producer token
    version: int = 0  # protocol version of the hello


def _valid_name(name: str) -> bool:
    """The QUEUE_NAME rule of the settings (the same everywhere)."""
    try:
        validate_identifier(name, "fila")
        return True
    except ConfigError:
        return False


class Outcome(NamedTuple):
    reply: Optional[p.Message]
    close: bool = False


class RpcInterpreter:
    """Dispatch of requests by their 'op'."""

    def __init__(self, server: ServerContext) -> None:
        self._server = server
        self._handlers: dict[str, Callable[[Session, p.Message], Any]] = {
            p.OP_PING: lambda s, m: "pong",
            p.OP_TRY_LOCK: self._try_lock,
            p.OP_UNLOCK: self._unlock,
            p.OP_UNLOCK_ALL: lambda s, m: self._server.locks.release_all(s.conn_id),
            p.OP_LISTEN: self._listen,
            p.OP_UNLISTEN: self._unlisten,
            p.OP_NOTIFY: self._notify,
            p.OP_STATUS: lambda s, m: self._server.stats(),
            p.OP_CLAIM: self._claim,
            p.OP_IDLE: lambda s, m: self._server.set_idle(s.conn_id),
        }
        # The first protocol version that has each op (older sessions never send it).
        self._since: dict[str, int] = {p.OP_CLAIM: 2, p.OP_IDLE: 3}
        # Requests handled per op (status 'requests'): tests count the round trips.
        self._counts: Counter[str] = Counter()
        self._counts_mutex = threading.Lock()

    def request_counts(self) -> dict[str, int]:
        with self._counts_mutex:
            return dict(self._counts)

    def handle(self, session: Session, message: p.Message) -> Outcome:
        """Handle one request frame (a frame with 'op')."""
        msg_id = message.get("id")
        op = message.get("op", "")
        if msg_id is None:
            return Outcome(p.reply_error(None, p.ERR_BAD_REQUEST,
                                         "toda requisição deve ter o campo 'id'"), True)
        if op == p.OP_HELLO:
            return self._hello(session, message)
        if not session.authenticated:
            return Outcome(p.reply_error(msg_id, p.ERR_NOT_AUTHENTICATED,
                                         "envie 'hello' antes de qualquer outra mensagem"), True)
        handler = self._handlers.get(op)
        if handler is not None and session.version < self._since.get(op, 1):
            handler = None  # an older session never sends it
        if handler is None:
            return Outcome(p.reply_error(msg_id, p.ERR_UNKNOWN_OP,
                                         f"operação desconhecida: {log_safe(op, 40)}"))
        if session.producer and (op not in p.PRODUCER_OPS or (
                op == p.OP_NOTIFY and message.get("payload") == HALT_PAYLOAD)):
            logger.warning("Sessão %s (%s) de produtor tentou '%s': recusado.",
                           session.conn_id, session.peer, log_safe(op, 40))
            return Outcome(p.reply_error(msg_id, p.ERR_UNAUTHORIZED,
                                         "o token de produtor só permite notify (sem HALT)"))
        with self._counts_mutex:
            self._counts[op] += 1
        try:
            return Outcome(p.reply_ok(msg_id, handler(session, message)))
        except LockLimitExceeded as exc:
            logger.warning("Sessão %s (%s): %s", session.conn_id, session.peer, exc)
            return Outcome(p.reply_error(msg_id, p.ERR_TOO_MANY_LOCKS, str(exc)))
        except ValueError as exc:
            return Outcome(p.reply_error(msg_id, p.ERR_BAD_REQUEST, str(exc)))

    def _hello(self, session: Session, message: p.Message) -> Outcome:
        msg_id = message.get("id")
        if session.authenticated:
            return Outcome(p.reply_error(msg_id, p.ERR_BAD_REQUEST, "'hello' repetido"))
        version = message.get("version")
        if version not in p.SUPPORTED_VERSIONS or isinstance(version, bool):
            return Outcome(p.reply_error(
                msg_id, p.ERR_UNSUPPORTED_VERSION,
                f"versão de protocolo {log_safe(version, 20)} não suportada (o servidor "
                f"aceita as versões {', '.join(map(str, p.SUPPORTED_VERSIONS))})"), True)
        producer = self._token_is(message.get("token"), self._server.producer_token)
        if not producer and not self._token_ok(message.get("token")):
            return Outcome(p.reply_error(msg_id, p.ERR_UNAUTHORIZED,
                                         "token de autenticação inválido ou ausente"), True)
        try:
            queue = p.optional_str(message, "queue")
            role = p.optional_str(message, "role") or ""
            name = p.optional_str(message, "client") or ""
        except ValueError as exc:
            return Outcome(p.reply_error(msg_id, p.ERR_BAD_REQUEST, str(exc)), True)
        if queue and not _valid_name(queue):
            return Outcome(p.reply_error(msg_id, p.ERR_BAD_REQUEST,
                                         "nome de fila inválido: use letras, dígitos e '_'"), True)
        channel = self._server.channel
        if queue and channel and queue.lower() != channel.lower():
            return Outcome(p.reply_error(
                msg_id, p.ERR_WRONG_QUEUE,
                f"este servidor atende a fila '{channel}', não '{queue}'"), True)
        refusal = self._server.promote(session.conn_id, producer)
        if refusal is not None:
            return Outcome(p.reply_error(msg_id, p.ERR_TOO_MANY_CLIENTS, refusal), True)
        session.authenticated = True
        session.producer = producer
        session.version = int(version)
        session.role = p.ROLE_PRODUCER if producer else role[:32]
        session.client_name = name[:128]
        logger.debug("Sessão %s (%s, %s) autenticada: papel=%s cliente=%s", session.conn_id,
                     session.peer, session.service, log_safe(session.role, 40),
                     log_safe(session.client_name))
        return Outcome(p.reply_ok(
            msg_id, "welcome", session=str(session.conn_id), version=session.version,
            server=f"nsj_queue_lib/{__version__}", channel=channel,
            heartbeat=self._server.heartbeat_interval, timeout=self._server.timeout))

    def _token_ok(self, given: Any) -> bool:
        expected = self._server.token
        return not expected or self._token_is(given, expected)

    @staticmethod
    def _token_is(given: Any, expected: Optional[str]) -> bool:
        if not expected or not isinstance(given, str):
            return False
        return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))

    def _try_lock(self, session: Session, message: p.Message) -> bool:
        return self._server.locks.try_lock(session.conn_id, p.check_key(message.get("key")),
                                           self._server.max_locks_per_client)

    def _unlock(self, session: Session, message: p.Message) -> bool:
        return self._server.locks.unlock(session.conn_id, p.check_key(message.get("key")))

    def _claim(self, session: Session, message: p.Message) -> Optional[list[int]]:
        namespace = message.get("ns")
        limit = message.get("limit", 1)
        if not p.is_int32(namespace) or not p.is_int32(limit) or not 1 <= limit <= p.CLAIM_MAX:
            raise ValueError(f"'claim' exige ns int32 e limit de 1 a {p.CLAIM_MAX}")
        return self._server.claim_tasks(session.conn_id, namespace, limit, session.version)

    def _listen(self, session: Session, message: p.Message) -> bool:
        session.listening = True
        self._server.set_listening(session.conn_id, True)
        if session.version >= 3:
            self._server.set_idle(session.conn_id)  # a new listener waits for work
        return True

    def _unlisten(self, session: Session, message: p.Message) -> bool:
        session.listening = False
        self._server.set_listening(session.conn_id, False)
        return True

    def _notify(self, session: Session, message: p.Message) -> int:
        payload = p.check_payload(message.get("payload"))
        woken = self._server.notify_received(payload)
        if payload == HALT_PAYLOAD:
            logger.info("HALT recebido de %s (%s); %d worker(s) avisado(s).", session.peer,
                        log_safe(session.role or "cliente", 40), woken)
        else:  # one DEBUG line each, an INFO summary per interval
            self._server.notifies.note(session.peer, session.role, payload, woken)
        return woken

# 1.2.2 names (importable; using them says what replaces them).
from nsj_queue_lib.compat.removed import removed_class  # noqa: E402

RPCInterpreter = removed_class(
    __name__, "RPCInterpreter",
    "o servidor novo usa RpcInterpreter (docs/protocol.md)")
