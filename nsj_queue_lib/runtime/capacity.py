"""Before a worker with QUEUE_CONCURRENCY > 1 opens its connections: can the database
take them?  A worker asking for more than the server can ever give would take every slot
and leave the server refusing all other clients ("too many clients") while its threads
retry: it refuses to start instead (exit 2) and says why.  When they would fit but are
taken now (a rolling deploy: the old pods still hold theirs), it says so and starts; its
threads connect as connections come free."""

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
        free, usable, maximum = TaskRepository(
            session, settings.queue_table).server_free_connections()
    except Exception as exc:  # no privilege to read the catalog: not a reason to stop
        logger.debug("Capacidade de conexões do banco não verificada: %s", exc)
        return
    finally:
        session.close()
    free += 1  # (this very session was counted as open: it is closed now)
    where = f"{settings.db_host}:{settings.db_port}"
    if needed + HEADROOM > usable:
        raise ConfigError(
            f"QUEUE_CONCURRENCY={settings.queue_concurrency} precisa de {needed} conexões "
            f"(uma por thread de tarefa e uma de escuta), mas o banco {where} dá no máximo "
            f"{usable} a usuários comuns (max_connections {maximum}); deixando {HEADROOM} "
            "para os outros clientes, reduza QUEUE_CONCURRENCY ou aumente max_connections")
    if needed + HEADROOM > free:
        logger.warning("QUEUE_CONCURRENCY=%s precisa de %s conexões, mas o banco %s tem só "
                       "%s livres agora (max_connections %s): as threads conectam à medida "
                       "que conexões forem liberadas", settings.queue_concurrency, needed,
                       where, max(free, 0), maximum)
