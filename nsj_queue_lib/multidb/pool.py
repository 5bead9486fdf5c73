"""Connections to the tenants' databases, reused across tasks.

One open connection per tenant is kept between tasks (version 1.2.2 opened a
new one for every task).  Connections are opened with autocommit OFF: what a
task writes through `multi_db_conn` is one transaction that the runtime
commits (or rolls back) next to the queue's own status update.

Life cycle of a connection, as seen by the runtime::

    conn = pool.acquire(tenant)      # reused or newly opened
    try:
        ...task...                   # writes through conn
        conn.commit()                # the runtime decides when
        pool.release(tenant, conn, ok=True)
    except Exception:
        pool.release(tenant, conn, ok=False)   # rolls back
        raise

`release` never commits: whatever is still uncommitted is rolled back before
the connection goes back to the pool.  A reused connection is checked (closed
flag, then `SELECT 1`) only when it sat idle for `check_after_idle` seconds or
when its previous task failed, so the normal path costs no extra round trip.
Connections idle for `idle_timeout` seconds are closed by `close_idle()`,
which `acquire` also calls opportunistically.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import psycopg2
import psycopg2.extensions
import pymysql

from nsj_queue_lib.db.session import open_connection
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.multidb.credentials import CredentialsClient, DbCredentials, Tenant
from nsj_queue_lib.multidb.errors import MultiDatabaseError, scrub, short

logger = logging.getLogger(__name__)


class _Driver:
    """What the pool needs from a DB-API driver."""

    name = ""
    errors: tuple[type[BaseException], ...] = ()

    def connect(self, creds: DbCredentials, timeout: float, application_name: str) -> Any:
        raise NotImplementedError

    def is_closed(self, conn: Any) -> bool:
        raise NotImplementedError

    def in_transaction(self, conn: Any) -> bool:
        raise NotImplementedError


class _Postgres(_Driver):
    name = "POSTGRES"
    errors = (psycopg2.Error, OSError)

    def connect(self, creds: DbCredentials, timeout: float, application_name: str) -> Any:
        return open_connection(
            self.name, host=creds.hostname, port=creds.port, dbname=creds.db_name,
            user=creds.user, password=creds.password, autocommit=False,
            connect_timeout=max(2, round(timeout)),  # libpq: integer seconds, minimum 2
            application_name=application_name, queue_session=False,
            keepalive_idle=60)  # let the kernel notice a dead peer on an idle pooled conn

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.closed)

    def in_transaction(self, conn: Any) -> bool:
        return conn.info.transaction_status in (
            psycopg2.extensions.TRANSACTION_STATUS_INTRANS,
            psycopg2.extensions.TRANSACTION_STATUS_INERROR,
        )


class _MySQL(_Driver):
    name = "MYSQL"
    errors = (pymysql.Error, OSError)

    def connect(self, creds: DbCredentials, timeout: float, application_name: str) -> Any:
        return open_connection(
            self.name, host=creds.hostname, port=creds.port, dbname=creds.db_name,
            user=creds.user, password=creds.password, autocommit=False,
            connect_timeout=timeout, application_name=application_name, queue_session=False)

    def is_closed(self, conn: Any) -> bool:
        return not conn.open

    def in_transaction(self, conn: Any) -> bool:
        return bool(getattr(conn, "server_status", 0) & 1)  # SERVER_STATUS_IN_TRANS


def _driver(name: str) -> _Driver:
    key = (name or "").strip().upper()
    if key in ("POSTGRES", "POSTGRESQL"):
        return _Postgres()
    if key in ("MYSQL", "SINGLE_STORE"):  # SingleStore speaks the MySQL protocol
        return _MySQL()
    raise ConfigError(f"Driver de banco multi-banco inválido: '{name}' (use POSTGRES ou MYSQL).")


@dataclass
class _Entry:
    tenant: Tenant
    conn: Any
    generation: int
    last_used: float
    needs_check: bool = False


class TenantConnections:
    """Pool of at most one idle DB-API connection per tenant (thread safe).

    `credentials_client` supplies the connection data of each tenant;
    `driver` is "POSTGRES" (psycopg2, default) or "MYSQL" / "SINGLE_STORE"
    (pymysql).  Times are in seconds; `clock` is injectable for tests.
    Concurrent `acquire` calls for one tenant get distinct connections; the
    extra ones are closed when released.
    """

    def __init__(self, credentials_client: CredentialsClient, driver: str = "POSTGRES",
                 idle_timeout: float = 300, connect_timeout: float = 5, *,
                 check_after_idle: float = 30.0, application_name: str = "nsj_queue_lib",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if idle_timeout <= 0 or connect_timeout <= 0 or check_after_idle < 0:
            raise ValueError("idle_timeout and connect_timeout must be positive, "
                             "check_after_idle must not be negative")
        self._credentials = credentials_client
        self._driver = _driver(driver)
        self._idle_timeout = float(idle_timeout)
        self._connect_timeout = float(connect_timeout)
        self._check_after_idle = float(check_after_idle)
        self._application_name = application_name
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: dict[Tenant, _Entry] = {}
        self._in_use: dict[int, _Entry] = {}
        self._generation = 0

    @property
    def driver(self) -> str:
        """Normalised driver name ("POSTGRES" or "MYSQL")."""
        return self._driver.name

    # -- public API -----------------------------------------------------

    def acquire(self, tenant: Tenant) -> Any:
        """A raw DB-API connection to `tenant`'s database, autocommit off.

        Reuses the tenant's idle connection when it is healthy, else opens a
        new one.  Raises MultiDatabaseError when the credentials cannot be
        obtained or the database cannot be reached.
        """
        self.close_idle()
        with self._lock:
            entry = self._idle.pop(tenant, None)
        if entry is not None:
            if self._healthy(entry):
                logger.debug("Reutilizando a conexão do tenant %s.", tenant)
                return self._lend(entry)
            _close_quietly(entry.conn)
        conn = self._connect(tenant)
        with self._lock:
            entry = _Entry(tenant, conn, self._generation, self._clock())
        return self._lend(entry)

    def release(self, tenant: Tenant, conn: Any, ok: bool) -> None:
        """Give back a connection from `acquire`.

        Anything uncommitted is rolled back (`release` never commits).  With
        `ok=False` the connection is checked before its next use.  Broken
        connections, and those released after `close_all()`, are closed.
        """
        with self._lock:
            entry = self._in_use.pop(id(conn), None)
        if entry is None or entry.conn is not conn:
            logger.warning("Conexão devolvida ao pool do tenant %s não veio do pool; "
                           "fechando-a.", tenant)
            _close_quietly(conn)
            return
        if entry.tenant != tenant:
            logger.warning("Conexão do tenant %s devolvida como sendo do tenant %s.",
                           entry.tenant, tenant)
        reusable = not self._driver.is_closed(conn)
        if reusable:
            try:
                if ok and self._driver.in_transaction(conn):
                    logger.debug("Transação do tenant %s não finalizada; desfazendo.",
                                 entry.tenant)
                conn.rollback()
            except Exception as exc:  # a broken connection: drop it
                logger.info("Conexão do tenant %s descartada (rollback falhou: %s).",
                            entry.tenant, type(exc).__name__)
                reusable = False
        if reusable:
            reusable = not self._driver.is_closed(conn)
        entry.last_used = self._clock()
        entry.needs_check = not ok
        with self._lock:
            if (reusable and entry.generation == self._generation
                    and entry.tenant not in self._idle):
                self._idle[entry.tenant] = entry
                return
        _close_quietly(conn)

    @contextmanager
    def connection(self, tenant: Tenant) -> Iterator[Any]:
        """`acquire` + `release`: ok=False when the block raises.  Does not commit."""
        conn = self.acquire(tenant)
        ok = False
        try:
            yield conn
            ok = True
        finally:
            self.release(tenant, conn, ok)

    def close_idle(self) -> int:
        """Close the connections idle for `idle_timeout` seconds or more; return how many."""
        now = self._clock()
        with self._lock:
            stale = [t for t, e in self._idle.items() if now - e.last_used >= self._idle_timeout]
            entries = [self._idle.pop(t) for t in stale]
        for entry in entries:
            logger.debug("Fechando a conexão ociosa do tenant %s.", entry.tenant)
            _close_quietly(entry.conn)
        return len(entries)

    def close_all(self) -> None:
        """Close every idle connection; connections in use are closed when released."""
        with self._lock:
            self._generation += 1
            entries = list(self._idle.values())
            self._idle.clear()
        for entry in entries:
            _close_quietly(entry.conn)

    def stats(self) -> dict[str, int]:
        """{'idle': n, 'in_use': n} (for logs and tests)."""
        with self._lock:
            return {"idle": len(self._idle), "in_use": len(self._in_use)}

    # -- internals ------------------------------------------------------

    def _lend(self, entry: _Entry) -> Any:
        with self._lock:
            self._in_use[id(entry.conn)] = entry
        return entry.conn

    def _healthy(self, entry: _Entry) -> bool:
        if self._driver.is_closed(entry.conn):
            logger.info("Conexão do tenant %s estava fechada; reconectando.", entry.tenant)
            return False
        idle = self._clock() - entry.last_used
        if idle >= self._idle_timeout:
            return False
        if not entry.needs_check and idle < self._check_after_idle:
            return True
        try:
            with entry.conn.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchone()
            entry.conn.rollback()
        except Exception as exc:
            logger.info("Conexão do tenant %s inutilizável (%s); reconectando.",
                        entry.tenant, type(exc).__name__)
            return False
        return True

    def _connect(self, tenant: Tenant) -> Any:
        creds = self._credentials.get(tenant)
        try:
            return self._open(tenant, creds)
        except self._driver.errors as exc:
            first: BaseException = exc
        # The cached credentials may be stale (password rotated, database
        # moved): fetch them again once, and retry only if they changed.
        logger.warning("%s; buscando as credenciais do tenant %s novamente.",
                       self._describe(tenant, creds, first), tenant)
        self._credentials.invalidate(tenant)
        try:
            fresh = self._credentials.get(tenant)
        except MultiDatabaseError as exc:
            logger.warning("Não foi possível renovar as credenciais do tenant %s: %s",
                           tenant, exc)
            fresh = creds
        if fresh == creds:
            raise self._error(tenant, creds, first)
        try:
            return self._open(tenant, fresh)
        except self._driver.errors as exc:
            raise self._error(tenant, fresh, exc) from None

    def _open(self, tenant: Tenant, creds: DbCredentials) -> Any:
        conn = self._driver.connect(creds, self._connect_timeout, self._application_name)
        logger.info("Conectado ao banco do tenant %s (%s em %s:%s).", tenant, creds.db_name,
                    creds.hostname, creds.port)
        return conn

    @staticmethod
    def _describe(tenant: Tenant, creds: DbCredentials, exc: BaseException) -> str:
        reason = scrub(short(str(exc)) or type(exc).__name__, [creds.password])
        return (f"Falha ao conectar no banco do tenant {tenant} ({creds.db_name} em "
                f"{creds.hostname}:{creds.port}, usuário {creds.user}): {reason}")

    def _error(self, tenant: Tenant, creds: DbCredentials,
               exc: BaseException) -> MultiDatabaseError:
        return MultiDatabaseError(self._describe(tenant, creds, exc), tenant=tenant)


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception as exc:
        logger.debug("Erro ignorado ao fechar conexão: %s", type(exc).__name__)
