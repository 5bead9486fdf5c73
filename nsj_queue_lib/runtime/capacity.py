"""Before a worker with QUEUE_CONCURRENCY > 1 opens its connections: can the database
take them?  A worker asking for more than the server has free would take every slot it
can and leave the server refusing all other clients ("too many clients") while its
threads retry; the worker refuses to start instead (exit 2) and says why."""

from __future__ import annotations

import logging

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import ConfigError, DatabaseUnavailable

logger = logging.getLogger(__name__)

# Connections left to everybody else after this worker's, at least.
HEADROOM = 2


def check_connection_capacity(settings: Settings) -> None:
    """ConfigError when the database cannot take this worker's connections (its task
    threads and the listener) plus HEADROOM; a database that cannot be asked is left to
    the connection loop, which reports it."""
    needed = settings.queue_concurrency + 1
    try:
        session = DbSession.open(settings, application_name="nsj_queue_lib:capacity")
    except DatabaseUnavailable as exc:
        logger.debug("Capacidade de conexões do banco não verificada: %s", exc)
        return
    try:
        # (this very session counts as open: it closes before the threads connect)
        free, maximum = TaskRepository(session, settings.queue_table).server_free_connections()
        free += 1
    except Exception as exc:  # no privilege to read the catalog: not a reason to stop
        logger.debug("Capacidade de conexões do banco não verificada: %s", exc)
        return
    finally:
        session.close()
    if needed + HEADROOM > free:
        raise ConfigError(
            f"QUEUE_CONCURRENCY={settings.queue_concurrency} precisa de {needed} conexões "
            f"(uma por thread de tarefa e uma de escuta), mas o banco {settings.db_host}:"
            f"{settings.db_port} aceita só {max(free, 0)} novas agora (max_connections "
            f"{maximum}); deixando {HEADROOM} para os outros clientes, reduza "
            "QUEUE_CONCURRENCY ou aumente max_connections")
