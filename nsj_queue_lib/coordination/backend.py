"""Choose the coordination backend for the configured mode."""

from __future__ import annotations

from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.base import Backend
from nsj_queue_lib.exceptions import ConfigError

__all__ = ["Backend", "make_backend"]


def make_backend(settings: Settings) -> Backend:
    """The backend for CLIENT_SERVER_MODE and DB_DRIVER: socket server, or the database's own."""
    if settings.client_server_mode:
        from nsj_queue_lib.coordination.socket.backend import SocketBackend

        return SocketBackend(settings)
    if settings.is_mysql:
        raise ConfigError(
            f"DB_DRIVER={settings.db_driver} exige CLIENT_SERVER_MODE=true: MySQL e SingleStore "
            "não têm LISTEN/NOTIFY nem advisory locks, que o servidor de filas "
            "(python -m nsj_queue_lib.server.server_main) fornece."
        )
    from nsj_queue_lib.coordination.postgres import PostgresBackend

    return PostgresBackend(settings)
