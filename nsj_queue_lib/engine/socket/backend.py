"""Client/server mode: wake-ups and locks come from the socket server.

Used with MySQL/SingleStore (which have neither LISTEN/NOTIFY nor advisory
locks) and optionally with PostgreSQL.  Task locks travel on one connection
per task thread to NOTIFY_SERVICE_PORT, admin locks on short-lived
connections to LOCK_SERVICE_PORT; the server releases every lock of a
connection the moment it closes or stops answering its heartbeat.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, List, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.errors import Fault, classify
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.server_version import NOWAIT, SKIP_LOCKED, session_row_lock_mode
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import Capabilities, LockKey, task_lock_key
from nsj_queue_lib.engine.socket.guard import SocketGuard
from nsj_queue_lib.engine.socket.locker import SocketLocker
from nsj_queue_lib.engine.socket.notifier import SocketNotifier, notify_server
from nsj_queue_lib.exceptions import CoordinationError

logger = logging.getLogger(__name__)


class SocketBackend:
    """Backend of the client/server mode (see nsj_queue_lib.engine.base.Backend)."""

    name = "socket"
    # The server probes the queue every QUEUE_POLL_INTERVAL: an insert wakes the workers.
    # Batch mode claims in SQL (FOR UPDATE SKIP LOCKED): refused by check() on a server
    # without it.
    _base_capabilities = Capabilities(wakes_on_insert=True, notify_is_transactional=False,
                                      batch_claim=True, lock_on_task_session=False)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._warned = False
        self._base = type(self)._base_capabilities
        self._notifier: Optional[SocketNotifier] = None  # the last one made

    @property
    def capabilities(self) -> Capabilities:
        """Read at each use: `check()` may narrow it, and a server of protocol version 3
        wakes an idle worker when a task is due (`wakes_when_due`: the idle wait runs no
        next-due probe of its own)."""
        notifier = self._notifier
        return replace(self._base, wakes_when_due=notifier is not None
                       and notifier.wakes_when_due)

    def check(self, session: DbSession) -> None:
        """Any database the repository speaks works here; on a server without FOR UPDATE
        SKIP LOCKED (MySQL < 8.0, MariaDB < 10.6, SingleStore: db/server_version.py) the rescue
        fences rows with NOWAIT or a short lock wait, and batch mode is not offered
        (`capabilities.batch_claim` False: runtime/batch.py refuses QUEUE_BATCH_SIZE > 1)."""
        mode = session_row_lock_mode(session, singlestore=self.settings.db_driver == "SINGLE_STORE")
        if mode == SKIP_LOCKED:
            return
        # (per backend instance: the server is the same for all of its sessions)
        self._base = replace(type(self)._base_capabilities, batch_claim=False)
        if not self._warned:
            self._warned = True
            logger.info("Servidor sem FOR UPDATE SKIP LOCKED: o resgate usa %s",
                        "NOWAIT" if mode == NOWAIT else "uma espera de lock de 1 s")

    def guard(self, session: DbSession, repo: TaskRepository) -> SocketGuard:
        locker = SocketLocker.from_settings(self.settings, admin=False)
        # The next task is marked in the finishing task's transaction (one UPDATE with the
        # success): MySQL has no per-transaction asynchronous commit, so a separate mark
        # would cost a durable commit per task; on PostgreSQL it saves the mark's two
        # statements (SET LOCAL synchronous_commit, UPDATE).  The chained COMMIT also
        # opens the next task's transaction; SingleStore ignores AND CHAIN, which
        # DbSession sees in the COMMIT's answer (it then sends BEGIN).
        return SocketGuard(repo, locker, self.settings.queue_table, unlock=locker.unlock_nowait,
                           mark_ahead=True, chain=True)

    def notifier(self, session: DbSession,
                 has_idle: Optional[Callable[[], bool]] = None) -> SocketNotifier:
        # (the server decides whom to wake: with protocol version 3, only idle listeners,
        # as many as there are due tasks)
        self._notifier = SocketNotifier.from_settings(self.settings, has_idle=has_idle)
        return self._notifier

    def admin_locker(self, session: DbSession) -> SocketLocker:
        return SocketLocker.from_settings(self.settings, admin=True)

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        try:
            notify_server(self.settings, payload=payload)
        except CoordinationError as exc:
            # The server also polls the database every CHECK_TASKS_INTERVAL seconds.
            logger.warning("Não foi possível avisar o servidor de filas: %s", exc)

    def task_keys(self, task_id: int) -> List[LockKey]:
        return [task_lock_key(self.settings.queue_table, task_id)]

    def classify(self, exc: BaseException) -> Fault:
        return classify(exc)
