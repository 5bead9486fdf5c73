"""The object that owns a database connection and its transactions.

Connections are opened in autocommit mode; a transaction is an explicit
BEGIN ... COMMIT issued by `transaction()`.  On MySQL a caller that knows the next
transaction follows at once can have a COMMIT start it (COMMIT AND CHAIN), which
saves the next BEGIN's round trip (`chain_commit`).  Driver errors that mean the
connection is gone are translated to DatabaseUnavailable, whatever the driver.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db import mysql_driver
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES, Dialect, detect_dialect, dialect_for_driver
from nsj_queue_lib.exceptions import ConfigError, DatabaseRefused, DatabaseUnavailable
from nsj_queue_lib.task_input import PayloadTooLarge
from nsj_queue_lib.text import one_line

logger = logging.getLogger(__name__)

Params = Optional[Mapping[str, Any]]
_NAMED_PARAM = re.compile(r"%\((\w+)\)s")
# pymysql.constants.SERVER_STATUS.SERVER_STATUS_IN_TRANS (MySQL protocol status flag)
_SERVER_STATUS_IN_TRANS = 1


def _connection_errors() -> tuple:
    import psycopg2

    return (psycopg2.OperationalError, psycopg2.InterfaceError,
            *mysql_driver.error_classes("OperationalError", "InterfaceError"))


# MySQL server errors that end the connection; client errors (2000-2999) do too.
_MYSQL_CONNECTION_CODES = frozenset({
    1040, 1053, 1077, 1078, 1079, 1080, 1152, 1158, 1159, 1160, 1161, 1184, 1927, 4031,
})


def _mysql_statement_error(exc: BaseException, conn: Any = None) -> bool:
    """pymysql and mysqlclient raise OperationalError also for errors of one statement
    (deadlock 1213, lock wait timeout 1205, SIGNAL 1644, ...): those leave the connection
    usable."""
    if not isinstance(exc, mysql_driver.error_classes("OperationalError")) or not exc.args:
        return False
    code = exc.args[0]
    if not isinstance(code, int) or 2000 <= code < 3000 or code in _MYSQL_CONNECTION_CODES:
        return False
    return conn is None or bool(getattr(conn, "open", True))


def _pg_lost_mid_request(exc: BaseException) -> bool:
    """psycopg2 raises a bare DatabaseError, without SQLSTATE, when the server went away
    during a request (a crash restart: "server closed the connection unexpectedly");
    only the next call on that connection raises OperationalError."""
    import psycopg2

    return type(exc) is psycopg2.DatabaseError and getattr(exc, "pgcode", None) is None


def is_connection_error(exc: BaseException, conn: Any = None) -> bool:
    """True when `exc` means the connection is unusable (lost, refused, closed).

    Errors of one statement (a statement timeout, a deadlock, a lock timeout, an
    unknown column) are not: psycopg2 and pymysql report several of them as
    OperationalError, so with `conn` given its state decides.
    """
    if isinstance(exc, DatabaseUnavailable) or _pg_lost_mid_request(exc):
        return True
    if not isinstance(exc, _connection_errors()):
        return False
    if not mysql_driver.is_mysql_error(exc):  # psycopg2
        closed = getattr(conn, "closed", None)
        return not isinstance(closed, int) or closed != 0
    return not _mysql_statement_error(exc, conn)


# PostgreSQL start-up refusals.  psycopg2 gives no SQLSTATE for a failed connection, so
# they are recognised by libpq's text (the server's English messages).
_PG_REFUSALS = (
    (re.compile(r"password authentication failed"), "28P01",
     "senha recusada para o usuário '{user}' (verifique DB_USER e DB_PASS)"),
    (re.compile(r'role "[^"]*" does not exist'), "28000",
     "o usuário '{user}' não existe no servidor (verifique DB_USER)"),
    (re.compile(r'database "[^"]*" does not exist'), "3D000",
     "a base '{db}' não existe (verifique DB_BASE)"),
    (re.compile(r"no pg_hba\.conf entry|authentication failed"), "28000",
     "o servidor recusou o acesso do usuário '{user}' à base '{db}' (verifique DB_USER, "
     "DB_PASS e o pg_hba.conf)"),
)
_PG_CODES = {"28P01": 0, "28000": 1, "3D000": 2}
_MYSQL_REFUSALS = {
    1045: "usuário '{user}' ou senha recusados (verifique DB_USER e DB_PASS)",
    1698: "usuário '{user}' ou senha recusados (verifique DB_USER e DB_PASS)",
    1044: "o usuário '{user}' não tem acesso à base '{db}' (verifique DB_USER e DB_BASE)",
    1049: "a base '{db}' não existe (verifique DB_BASE)",
}


def refusal(exc: BaseException, settings: Settings) -> Optional[DatabaseRefused]:
    """DatabaseRefused when `exc` (raised by connect) means the server refused the
    configured user, password or database; None for anything else (down, timeout)."""
    where = f"{settings.db_host}:{settings.db_port}/{settings.db_name}"
    facts = {"user": settings.db_user, "db": settings.db_name}
    if mysql_driver.is_mysql_error(exc):
        code = mysql_driver.error_code(exc)
        text = _MYSQL_REFUSALS.get(code) if code is not None else None
        if text is None:
            return None
        return DatabaseRefused(f"O banco {where} recusou a conexão: "
                               f"{text.format(**facts)} [MySQL {code}]", str(code))
    pgcode = getattr(exc, "pgcode", None)
    message = str(exc)
    for index, (pattern, sqlstate, text) in enumerate(_PG_REFUSALS):
        if _PG_CODES.get(pgcode or "") == index or pattern.search(message):
            return DatabaseRefused(f"O banco {where} recusou a conexão: "
                                   f"{text.format(**facts)} [SQLSTATE {sqlstate}]", sqlstate)
    return None


def open_connection(driver: str, *, host: str, port: int, dbname: str, user: str,
                    password: Optional[str], autocommit: bool, connect_timeout: float,
                    application_name: str, queue_session: bool = True,
                    keepalive_idle: int = 10, mysql_driver_name: str = "pymysql",
                    pooled: bool = False) -> Any:
    """Open a raw DB-API connection with psycopg2 (POSTGRES) or, for MYSQL and
    SINGLE_STORE, `mysql_driver_name` (pymysql or mysqlclient: db/mysql_driver.py);
    driver errors propagate as they are.

    The one place connections are opened: the queue's own sessions (`connect`) and the
    multi-database tenant pool.  A queue session (`queue_session`) also gets
    server-side keepalives (PostgreSQL) or a UTC session time zone (MySQL), which a
    tenant connection handed to user code must not get.  `pooled` (DB_POOL_MODE=
    transaction): no SET at all, since behind a transaction pooler it would change
    whichever server connection the statement landed on (the client-side keepalives stay).
    """
    if driver in ("POSTGRES", "POSTGRESQL"):
        import psycopg2

        conn = psycopg2.connect(
            host=host, port=port, dbname=dbname, user=user, password=password or None,
            connect_timeout=connect_timeout, application_name=application_name,
            # Detect a dead peer on an idle or half-open connection.
            keepalives=1, keepalives_idle=keepalive_idle,
            keepalives_interval=5 if queue_session else 10, keepalives_count=3,
        )
        conn.autocommit = autocommit
        if queue_session and not pooled:
            with contextlib.closing(conn.cursor()) as cur:
                # Server-side keepalives: if this worker's host vanishes without closing
                # the connection, PostgreSQL ends the session (freeing its task lock for
                # the rescue) in about a minute instead of the OS default of hours.
                cur.execute("SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; "
                            "SET tcp_keepalives_count = 3")
        return conn
    if queue_session:
        return mysql_driver.connect(
            mysql_driver_name, host=host, port=port, database=dbname, user=user,
            password=password or "", connect_timeout=connect_timeout, autocommit=autocommit,
            init_command="SET time_zone = '+00:00'")
    return mysql_driver.connect(
        "pymysql", host=host, port=port, database=dbname, user=user, password=password or "",
        connect_timeout=connect_timeout, autocommit=autocommit, program_name=application_name)


def connect(settings: Settings, *, connect_timeout: int = 5, application_name: str = "") -> Any:
    """Open a raw DB-API connection in autocommit mode, as configured by `settings`
    (on MySQL with the driver DB_MYSQL_DRIVER chooses)."""
    try:
        driver = mysql_driver.resolve(settings.db_mysql_driver) if settings.is_mysql else ""
    except ImportError as exc:
        raise ConfigError(str(exc)) from None
    try:
        return open_connection(
            settings.db_driver, host=settings.db_host, port=settings.db_port,
            dbname=settings.db_name, user=settings.db_user, password=settings.db_pass,
            autocommit=True, connect_timeout=connect_timeout,
            application_name=application_name or f"nsj_queue_lib:{settings.queue_name}",
            mysql_driver_name=driver or "pymysql", pooled=settings.pooled)
    except _connection_errors() as exc:
        refused = refusal(exc, settings)
        if refused is not None:
            raise refused from exc
        raise DatabaseUnavailable(unreachable_text(exc, settings, driver or "psycopg2")) from exc


# The protocol mix-up: libpq's words when the port answered but not as PostgreSQL does
# (a MySQL server speaks first, with its greeting), and the MySQL clients' error codes
# when the server never sent a greeting (a PostgreSQL server waits for the client).
_PG_NOT_POSTGRES = re.compile(r"received invalid response to SSL negotiation|"
                              r"expected authentication request from server")
_MYSQL_NO_GREETING = frozenset({2013, 2006, 2027})  # lost / gone away / malformed packet
HINT_MYSQL_PORT = "a porta parece ser de um MySQL/MariaDB: defina DB_DRIVER=MYSQL"
HINT_NOT_POSTGRES = ("o servidor nessa porta não respondeu como um PostgreSQL (a porta está "
                     "certa? para um MySQL/MariaDB, defina DB_DRIVER=MYSQL)")
HINT_POSTGRES_PORT = "a porta parece ser de um PostgreSQL: defina DB_DRIVER=POSTGRES"
_PROBE_TIMEOUT = 1.0


def unreachable_text(exc: BaseException, settings: Settings, client: str) -> str:
    """The message of a failed connection that is not a refusal: host, port, base and
    driver, the driver's error and, when the port speaks the other database's protocol
    (DB_DRIVER forgotten or wrong), what to set."""
    detail = one_line(str(exc), 300)
    if mysql_driver.is_mysql_error(exc) and exc.args and len(exc.args) > 1:
        detail = f"[{exc.args[0]}] {one_line(str(exc.args[1]), 300)}"
    text = (f"Não foi possível conectar ao banco (host {settings.db_host}, porta "
            f"{settings.db_port}, base {settings.db_name}, DB_DRIVER={settings.db_driver} "
            f"via {client}): {detail}")
    hint = protocol_hint(exc, settings.db_host, settings.db_port)
    return f"{text}; {hint}" if hint else text


def protocol_hint(exc: BaseException, host: str, port: int) -> Optional[str]:
    """What to set when the server at host:port speaks the other protocol, or None."""
    if mysql_driver.is_mysql_error(exc):
        if mysql_driver.error_code(exc) in _MYSQL_NO_GREETING and _speaks_postgres(host, port):
            return HINT_POSTGRES_PORT
        return None
    if _PG_NOT_POSTGRES.search(str(exc)):
        if _mysql_greeting(host, port):
            return HINT_MYSQL_PORT
        return HINT_NOT_POSTGRES
    return None


def _mysql_greeting(host: str, port: int) -> bool:
    """True when the server at host:port greets like MySQL/MariaDB: it speaks first, a
    packet of protocol 10 (or an error packet, e.g. too many connections)."""
    import socket

    try:
        with socket.create_connection((host, port), _PROBE_TIMEOUT) as sock:
            sock.settimeout(_PROBE_TIMEOUT)
            head = sock.recv(5)
    except OSError:
        return False
    return len(head) == 5 and head[3] == 0 and head[4] in (10, 0xFF)


def _speaks_postgres(host: str, port: int) -> bool:
    """True when the server at host:port answers a PostgreSQL SSLRequest (one byte, 'S'
    or 'N') and did not speak first (MySQL does)."""
    import socket
    import struct

    try:
        with socket.create_connection((host, port), _PROBE_TIMEOUT) as sock:
            sock.settimeout(0.3)
            try:
                if sock.recv(1):
                    return False  # the server spoke first: not PostgreSQL
            except socket.timeout:
                pass
            sock.settimeout(_PROBE_TIMEOUT)
            sock.sendall(struct.pack("!ii", 8, 80877103))  # SSLRequest
            answer = sock.recv(2)
    except OSError:
        return False
    return answer in (b"S", b"N")


# PostgreSQL has COMMIT AND CHAIN from version 12 (server_version 120000) on.
POSTGRES_CHAIN_VERSION = 120000


def postgres_chains(server_version: int) -> bool:
    """Whether a PostgreSQL server of `server_version` (libpq's number) takes COMMIT AND
    CHAIN; the library supports servers from 9.5 on."""
    return server_version >= POSTGRES_CHAIN_VERSION


# Where the message of DbSession.send_with_commit failed (CommitRider.on_error):
BEFORE_COMMIT = "before"  # in `before`: the transaction is still open, aborted
AT_COMMIT = "commit"  # the COMMIT itself: rolled back, nothing after it ran
AFTER_COMMIT = "after"  # in `after`: the transaction committed


@dataclass
class CommitRider:
    """Statements sent in one message with a COMMIT (`DbSession.send_with_commit`):
    `before` (the transaction's last statement) and `after` (run once it committed), each
    an EXECUTE text and the arguments psycopg2 binds (None: nothing); what receives the
    rows of the message's last statement, what is told of an error (and where: BEFORE_COMMIT,
    AT_COMMIT or AFTER_COMMIT; it may raise an exception of its own instead of the
    driver's), and what tells, after an error once the transaction has ended, whether the
    COMMIT went through."""

    before: Optional[Tuple[str, tuple]]
    after: Optional[Tuple[str, tuple]]
    on_rows: Callable[[List[dict]], None]
    on_error: Callable[[BaseException, str], None]
    committed: Callable[[], bool]


class DbSession:
    """Owns one connection: runs named statements and explicit transactions.

    `DbSession(conn, dialect)` makes the dialect's subclass (PostgresSession,
    MysqlSession): what differs between the databases' sessions (prepared statements,
    the transaction status the driver shows, the COMMIT rider) lives there, so no caller
    and no method here branches on the dialect."""

    KEEP_CURSOR = False  # one cursor kept for the queue's own statements (see _run)
    COMMIT_RIDER = False  # statements sent in one message with the COMMIT (send_with_commit)

    def __new__(cls, conn: Any, dialect: Optional[Dialect] = None) -> DbSession:
        if cls is DbSession:
            cls = _SESSION_CLASSES[dialect or detect_dialect(conn)]
        return super().__new__(cls)

    def __init__(self, conn: Any, dialect: Optional[Dialect] = None) -> None:
        self.conn = conn
        self.dialect = dialect or detect_dialect(conn)
        self.in_transaction = False
        self.commits = 0  # COMMITs that succeeded on this session
        self._after_commit: List[Callable[[], None]] = []  # of the open transaction
        # PostgreSQL: the statements sent in one message with the open transaction's
        # COMMIT (`send_with_commit`)
        self._rider: Optional[CommitRider] = None
        self._prepared: Dict[str, List[str]] = {}
        # prepared statement name -> its EXECUTE text (PostgreSQL: up to its arguments)
        self._calls: Dict[str, str] = {}
        self._chain_next = False  # the open transaction's COMMIT is to be AND CHAIN
        self._chained = False  # a transaction started by COMMIT AND CHAIN, not yet begun
        self._readable: Optional[bool] = None  # the driver shows the server status flags
        self._mariadb: Optional[bool] = None  # MySQL dialect: the server is MariaDB
        # MariaDB refused a PREPARE for its max_prepared_stmt_count: plain text from then on
        self._unpreparable = False
        # DB_POOL_MODE=transaction: no server-side PREPARE (it would exist on one server
        # connection of the pooler only); the statements are sent as text every time
        self.unprepared = False
        self.server: Dict[str, Any] = {}  # facts about the server, read once (db/server_version.py)
        self._keep = self.KEEP_CURSOR  # _run(keep=...) for the queue's own
        self._kept_cursor: Any = None

    @classmethod
    def open(cls, settings: Settings, **kwargs: Any) -> DbSession:
        session = cls(connect(settings, **kwargs), dialect_for_driver(settings.db_driver))
        session.unprepared = settings.pooled
        return session

    # -- statements -------------------------------------------------------
    def _run(self, sql: str, params: Any, fetch: str, keep: bool = False) -> Any:
        # params: a mapping, or the positional tuple of a prepared statement
        if self._chained and not self.in_transaction:
            self._end_chained()
        # (what _translated() does, written out: every statement of every task comes here)
        try:
            # `keep` (PostgreSQL, the queue's own statements: prepared ones, BEGIN, COMMIT):
            # one cursor kept for them instead of a new one per statement (~6.6k
            # instructions each).  Once the connection is closed the kept cursor is too,
            # and a new one is asked for, which raises as before.
            cur = self._kept_cursor if keep else None
            if cur is None or cur.closed:
                cur = self.conn.cursor()
                if keep:
                    self._kept_cursor = cur
            try:
                cur.execute(sql, params)
                if fetch == "none":
                    return cur.rowcount
                if fetch == "lastrowid":
                    return cur.lastrowid
                description = cur.description
                if description is None:
                    return [] if fetch == "all" else None
                cols = [d[0] for d in description]
                if fetch == "one":
                    row = cur.fetchone()
                    return dict(zip(cols, row)) if row is not None else None
                return [dict(zip(cols, r)) for r in cur.fetchall()]
            finally:
                if not keep:
                    cur.close()
        except Exception as exc:
            self._raise_if_lost(exc)
            raise  # an error of this statement; the connection is still usable

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """A lost connection's driver error becomes DatabaseUnavailable."""
        try:
            yield
        except Exception as exc:
            self._raise_if_lost(exc)
            raise  # an error of this statement; the connection is still usable

    def _raise_if_lost(self, exc: Exception) -> None:
        """DatabaseUnavailable from `exc` when it is a lost connection's driver error;
        PayloadTooLarge (permanent) for a statement above max_allowed_packet."""
        code = mysql_driver.error_code(exc)
        if code in (1153, 2020):  # ER_NET_PACKET_TOO_LARGE (server), CR_ (client library)
            raise PayloadTooLarge(
                f"Comando maior que o servidor MariaDB/MySQL aceita (max_allowed_packet; "
                f"erro {code}"
                + ("; o servidor encerrou a conexão" if code == 1153 else "")
                + "): reduza o valor enviado (o payload, por exemplo) ou aumente "
                "max_allowed_packet no servidor") from exc
        if is_connection_error(exc, self.conn):
            raise DatabaseUnavailable(
                f"Conexão com o banco perdida: {one_line(str(exc), 500)}") from exc

    def execute(self, sql: str, params: Params = None) -> int:
        """Run a statement; return its row count."""
        return self._run(sql, params, "none")

    def fetch_one(self, sql: str, params: Params = None) -> Optional[dict]:
        return self._run(sql, params, "one")

    def fetch_one_interruptible(self, sql: str, params: Params = None) -> Optional[dict]:
        """fetch_one of a statement that waits inside the server (GET_LOCK), whose answer
        is awaited in Python: a stop signal's handler runs at once, even with mysqlclient
        (db/mysql_driver.fetch_one_awaited; pymysql reads in Python anyway).  Should the
        handler raise, the connection is left mid-statement: the caller closes it."""
        if not mysql_driver.reads_in_c(self.conn):
            return self.fetch_one(sql, params)
        if self._chained and not self.in_transaction:
            self._end_chained()
        with self._translated():
            found = mysql_driver.fetch_one_awaited(self.conn, sql, params)
        return dict(zip(*found)) if found is not None else None

    def fetch_all(self, sql: str, params: Params = None) -> List[dict]:
        return self._run(sql, params, "all")

    def fetch_value(self, sql: str, params: Params = None) -> Any:
        row = self._run(sql, params, "one")
        return next(iter(row.values())) if row else None

    def fetch_one_prepared(self, name: str, sql: str, params: Mapping[str, Any]) -> Optional[dict]:
        """fetch_one through a server-side prepared statement, parsed (PostgreSQL: and
        planned) once per connection.  PostgreSQL: statements before the last one of
        `sql` (such as SET LOCAL) are sent with each EXECUTE, in the same implicit
        transaction.  MySQL dialect: one statement; prepared on MariaDB only (EXECUTE
        ... USING takes literal values there; MySQL takes only user variables, which
        would cost a SET per call), elsewhere `sql` is sent as it is."""
        return self._run_prepared(name, sql, params, "one")

    def fetch_all_prepared(self, name: str, sql: str, params: Mapping[str, Any]) -> List[dict]:
        """fetch_all through a server-side prepared statement (see fetch_one_prepared)."""
        return self._run_prepared(name, sql, params, "all")

    def execute_prepared(self, name: str, sql: str, params: Mapping[str, Any]) -> int:
        """execute through a server-side prepared statement (see fetch_one_prepared); the
        row count."""
        return self._run_prepared(name, sql, params, "none")

    def _run_prepared(self, name: str, sql: str, params: Mapping[str, Any], fetch: str) -> Any:
        """`sql` through the server-side prepared statement `name` (per dialect)."""
        raise NotImplementedError

    def prepare(self, name: str, sql: str) -> None:
        """PostgreSQL: PREPARE `name` now if not yet (PostgresSession); nothing elsewhere."""

    def prepared_text(self, name: str, params: Mapping[str, Any]) -> Optional[Tuple[str, tuple]]:
        """PostgreSQL: the EXECUTE text of `name` (PostgresSession.prepared_text); None
        elsewhere (no statement rides on a COMMIT)."""
        return None

    def insert_lastrowid(self, sql: str, params: Params = None) -> int:
        return self._run(sql, params, "lastrowid")

    # -- transactions -----------------------------------------------------
    def begin(self) -> None:
        self._after_commit.clear()
        self._rider = None
        self._chain_next = False
        if self._chained:
            self._chained = False  # already open, started by the last COMMIT AND CHAIN
        else:
            self._run("BEGIN", None, "none", self._keep)
        self.in_transaction = True

    def chain_commit(self) -> None:
        """Have the open transaction's COMMIT start the next one at once (COMMIT AND
        CHAIN), so the next `begin()` sends nothing.  For a caller that knows the
        session's next transaction follows right away (the task claimed ahead): should
        any other statement come first, the chained transaction, still empty, is
        committed before it, so such statements run in autocommit as always.  Ignored
        outside a transaction and after a rollback; and when the
        server's answer to the COMMIT shows no open transaction (SingleStore ignores
        AND CHAIN), the next `begin()` sends BEGIN as usual.  Ignored too when the
        driver cannot show that answer (mysqlclient over Oracle's libmysqlclient): plain
        COMMIT, then BEGIN.  On PostgreSQL before 12 (no AND CHAIN, a syntax error that
        would abort the task's transaction at its COMMIT): plain COMMIT, then BEGIN."""
        if self.in_transaction and self._chains():
            self._chain_next = True

    def _chains(self) -> bool:
        """Whether COMMIT AND CHAIN can be used on this session (per dialect)."""
        raise NotImplementedError

    def _server_in_transaction(self) -> bool:
        """Whether the server reported an open transaction in its last answer (the
        status flags of the last OK packet: db/mysql_driver.py; libpq's transaction
        status on PostgreSQL); False when the driver does not tell."""
        raise NotImplementedError

    def transaction_usable(self) -> bool:
        """Whether the explicit transaction is open and usable as far as the client knows,
        without a round trip: on PostgreSQL, not aborted by an error (libpq's status of
        the last answer); on MySQL, the server's last answer showed a transaction open
        (an error answer carries no status: a statement after it tells)."""
        raise NotImplementedError

    def _end_chained(self) -> None:
        """Close the (empty) transaction a COMMIT AND CHAIN opened; no `begin()` took it."""
        self._chained = False
        self._run("COMMIT", None, "none")

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the open transaction's COMMIT succeeds; a rollback (or
        the next BEGIN) drops it.  Tells a caller the outcome of this very transaction,
        whatever other transactions the session commits afterwards."""
        self._after_commit.append(callback)

    def send_with_commit(self, rider: CommitRider) -> None:
        """PostgreSQL: have the open transaction's COMMIT sent in one message with
        `rider.before` (the transaction's last statement) and `rider.after` (it runs once
        the COMMIT succeeded, in an implicit transaction of its own: a statement before
        the COMMIT would join the task's transaction): one round trip for all three.
        `rider.on_rows` gets the rows of the last statement.  The server answers one
        error for the whole message: it tells `rider.on_error` where (asking
        `rider.committed` when the transaction is over), and the commit raises unless the
        COMMIT went through.  A rollback (or the next BEGIN) drops the rider unsent.
        Elsewhere nothing (MysqlSession): the caller sends its statements itself."""
        if self.in_transaction and self.COMMIT_RIDER:
            self._rider = rider

    def commit(self) -> None:
        rider, self._rider = self._rider, None
        if rider is not None:
            self._commit_with(rider)
            return
        chain, self._chain_next = self._chain_next, False
        self._run("COMMIT AND CHAIN" if chain else "COMMIT", None, "none", self._keep)
        self._committed(chain)

    def _commit_with(self, rider: CommitRider) -> None:
        """COMMIT with the rider's statements in one message (see send_with_commit)."""
        self._chain_next = False
        texts, args = [], ()
        if rider.before is not None:
            texts.append(rider.before[0])
            args += rider.before[1]
        texts.append("COMMIT")
        if rider.after is not None:
            texts.append(rider.after[0])
            args += rider.after[1]
        try:
            rows = self._run("; ".join(texts), args, "all", True)
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            if not self.transaction_idle():
                rider.on_error(exc, BEFORE_COMMIT)  # (the caller rolls back)
                raise
            committed = rider.committed()
            if not committed:
                self.in_transaction = False
                rider.on_error(exc, AT_COMMIT)
                raise
            self._committed(False)
            rider.on_error(exc, AFTER_COMMIT)
            return
        self._committed(False)
        rider.on_rows(rows)

    def transaction_idle(self) -> bool:
        """PostgreSQL: no transaction open on the server after the last answer (libpq's
        transaction status)."""
        import psycopg2.extensions

        return (self.conn.info.transaction_status
                == psycopg2.extensions.TRANSACTION_STATUS_IDLE)

    def _committed(self, chain: bool) -> None:
        self.in_transaction = False
        # Chained only if the server says a transaction is open now: SingleStore (even
        # reached as DB_DRIVER=MYSQL) accepts AND CHAIN and ignores it, and `begin()`
        # must then send BEGIN rather than run the next task in autocommit.
        self._chained = chain and self._server_in_transaction()
        self.commits += 1
        callbacks, self._after_commit = self._after_commit, []
        for callback in callbacks:
            callback()

    def rollback(self) -> None:
        """Roll back; a lost connection is not an error here (the server rolled back)."""
        self.in_transaction = False
        self._after_commit.clear()
        self._rider = None
        self._chain_next = self._chained = False
        try:
            self._run("ROLLBACK", None, "none", self._keep)
        except DatabaseUnavailable:
            pass

    @contextlib.contextmanager
    def transaction(self) -> Iterator[DbSession]:
        """BEGIN ... COMMIT, or ROLLBACK when the block raises."""
        self.begin()
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def storable(self, text: str) -> str:
        """`text` as the connection can send it: unchanged when its encoding (the
        database's, e.g. LATIN1 or SQL_ASCII) can represent it, else with the
        characters it cannot represent escaped as \\uXXXX (never a failed UPDATE)."""
        codec = self._codec()
        try:
            text.encode(codec)
            return text
        except UnicodeEncodeError:
            return text.encode("ascii", "backslashreplace").decode("ascii")
        except LookupError:
            return text

    def _codec(self) -> str:
        return getattr(self.conn, "encoding", None) or "utf-8"

    def is_alive(self) -> bool:
        try:
            self.execute("SELECT 1")
            return True
        except DatabaseUnavailable:
            return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


class PostgresSession(DbSession):
    """The PostgreSQL session (psycopg2): server-side prepared statements as PREPARE and
    EXECUTE text, libpq's transaction status, statements riding on the COMMIT."""

    KEEP_CURSOR = True
    COMMIT_RIDER = True

    def _run_prepared(self, name: str, sql: str, params: Mapping[str, Any], fetch: str) -> Any:
        if self.unprepared:
            return self._run(sql, params, fetch)
        if name not in self._prepared:
            self._prepare(name, sql)
        text, args = self._execute_text(name, params)
        return self._run(text, args, fetch, True)

    def _prepare(self, name: str, sql: str) -> None:
        """PostgreSQL: PREPARE `name` (the last statement of `sql`) and build its EXECUTE."""
        *before, main = [part for part in sql.split(";\n") if part.strip()]
        order: List[str] = []

        def positional(match: Any) -> str:
            key = match.group(1)
            if key not in order:
                order.append(key)
            return f"${order.index(key) + 1}"

        self.execute(f"PREPARE {name} AS " + _NAMED_PARAM.sub(positional, main))
        self._prepared[name] = order
        prefix = "".join(f"{stmt.strip()}; " for stmt in before)
        # (a name always stands for the same text: built once, like the PREPARE)
        self._calls[name] = f"{prefix}EXECUTE {name}(" if order else f"{prefix}EXECUTE {name}"

    def prepare(self, name: str, sql: str) -> None:
        """PostgreSQL: PREPARE `name` now if not yet (also inside a transaction: a
        prepared statement outlives the transaction's rollback)."""
        if name not in self._prepared and not self.unprepared:
            self._prepare(name, sql)

    def prepared_text(self, name: str, params: Mapping[str, Any]) -> Optional[Tuple[str, tuple]]:
        """PostgreSQL: (EXECUTE text, the arguments psycopg2 still binds) of the prepared
        statement `name` with `params`, for `send_with_commit`; None when `name` is not
        prepared on this session yet (nothing is sent here)."""
        if name not in self._prepared:
            return None
        return self._execute_text(name, params)

    def _execute_text(self, name: str, params: Mapping[str, Any]) -> Tuple[str, tuple]:
        order = self._prepared[name]
        if not order:
            return self._calls[name], ()
        # The arguments psycopg2 would adapt one by one (an adapter object per value, ~9k
        # instructions per int) written in here as the very text it makes of them: int
        # as str() (a space before a minus), None as NULL, bool as true/false; any other
        # value stays a %s for psycopg2.  The query sent is byte for byte the same.
        texts: List[str] = []
        rest: List[Any] = []
        for key in order:
            value = params[key]
            kind = type(value)
            if kind is int:
                texts.append(f" {value}" if value < 0 else str(value))
            elif value is None:
                texts.append("NULL")
            elif kind is bool:
                texts.append("true" if value else "false")
            else:
                texts.append("%s")
                rest.append(value)
        return self._calls[name] + ", ".join(texts) + ")", tuple(rest)

    def _chains(self) -> bool:
        return postgres_chains(self.conn.server_version)

    def _server_in_transaction(self) -> bool:
        """libpq's transaction status of the last answer (see DbSession)."""
        return self.transaction_usable()

    def transaction_usable(self) -> bool:
        """Not aborted by an error: libpq's status of the last answer (see DbSession)."""
        import psycopg2.extensions

        return (self.conn.info.transaction_status
                == psycopg2.extensions.TRANSACTION_STATUS_INTRANS)

    def _codec(self) -> str:
        import psycopg2.extensions

        return psycopg2.extensions.encodings.get(super()._codec(), "utf-8")


class MysqlSession(DbSession):
    """The MySQL / MariaDB / SingleStore session (pymysql, mysqlclient): MariaDB's
    PREPARE ... EXECUTE USING, the server status flags of the last OK packet."""

    def _is_mariadb(self) -> bool:
        """MariaDB, from the connection's handshake (no statement); asked once."""
        if self._mariadb is None:
            version = getattr(self.conn, "server_version", None)  # pymysql
            if version is None and hasattr(self.conn, "get_server_info"):  # mysqlclient
                version = self.conn.get_server_info()
            self._mariadb = "mariadb" in str(version or "").lower()
        return self._mariadb

    def _run_prepared(self, name: str, sql: str, params: Mapping[str, Any],
                      fetch: str, again: bool = True) -> Any:
        """MariaDB: PREPARE once per connection (`?` for each %(name)s, in order), then
        EXECUTE ... USING the values, bound by the driver as literals.  The statement's
        text is parsed once instead of at every call (the native claim: about a third
        of its server CPU)."""
        if not self._is_mariadb():
            return self._run(sql, params, fetch)
        order = self._prepared.get(name)
        if order is None:
            if self._unpreparable:
                return self._run(sql, params, fetch)
            order = _NAMED_PARAM.findall(sql)
            text = _NAMED_PARAM.sub("?", sql).replace("%%", "%")
            try:
                self.execute(f"PREPARE {name} FROM %(nsjq_text)s", {"nsjq_text": text})
            except Exception as exc:
                if mysql_driver.error_code(exc) != 1461:  # ER_MAX_PREPARED_STMT_COUNT_REACHED
                    raise
                # The server's prepared statements are all taken (other applications, a
                # low max_prepared_stmt_count): the same statement as text, values bound
                # by the driver.  A failed PREPARE leaves the transaction as it was.
                self._unpreparable = True
                logger.warning("MariaDB recusou o PREPARE dos comandos da fila: o limite de "
                               "prepared statements do servidor (max_prepared_stmt_count) "
                               "foi atingido (erro 1461). Até reconectar, esta conexão envia "
                               "o texto dos comandos a cada vez (mais CPU do servidor por "
                               "tarefa); aumente max_prepared_stmt_count para voltar ao "
                               "PREPARE")
                return self._run(sql, params, fetch)
            self._prepared[name] = order
            using = ", ".join(f"%({key})s" for key in order)
            self._calls[name] = f"EXECUTE {name} USING {using}" if order else f"EXECUTE {name}"
        try:
            return self._run(self._calls[name], params, fetch)
        except Exception as exc:
            if not again or mysql_driver.error_code(exc) != 1243:  # ER_UNKNOWN_STMT_HANDLER
                raise
            # Deallocated behind the library's back (task code on bd_conn): once more.
            del self._prepared[name]
            return self._run_prepared(name, sql, params, fetch, again=False)

    def _chains(self) -> bool:
        return self._status_readable()

    def _status_readable(self) -> bool:
        """Whether the driver shows the server's status flags (asked once per session)."""
        if self._readable is None:
            self._readable = mysql_driver.server_status(self.conn) is not None
        return self._readable

    def _server_in_transaction(self) -> bool:
        """Whether the server reported an open transaction in its last answer (the
        status flags of the last OK packet: db/mysql_driver.py; libpq's transaction
        status on PostgreSQL); False when the driver does not tell."""
        status = mysql_driver.server_status(self.conn)
        return status is not None and bool(status & _SERVER_STATUS_IN_TRANS)

    def transaction_usable(self) -> bool:
        """The server's last answer showed a transaction open (see DbSession)."""
        return self._server_in_transaction()


# The session class of each dialect (DbSession.__new__).
_SESSION_CLASSES: Dict[Dialect, type] = {POSTGRES: PostgresSession, MYSQL: MysqlSession}


class TaskConnection:
    """The `bd_conn` given to user code: the queue's connection, inside the task transaction.

    Compatible with code written for the original library: `.conn` is the raw
    DB-API connection; the object also works as a DB-API connection itself
    (`cursor()`), and `execute(sql, params)` returns the rows as dicts.
    Committing is the queue's job: `commit()`/`rollback()` here are refused so
    the task's writes and its status always commit together.
    """

    def __init__(self, session: DbSession) -> None:
        self._session = session
        self.conn = session.conn

    @property
    def session(self) -> DbSession:
        """The worker's session this connection belongs to."""
        return self._session

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return self.conn.cursor(*args, **kwargs)

    def execute(self, sql: str, params: Params = None) -> List[dict]:
        """Run `sql` with bound `params`; return the rows (empty for statements without rows)."""
        return self._session.fetch_all(sql, params)

    def executemany(self, sql: str, seq: Sequence[Mapping[str, Any]]) -> None:
        with contextlib.closing(self.conn.cursor()) as cur:
            cur.executemany(sql, seq)

    def commit(self) -> None:
        raise RuntimeError(
            "bd_conn pertence à transação da tarefa: a fila faz o commit junto com o status."
        )

    rollback = commit

    def close(self) -> None:
        """No-op: the connection belongs to the worker."""


def session_of(bd_conn: Any) -> DbSession:
    """The session for what a caller passes as a connection (QueueClient, QueueAdmin,
    direct calls of a worker): a DbSession itself; the worker's `bd_conn` (TaskConnection):
    the session it belongs to, with its transaction state; a DB-API connection: a new
    session on it, given as is or, as 1.2.2 callers pass their wrappers, as `.conn`."""
    if isinstance(bd_conn, DbSession):
        return bd_conn
    if isinstance(bd_conn, TaskConnection):
        return bd_conn.session
    return DbSession(getattr(bd_conn, "conn", bd_conn))
