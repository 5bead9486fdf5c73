"""Choose how a worker gets wake-ups and locks: PostgreSQL itself, or the socket server."""

from __future__ import annotations

from typing import Protocol

from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.base import Locker, Notifier
from nsj_queue_lib.coordination.postgres import PgLocker, PgNotifier
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import ConfigError


class Backend(Protocol):
    """Factory of the coordination objects a worker needs."""

    # True when task locks are taken inside the claim SQL on the task's own session
    # (PostgreSQL advisory locks); False when they come from `task_locker()`.
    task_locks_in_sql: bool

    def notifier(self, session: DbSession) -> Notifier: ...

    def task_locker(self, session: DbSession) -> Locker: ...

    def admin_locker(self, session: DbSession) -> Locker: ...

    def wake_workers(self, session: DbSession, payload: str = "") -> None: ...


class PostgresBackend:
    """LISTEN/NOTIFY and session advisory locks, all on the worker's own connections."""

    task_locks_in_sql = True

    def __init__(self, settings: Settings) -> None:
        self.channel = settings.queue_name

    def notifier(self, session: DbSession) -> Notifier:
        return PgNotifier(session, self.channel)

    def task_locker(self, session: DbSession) -> Locker:
        return PgLocker(session)

    def admin_locker(self, session: DbSession) -> Locker:
        return PgLocker(session)

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        PgNotifier(session, self.channel).notify(payload)


def make_backend(settings: Settings) -> Backend:
    """The backend for the configured mode (CLIENT_SERVER_MODE and DB_DRIVER)."""
    if settings.client_server_mode:
        from nsj_queue_lib.client.backend import SocketBackend

        return SocketBackend(settings)
    if settings.is_mysql:
        raise ConfigError(
            f"DB_DRIVER={settings.db_driver} exige CLIENT_SERVER_MODE=true: MySQL e SingleStore "
            "não têm LISTEN/NOTIFY nem advisory locks, que o servidor de filas "
            "(python -m nsj_queue_lib.server.server_main) fornece."
        )
    return PostgresBackend(settings)
