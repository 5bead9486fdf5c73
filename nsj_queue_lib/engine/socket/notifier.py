"""`SocketNotifier` (the `Notifier` of the client/server mode) and `notify_server`.

A worker calls `listen()` once: its connection is registered on the server as
a waiting worker, and the server sends it a wake-up whenever due tasks exist
(periodic check) or someone sends "work available" (`notify`).  Wake-ups that
arrive while the worker is busy are kept (coalesced) and returned by the next
`wait`, like PostgreSQL LISTEN/NOTIFY.

If the connection drops, `wait` reconnects (with backoff) and registers again;
since wake-ups may have been missed meanwhile, it then returns one synthetic
wake-up so the worker looks for tasks.

With a server of protocol version 3 the listener is woken only while idle: `listen`
counts as idle, and every `wait` with a timeout tells the server again (`idle`, sent
without waiting for the answer) after a wake-up was received, when the process has a
task slot free (`has_idle`).  The server then wakes only as many idle listeners as
there are due tasks, and wakes one when a task becomes due (scheduled ones too):
`wakes_when_due`.  An older server wakes every listener, as before.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from typing import Callable, Optional, Tuple, Union

from nsj_queue_lib.config import Settings
from nsj_queue_lib.engine.base import Notification, Notifier
from nsj_queue_lib.engine.socket import protocol as p
from nsj_queue_lib.engine.socket.connection import SocketConnection
from nsj_queue_lib.engine.socket.tls import client_tls_context
from nsj_queue_lib.exceptions import CoordinationError

logger = logging.getLogger(__name__)

DEFAULT_NOTIFY_PORT = 8770
_MAX_PENDING = 64


class SocketNotifier(Notifier):
    """Wake-ups through the socket server (implements `Notifier`)."""

    def __init__(self, host: str, port: int, token: Optional[str] = None,
                 timeout: float = 5.0, *, queue: Optional[str] = None,
                 tls_context: Optional[ssl.SSLContext] = None,
                 has_idle: Optional[Callable[[], bool]] = None) -> None:
        self._cond = threading.Condition()
        self._pending: list[Notification] = []
        self._listening = False
        self._listen_generation = 0
        self._closed = False
        # Version 3: the server counts this listener idle (set before `idle` is sent, so
        # a wake-up that answers it at once is never overwritten; cleared by a wake-up).
        self._idle_told = False
        self._has_idle = has_idle
        self._queue = queue or ""
        self._conn = SocketConnection(host, port, token, timeout, role="worker", queue=queue,
                                      on_event=self._on_event,
                                      on_disconnect=self._on_disconnect,
                                      tls_context=tls_context)

    @classmethod
    def from_settings(cls, settings: Settings,
                      has_idle: Optional[Callable[[], bool]] = None) -> SocketNotifier:
        return cls(settings.server_host, settings.notify_service_port,
                   settings.server_auth_token, settings.timeout_socket_message,
                   queue=settings.queue_name, tls_context=client_tls_context(settings),
                   has_idle=has_idle)

    @property
    def wakes_when_due(self) -> bool:
        """The server (protocol version 3) wakes this idle listener when a task is due;
        False until connected, and with an older server."""
        return self._listen_generation > 0 and self._conn.version >= 3

    # -- Notifier ------------------------------------------------------------------
    def listen(self) -> None:
        """Register as a waiting worker (idempotent).

        If the server is unreachable this logs a warning and returns; `wait`
        keeps trying to reconnect.
        """
        with self._cond:
            self._listening = True
        try:
            self._ensure_listening(synthetic=False)
        except CoordinationError as exc:
            logger.warning("Servidor de notificações indisponível (%s); nova tentativa a cada "
                           "espera.", exc)

    def wait(self, timeout: float) -> list[Notification]:
        """Block up to `timeout` s; return the wake-ups received (empty on timeout)."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._cond:
                if self._pending:
                    pending, self._pending = self._pending, []
                    return pending
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0:
                    return []
                register = self._must_register()
                tell = (self._listening and not register and not self._idle_told
                        and self._conn.version >= 3)
                if not register and not tell:
                    self._cond.wait(remaining)
                    continue
                if register:
                    delay = self._conn.retry_in()
                    if delay > 0:
                        self._cond.wait(min(remaining, delay))
                        continue
            if tell:
                if not self._tell_idle():
                    with self._cond:  # every slot busy: until one is free (slot_idle)
                        if not (self._pending or self._closed or self._must_register()):
                            self._cond.wait(max(0.0, deadline - time.monotonic()))
                continue
            try:
                self._ensure_listening(synthetic=True)
            except CoordinationError as exc:
                logger.debug("Reconexão ao servidor de notificações falhou: %s", exc)
                if self._conn.retry_in() == 0:  # not a connect failure: avoid spinning
                    with self._cond:
                        self._cond.wait(min(0.5, max(0.0, deadline - time.monotonic())))

    def notify(self, payload: str = "") -> None:
        """Tell every worker of the queue that there is work (or HALT)."""
        self._conn.request(p.OP_NOTIFY, payload=p.check_payload(payload))

    def slot_idle(self) -> None:
        """A task thread of this process just went idle: a `wait` in progress tells the
        server now, not at its next slice."""
        with self._cond:
            self._cond.notify_all()

    def _tell_idle(self) -> bool:
        """Version 3, inside a wait: tell the server this listener is idle, once per
        wake-up and only with a task slot free; True when sent.  (Called without the
        condition held: `has_idle` takes the process's own lock.)"""
        if self._has_idle is not None and not self._has_idle():
            return False  # every task slot busy: wake-ups now would wait anyway
        with self._cond:
            if self._idle_told:
                return True
            self._idle_told = True  # before the send: a wake-up may answer it at once
        if not self._conn.send(p.OP_IDLE):
            with self._cond:
                self._idle_told = False  # no link: registering again marks it idle
            return False
        return True

    def close(self) -> None:
        """Disconnect (idempotent); a blocked `wait` returns."""
        with self._cond:
            self._closed = True
            self._listening = False
            self._cond.notify_all()
        self._conn.close()

    # -- state ---------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._conn.connected

    @property
    def generation(self) -> int:
        return self._conn.generation

    @property
    def session_id(self) -> Optional[str]:
        return self._conn.session_id

    def _must_register(self) -> bool:
        """True when listening is wanted but the current session is not registered."""
        return self._listening and (not self._conn.connected
                                    or self._listen_generation != self._conn.generation)

    def _ensure_listening(self, synthetic: bool) -> None:
        generation = self._conn.ensure_connected()
        with self._cond:
            if self._listen_generation == generation and self._conn.connected:
                return
        with self._cond:
            self._idle_told = True  # (version 3: `listen` counts as idle)
        self._conn.request(p.OP_LISTEN)
        with self._cond:
            self._listen_generation = generation
            if synthetic:
                self._push(Notification(self._channel(), ""))
        if synthetic:
            logger.info("Registrado novamente no servidor de notificações %s (geração %d).",
                        self._conn.address, generation)

    def _channel(self) -> str:
        return self._conn.channel or self._queue

    def _push(self, notification: Notification) -> None:
        """Queue a wake-up (caller holds the condition); duplicates are coalesced."""
        if notification in self._pending:
            return
        if len(self._pending) >= _MAX_PENDING:
            self._pending.pop(0)
        self._pending.append(notification)
        self._cond.notify_all()

    def _on_event(self, frame: p.Message) -> None:
        if frame.get("op") != p.OP_NOTIFY:
            return
        payload = frame.get("payload")
        channel = frame.get("channel")
        notification = Notification(channel if isinstance(channel, str) and channel
                                    else self._channel(),
                                    payload if isinstance(payload, str) else "")
        with self._cond:
            self._idle_told = False  # the server woke this listener: no longer idle
            self._push(notification)

    def _on_disconnect(self, generation: int, reason: str) -> None:
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> SocketNotifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Target = Union[Settings, Tuple[str, int], str]


def notify_server(target: Target, token: Optional[str] = None, *, port: Optional[int] = None,
                  payload: str = "", timeout: Optional[float] = None,
                  queue: Optional[str] = None,
                  tls_context: Optional[ssl.SSLContext] = None) -> int:
    """Send one "work available" (or HALT) to the server; return how many workers got it.

    `target` is a `Settings` (SERVER_HOST, NOTIFY_SERVICE_PORT, SERVER_AUTH_TOKEN,
    TIMEOUT_SOCKET_MESSAGE and QUEUE_NAME are used), a `(host, port)` pair, or
    a host name (with `port`, default 8770).  Raises CoordinationError when
    the server cannot be reached.
    """
    if isinstance(target, Settings):
        host = target.server_host
        port = port or target.notify_service_port
        token = token if token is not None else target.server_auth_token
        timeout = timeout or target.timeout_socket_message
        queue = queue or target.queue_name
        tls_context = tls_context or client_tls_context(target)
    elif isinstance(target, tuple):
        host, port = target[0], int(target[1])
    else:
        host = target
    conn = SocketConnection(host, port or DEFAULT_NOTIFY_PORT, token, timeout or 5.0,
                            role="producer", queue=queue, tls_context=tls_context)
    try:
        result, _ = conn.request(p.OP_NOTIFY, payload=p.check_payload(payload))
        return int(result or 0)
    finally:
        conn.close()
