"""Client/server mode: wake-ups and locks come from the socket server.

Used with MySQL/SingleStore (which have neither LISTEN/NOTIFY nor advisory
locks) and optionally with PostgreSQL.  Task locks travel on the worker's
long-lived connection to NOTIFY_SERVICE_PORT, admin locks on short-lived
connections to LOCK_SERVICE_PORT; the server releases every lock of a
connection the moment it closes or stops answering its heartbeat.
"""

from __future__ import annotations

import logging

from nsj_queue_lib.client.lock_client import SocketLocker
from nsj_queue_lib.client.notify_client import SocketNotifier, notify_server
from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.base import Locker, Notifier
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import CoordinationError

logger = logging.getLogger(__name__)


class SocketBackend:
    """Backend of the client/server mode (see nsj_queue_lib.coordination.backend)."""

    # Task locks live on the server, not on the task's DB session: the runner
    # fences the task row (SELECT ... FOR UPDATE) so a rescuer that took the lock
    # after a lost socket skips the row (FOR UPDATE SKIP LOCKED) instead of
    # re-queueing the running task or waiting for it.
    task_locks_in_sql = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def notifier(self, session: DbSession) -> Notifier:
        return SocketNotifier.from_settings(self.settings)

    def task_locker(self, session: DbSession) -> Locker:
        return SocketLocker.from_settings(self.settings, admin=False)

    def admin_locker(self, session: DbSession) -> Locker:
        return SocketLocker.from_settings(self.settings, admin=True)

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        try:
            notify_server(self.settings, payload=payload)
        except CoordinationError as exc:
            # The server also polls the database every CHECK_TASKS_INTERVAL seconds.
            logger.warning("Não foi possível avisar o servidor de filas: %s", exc)
