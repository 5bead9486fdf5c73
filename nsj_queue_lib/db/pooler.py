"""Best-effort detection of a transaction pooler in front of PostgreSQL.

Session mode (DB_POOL_MODE=session, the default) keeps state on the worker's session
(advisory locks, LISTEN, PREPARE).  Behind a transaction pooler (PgBouncer with
pool_mode=transaction, RDS Proxy, Supavisor, PgCat) that state lands on whichever
server connection is free, so a worker started that way is refused with a clear error.

The check, at a worker's start:

1. the server sees this very socket (inet_client_port() is our local port): a direct
   connection, nothing more to do (one statement);
2. otherwise something sits in between.  A session marker (a custom setting) is written
   on our connection, then read by a second client connection in its own transaction:
   a transaction pooler that hands it the same server connection (PgBouncer reuses the
   last one freed) shows it the marker, which no session pooler or direct connection
   ever does.  And consecutive statements of our connection landing on different
   backend pids tell the same.  Neither can prove the absence of such a pooler (one
   that rotates its server connections may hide both): best effort.
"""

from __future__ import annotations

import logging
import socket
import uuid
from typing import Any, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import ConfigError

logger = logging.getLogger(__name__)

MARKER = "nsjq.sonda_pooler"


def _local_port(conn: Any) -> Optional[int]:
    """The local TCP port of a psycopg2 connection (None: a Unix socket, or unknown)."""
    try:
        sock = socket.socket(fileno=socket.dup(conn.fileno()))
    except (OSError, AttributeError, ValueError):
        return None
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        return int(sock.getsockname()[1])
    except OSError:
        return None
    finally:
        sock.close()


def direct_connection(session: DbSession) -> bool:
    """The server sees this session's own socket (no proxy in between)."""
    port = _local_port(session.conn)
    if port is None:
        return False
    return session.fetch_value("SELECT inet_client_port()") == port


def transaction_pooled(session: DbSession, settings: Settings) -> bool:
    """Whether `session` (PostgreSQL, autocommit, outside a transaction) goes through a
    pooler that moves it between server connections (see the module's docstring)."""
    if direct_connection(session):
        return False
    token = uuid.uuid4().hex
    first = session.fetch_value("SELECT pg_backend_pid()")
    session.fetch_value("SELECT set_config(%(m)s, %(t)s, false)", {"m": MARKER, "t": token})
    other = DbSession.open(settings.replace(db_pool_mode="transaction"),
                           application_name="nsj_queue_lib:sonda_pooler")
    try:
        with other.transaction():
            seen = other.fetch_value("SELECT current_setting(%(m)s, true)", {"m": MARKER})
        again = session.fetch_value("SELECT pg_backend_pid()")
    finally:
        other.close()
        # (wherever it lands: a marker left on a pooled server connection is harmless)
        session.fetch_value("SELECT set_config(%(m)s, '', false)", {"m": MARKER})
    logger.debug("Sonda de pooler: pids %s/%s, marcador visto por outra conexão: %s",
                 first, again, seen == token)
    return seen == token or first != again


def check_pool_mode(session: DbSession, settings: Settings) -> None:
    """Refuse session mode behind a transaction pooler (ConfigError naming DB_POOL_MODE)."""
    if settings.pooled or settings.is_mysql:
        return
    if transaction_pooled(session, settings):
        raise ConfigError(
            f"O PostgreSQL em {settings.db_host}:{settings.db_port} é alcançado por um pooler "
            "em modo transação (PgBouncer com pool_mode=transaction, RDS Proxy, Supavisor, "
            "PgCat): transações seguidas da mesma conexão caem em conexões diferentes do "
            "servidor, e o modo sessão (DB_POOL_MODE=session, o padrão) depende do estado da "
            "sessão (locks de sessão, LISTEN, PREPARE). Defina DB_POOL_MODE=transaction, ou "
            "conecte os workers direto ao PostgreSQL (ou a um pooler em modo sessão)")
