"""The MySQL client drivers of the queue's own connections.

pymysql (pure Python) is always installed; mysqlclient (MySQLdb, a C extension over
libmariadb / libmysqlclient) is the optional extra `nsj-queue-lib[mysqlclient]`, chosen
by DB_MYSQL_DRIVER (default `pymysql`, as 1.2.2: task code sees the driver it was
written for; `auto`: mysqlclient when importable).  A MySQL native task spends
about half of the worker's CPU inside the driver, and the C driver needs a third less
of it (bench/README.md).

What the library needs of a driver, written once here: open a connection (utf8mb4,
autocommit as asked, a connect timeout, the session's init command), the server's
status flags of the last answer (the COMMIT AND CHAIN trust rule of db/session.py), and
the driver's exception classes and error codes, and a statement whose answer is awaited
in Python (`fetch_one_awaited`: a long GET_LOCK a stop signal must cut short).  Tenant
connections handed to user code (multidb) stay on pymysql.
"""

from __future__ import annotations

import ctypes
import functools
import math
import select
from typing import Any, Mapping, Optional, Tuple, Type

DRIVER_CHOICES = ("auto", "pymysql", "mysqlclient")

# Seconds between two looks at Python's pending signals while an answer is awaited (a
# signal that another thread received; the main thread's own ends the wait at once).
AWAIT_SLICE = 0.25

# MariaDB Connector/C: enum mariadb_value MARIADB_CONNECTION_SERVER_STATUS (mysql.h)
_MARIADB_CONNECTION_SERVER_STATUS = 30
_CAPSULE_NAME = b"_mysql.connection.native_connection"


@functools.cache
def mysqlclient_module() -> Any:
    """MySQLdb when mysqlclient is installed and loads, else None."""
    try:
        import MySQLdb
    except ImportError:
        return None
    return MySQLdb


def resolve(choice: str) -> str:
    """'pymysql' or 'mysqlclient' for the DB_MYSQL_DRIVER value `choice`.

    Raises ImportError when mysqlclient is asked for by name and cannot be imported."""
    if choice == "pymysql":
        return "pymysql"
    if mysqlclient_module() is not None:
        return "mysqlclient"
    if choice == "mysqlclient":
        raise ImportError(
            "DB_MYSQL_DRIVER=mysqlclient, mas o pacote mysqlclient não está instalado "
            "(pip install 'nsj-queue-lib[mysqlclient]'; precisa de libmariadb-dev ou "
            "libmysqlclient-dev e pkg-config para compilar)")
    return "pymysql"


def connect(driver: str, *, host: str, port: int, database: str, user: str,
            password: str, connect_timeout: float, autocommit: bool,
            init_command: Optional[str] = None, program_name: Optional[str] = None) -> Any:
    """A raw connection of `driver` (as `resolve` names it) in utf8mb4; errors propagate."""
    extra: dict = {}
    if init_command:
        extra["init_command"] = init_command
    if driver == "mysqlclient":
        MySQLdb = mysqlclient_module()
        # The C option is whole seconds; program_name is pymysql's own connect attribute.
        return MySQLdb.connect(host=host, port=port, database=database, user=user,
                               password=password, charset="utf8mb4", autocommit=autocommit,
                               connect_timeout=max(1, math.ceil(connect_timeout)), **extra)
    import pymysql

    if program_name:
        extra["program_name"] = program_name
    return pymysql.connect(host=host, port=port, database=database, user=user,
                           password=password, connect_timeout=connect_timeout,
                           autocommit=autocommit, charset="utf8mb4", **extra)


def reads_in_c(conn: Any) -> bool:
    """Whether `conn` is a mysqlclient connection (its reads happen inside C)."""
    MySQLdb = mysqlclient_module()
    return MySQLdb is not None and isinstance(conn, MySQLdb._mysql.connection)


def fetch_one_awaited(conn: Any, sql: str, params: Optional[Mapping[str, Any]]
                      ) -> Optional[Tuple[Tuple[str, ...], tuple]]:
    """mysqlclient: run one statement whose answer may take seconds (GET_LOCK), waiting
    for the answer in Python; return (column names, first row) or None (no rows).

    mysqlclient's query() reads the answer inside libmariadb, which retries a read that
    a signal interrupted, so a stop signal's Python handler ran only once the statement
    returned (up to GET_LOCK's timeout).  Here the query is sent (send_query), its
    answer awaited with poll() (a signal runs the handler at once, which may raise
    into the caller: the connection then has an unread answer and must be closed), then
    read (read_query_result, store_result: mysqlclient's own conversions).  Parameters
    are bound as the driver's cursor binds them (connection.literal)."""
    encoding = conn.encoding
    query = sql.encode(encoding)
    if params is not None:
        query = query % {key.encode(encoding): conn.literal(value)
                         for key, value in params.items()}
    conn.send_query(query)
    poller = select.poll()  # (not select(): a descriptor above 1023 is refused there)
    poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
    while not poller.poll(AWAIT_SLICE * 1000):
        pass
    conn.read_query_result()
    result = conn.store_result()
    if result is None:
        return None
    names = tuple(d[0] for d in result.describe())
    rows = result.fetch_row(1)
    return (names, rows[0]) if rows else None


@functools.cache
def _mariadb_get_info() -> Any:
    """mariadb_get_info of the C library mysqlclient is linked against (MariaDB
    Connector/C), or None (libmysqlclient has no way to read the status flags)."""
    MySQLdb = mysqlclient_module()
    if MySQLdb is None:
        return None
    try:
        func = ctypes.CDLL(MySQLdb._mysql.__file__).mariadb_get_info
    except (OSError, AttributeError):
        return None
    func.restype = ctypes.c_char
    func.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return func, get_pointer


def server_status(conn: Any) -> Optional[int]:
    """The status flags of the server's last OK answer on `conn`, or None when the driver
    does not tell (then a chained transaction is never trusted).

    pymysql keeps them as `server_status`; with mysqlclient they are read from the C
    library (MariaDB Connector/C's mariadb_get_info) through the native connection."""
    status = getattr(conn, "server_status", None)
    if isinstance(status, int):
        return status
    native = getattr(conn, "_get_native_connection", None)
    info = _mariadb_get_info() if native is not None else None
    if native is None or info is None:
        return None
    func, get_pointer = info
    try:
        pointer = get_pointer(native(), _CAPSULE_NAME)  # raises once the connection closed
    except Exception:
        return None
    value = ctypes.c_uint()
    if func(pointer, _MARIADB_CONNECTION_SERVER_STATUS, ctypes.byref(value)) != b"\x00":
        return None
    return value.value


def _classes(name: str) -> Tuple[Type[BaseException], ...]:
    import pymysql

    found = [getattr(pymysql.err, name)]
    MySQLdb = mysqlclient_module()
    if MySQLdb is not None:
        found.append(getattr(MySQLdb, name))
    return tuple(found)


def error_classes(*names: str) -> Tuple[Type[BaseException], ...]:
    """The exception classes called `names` (DB-API names: OperationalError, ...) of
    every MySQL driver installed."""
    return tuple(klass for name in names for klass in _classes(name))


def is_mysql_error(exc: BaseException) -> bool:
    """Whether `exc` was raised by a MySQL driver the library opens connections with."""
    return isinstance(exc, error_classes("MySQLError"))


def error_code(exc: BaseException) -> Optional[int]:
    """The MySQL error code of a driver exception (1146, 2013, ...), or None."""
    if not is_mysql_error(exc) or not exc.args:
        return None
    code = exc.args[0]
    return code if isinstance(code, int) else None
