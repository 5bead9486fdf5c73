"""`SocketLocker`: the `Locker` of the client/server mode.

The locks live on the server and belong to this object's current connection
(its session), exactly like PostgreSQL session advisory locks: re-entrant
with a count, released only by the owner, all released when the session ends.

When the connection drops, the server releases every lock of that session.
The next call reconnects (new session, `generation` + 1) and works again, but
the locks taken before are gone: `is_held(key)` turns False and the locks are
reported through `lost_locks`, so the worker knows its task is no longer
protected.
"""

from __future__ import annotations

import logging
import ssl
import threading
from typing import Callable, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.engine.base import LockKey
from nsj_queue_lib.engine.keys import task_lock_key
from nsj_queue_lib.engine.socket import protocol as p
from nsj_queue_lib.engine.socket.connection import SocketConnection
from nsj_queue_lib.engine.socket.tls import client_tls_context
from nsj_queue_lib.exceptions import CoordinationError

logger = logging.getLogger(__name__)


class Served(list):
    """Task ids a `claim` got, each locked by this session.  `final` (protocol version
    3): an empty answer means the server knows no free due task (a fresh read), so the
    caller runs no candidates query of its own."""

    final = False


class SocketLocker:
    """Session locks held on the socket server (implements `Locker`).

    `try_lock` raises CoordinationError when the server cannot be reached;
    `unlock` returns False when the session that held the lock is gone.
    """

    def __init__(self, host: str, port: int, token: Optional[str] = None,
                 timeout: float = 5.0, *, queue: Optional[str] = None,
                 role: str = "locker", tls_context: Optional[ssl.SSLContext] = None) -> None:
        self._mutex = threading.Lock()
        self._held: dict[LockKey, int] = {}
        self._held_generation = 0
        self._lost: set[LockKey] = set()
        self._conn = SocketConnection(host, port, token, timeout, role=role, queue=queue,
                                      on_disconnect=self._on_disconnect,
                                      tls_context=tls_context)

    @classmethod
    def from_settings(cls, settings: Settings, *, admin: bool = False) -> SocketLocker:
        """Locker for a worker: task locks on the notify port, admin locks on the lock port."""
        port = settings.lock_service_port if admin else settings.notify_service_port
        return cls(settings.server_host, port, settings.server_auth_token,
                   settings.timeout_socket_message, queue=settings.queue_name,
                   role="admin" if admin else "locker",
                   tls_context=client_tls_context(settings))

    # -- Locker --------------------------------------------------------------------
    def try_lock(self, key: LockKey) -> bool:
        """Take the lock if free (or already ours); True when this session holds it."""
        wire_key = p.key_to_wire(key)
        result, generation = self._conn.request(p.OP_TRY_LOCK, key=wire_key)
        if result is not True:
            return False
        checked = (wire_key[0], wire_key[1])
        with self._mutex:
            if generation != self._held_generation:
                self._held.clear()
                self._held_generation = generation
            self._held[checked] = self._held.get(checked, 0) + 1
            if not self._conn.connected or self._conn.generation != generation:
                # The session ended between the reply and now: the lock is gone already.
                self._lost |= set(self._held)
                self._held.clear()
                return False
        return True

    def claim(self, queue_table: str, limit: int = 1) -> Optional[Served]:
        """Ask the server for due task ids of `queue_table`, each already locked by this
        session with its task key (protocol version 2).  None when the server does not
        hand out tasks (version 1, no database, another queue table): claim on your own
        then.  The ids are hints: the caller still checks each row is waiting.  The
        list is a `Served` (see its `final`)."""
        return self.claim_ahead(queue_table, limit)()

    def claim_ahead(self, queue_table: str,
                    limit: int = 1) -> Callable[[], Optional[Served]]:
        """`claim` sent now; the returned call waits for its answer (the round trip
        overlaps whatever the caller does meanwhile)."""
        self._conn.ensure_connected()
        if self._conn.version < 2:
            return lambda: None
        namespace = task_lock_key(queue_table, 0)[0]
        reply = self._conn.request_ahead(p.OP_CLAIM, ns=namespace,
                                         limit=min(limit, p.CLAIM_MAX))

        version = self._conn.version

        def served() -> Optional[Served]:
            result, generation = reply()
            if not isinstance(result, list):
                return None
            ids = Served(int(v) for v in result)
            ids.final = version >= 3
            with self._mutex:
                if generation != self._held_generation:
                    self._held.clear()
                    self._held_generation = generation
                for task_id in ids:
                    key = task_lock_key(queue_table, task_id)
                    self._held[key] = self._held.get(key, 0) + 1
                if not self._conn.connected or self._conn.generation != generation:
                    self._lost |= set(self._held)
                    self._held.clear()
                    return Served()  # the session ended meanwhile: the locks went with it
            return ids

        return served

    def unlock(self, key: LockKey) -> bool:
        """Release one hold of a lock of this session; False if the session did not hold it."""
        wire_key = p.key_to_wire(key)
        if not self._conn.connected:
            return False  # the session that could hold it is gone: so is the lock
        try:
            result, generation = self._conn.request(p.OP_UNLOCK, key=wire_key)
        except CoordinationError as exc:
            logger.warning("unlock(%s) sem resposta do servidor: %s", key, exc)
            return False
        checked = (wire_key[0], wire_key[1])
        with self._mutex:
            if generation == self._held_generation and checked in self._held:
                self._held[checked] -= 1
                if self._held[checked] <= 0:
                    del self._held[checked]
        return result is True

    def unlock_nowait(self, key: LockKey) -> bool:
        """Release one hold without waiting for the server's answer (pipelined with the
        next request); False when nothing was sent (the session is gone, and the lock
        with it)."""
        wire_key = p.key_to_wire(key)
        if not self._conn.send(p.OP_UNLOCK, key=wire_key):
            return False
        checked = (wire_key[0], wire_key[1])
        with self._mutex:
            if checked in self._held:
                self._held[checked] -= 1
                if self._held[checked] <= 0:
                    del self._held[checked]
        return True

    def announce(self) -> bool:
        """Tell the server, without waiting, that a task is waiting again (a `notify`:
        the server reads its candidates again and wakes an idle worker); False when
        nothing was sent (no connection: the server's probe finds it)."""
        return self._conn.send(p.OP_NOTIFY, payload="")

    def unlock_all(self) -> int:
        """Release every lock of this session; return how many keys were freed."""
        if not self._conn.connected:
            return 0
        result, _ = self._conn.request(p.OP_UNLOCK_ALL)
        with self._mutex:
            self._held.clear()
        return int(result or 0)

    def close(self) -> None:
        """End the session; the server releases all its locks (idempotent)."""
        self._conn.close()
        with self._mutex:
            self._held.clear()

    # -- session state -------------------------------------------------------------
    def is_held(self, key: LockKey) -> bool:
        """True while the current session holds `key` (as far as this client knows)."""
        checked = p.check_key(key)
        with self._mutex:
            return (self._conn.connected and self._held_generation == self._conn.generation
                    and checked in self._held)

    @property
    def held(self) -> dict[LockKey, int]:
        """Keys this session holds, with their hold counts."""
        with self._mutex:
            if not self._conn.connected or self._held_generation != self._conn.generation:
                return {}
            return dict(self._held)

    def lost_locks(self, clear: bool = True) -> set[LockKey]:
        """Keys that were held when a connection dropped (and are therefore released)."""
        with self._mutex:
            lost = set(self._lost)
            if clear:
                self._lost.clear()
            return lost

    @property
    def connection_lost(self) -> bool:
        """True when locks were lost with a dropped connection (see `lost_locks`)."""
        with self._mutex:
            return bool(self._lost)

    @property
    def generation(self) -> int:
        """Session counter: changes at every reconnection."""
        return self._conn.generation

    @property
    def session_id(self) -> Optional[str]:
        return self._conn.session_id

    @property
    def connected(self) -> bool:
        return self._conn.connected

    def ping(self) -> bool:
        """Round trip to the server (connecting if needed); True on success."""
        try:
            return self.check()
        except CoordinationError:
            return False

    def check(self) -> bool:
        """`ping` that raises what went wrong (CoordinationError; ServerFull when the
        server answered the hello with "no room for more clients")."""
        return self._conn.request(p.OP_PING)[0] == "pong"

    def _on_disconnect(self, generation: int, reason: str) -> None:
        with self._mutex:
            if generation != self._held_generation or not self._held:
                return
            lost = set(self._held)
            self._lost |= lost
            self._held.clear()
        logger.warning("Conexão com o servidor de locks perdida (%s): %d lock(s) liberado(s) "
                       "no servidor: %s", reason, len(lost), sorted(lost))

    def __enter__(self) -> SocketLocker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
