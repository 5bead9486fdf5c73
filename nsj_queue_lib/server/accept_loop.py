"""Accept loop of one listening port.

The server runs two of these: the notify service (NOTIFY_SERVICE_PORT) and the
lock service (LOCK_SERVICE_PORT).  Both ports speak the same protocol; the
split only keeps the worker's long-lived connection apart from the short-lived
connections of the maintenance jobs (see docs/protocol.md).

The loop waits in `select` on the listening socket and on the server's wake-up
socket, at most LOCK_SERVICE_WAIT_CONN_INTERVAL seconds per round, so it never
busy-waits and `Server.stop()` ends it at once.  An error accepting one client
(for example, out of file descriptors) is logged and the loop goes on: the
listening socket is never left in a broken state.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
from typing import Callable

logger = logging.getLogger(__name__)

_ERROR_PAUSE = 0.2


class AcceptThread(threading.Thread):
    """Accept connections on `listener` and hand each to `on_accept`."""

    def __init__(self, service: str, listener: socket.socket, wakeup: socket.socket,
                 stopping: threading.Event, wait_interval: float,
                 on_accept: Callable[[socket.socket, str, str], None]) -> None:
        super().__init__(name=f"nsj-queue-accept-{service}", daemon=True)
        self.service = service
        self._listener = listener
        self._wakeup = wakeup
        self._stopping = stopping
        self._wait = max(0.05, wait_interval)
        self._on_accept = on_accept

    def run(self) -> None:
        address = self._listener.getsockname()
        logger.info("Serviço %s aguardando conexões em %s:%s", self.service, address[0],
                    address[1])
        while not self._stopping.is_set():
            try:
                readable, _, _ = select.select([self._listener, self._wakeup], [], [], self._wait)
            except (OSError, ValueError) as exc:
                if self._stopping.is_set():
                    break
                logger.error("Serviço %s: erro aguardando conexões: %s", self.service, exc)
                self._stopping.wait(_ERROR_PAUSE)
                continue
            if self._wakeup in readable or self._stopping.is_set():
                break
            if self._listener in readable:
                self._accept_one()
        logger.info("Serviço %s encerrado.", self.service)

    def _accept_one(self) -> None:
        try:
            conn, addr = self._listener.accept()
        except (BlockingIOError, InterruptedError, socket.timeout):
            return
        except OSError as exc:
            logger.error("Serviço %s: falha ao aceitar conexão: %s", self.service, exc)
            self._stopping.wait(_ERROR_PAUSE)
            return
        peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
        try:
            self._on_accept(conn, peer, self.service)
        except Exception:  # never let one client break the accept loop
            logger.exception("Serviço %s: erro ao registrar o cliente %s", self.service, peer)
            try:
                conn.close()
            except OSError:
                pass


# Name of the original module's class, kept for readers of the README.
LockServiceThread = AcceptThread
