"""Choose the coordination backend for the configured mode."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import Backend
from nsj_queue_lib.engine.fleet_mode import fleet_mode
from nsj_queue_lib.exceptions import ConfigError

__all__ = ["Backend", "make_backend", "open_repository"]


def make_backend(settings: Settings) -> Backend:
    """The backend for CLIENT_SERVER_MODE and DB_DRIVER: the socket server, or the
    database's own (PostgreSQL, or MySQL native for DB_DRIVER=MYSQL); behind a transaction
    pooler (DB_POOL_MODE=transaction) the PostgreSQL lease backend."""
    if settings.client_server_mode:
        from nsj_queue_lib.engine.socket.backend import SocketBackend

        return SocketBackend(settings)
    if settings.db_driver == "SINGLE_STORE":
        raise ConfigError(
            "DB_DRIVER=SINGLE_STORE exige CLIENT_SERVER_MODE=true: o SingleStore não tem FOR "
            "UPDATE SKIP LOCKED nem locks nomeados (GET_LOCK), que o modo nativo usa; o "
            "servidor de filas (python -m nsj_queue_lib.server.server_main) os fornece."
        )
    if settings.is_mysql:
        # MySQL >= 8.0 / MariaDB >= 10.6; the version is checked on the first connection.
        from nsj_queue_lib.engine.mysql.backend import MysqlBackend

        return MysqlBackend(settings)
    if settings.pooled:
        from nsj_queue_lib.engine.pooled.backend import PooledBackend

        return PooledBackend(settings)
    from nsj_queue_lib.engine.postgres.backend import PostgresBackend

    return PostgresBackend(settings)


def open_repository(settings: Settings, **connect_kwargs: Any) -> TaskRepository:
    """Open a new session and a repository for the configured queue."""
    session = DbSession.open(settings, **connect_kwargs)
    return TaskRepository(session, settings.queue_table, settings.queue_subscriber_table,
                          legacy=fleet_mode(settings))
