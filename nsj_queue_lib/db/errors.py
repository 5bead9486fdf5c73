"""What a database error means, whatever the driver: `classify(exc) -> Fault`.

Code outside db/ and engine/ asks this module (or its backend's `classify`, which adds
the faults only a backend knows, such as TAKEN_OVER) instead of testing SQLSTATEs,
MySQL error numbers or driver exception classes itself
(tests/unit/test_engine_seam.py keeps it so).  Each dialect's mapping is one table
below; an error no table names is OTHER.

Connection loss is not a fault here: whether a connection survived an error depends
on the connection too (db/session.py `is_connection_error`).
"""

from __future__ import annotations

import enum
from typing import Dict

from nsj_queue_lib.db import mysql_driver


class Fault(enum.Enum):
    """The kinds of database errors the library reacts to."""

    NO_TABLE = "no_table"  # the statement's table does not exist
    NO_COLUMN = "no_column"  # a column it names does not exist
    # The statement does not fit the database otherwise (syntax, an undefined
    # function, no privilege): the DB-API's ProgrammingError.
    BAD_STATEMENT = "bad_statement"
    # MySQL refused a value of one statement (charset, length, collation) and left the
    # transaction as it was: the statement may be repeated with another value.
    VALUE_REFUSED = "value_refused"
    # The task's row is no longer this worker's (raised by a guard's SQL; only a backend
    # recognises it: engine classify).
    TAKEN_OVER = "taken_over"
    OTHER = "other"


# A missing table or column: what a queue not created, or not upgraded, looks like.
MISSING = frozenset({Fault.NO_TABLE, Fault.NO_COLUMN})
# A statement that does not match the database's schema or grants.
SCHEMA_MISMATCH = MISSING | {Fault.BAD_STATEMENT}

# PostgreSQL: SQLSTATE -> fault.
POSTGRES_FAULTS: Dict[str, Fault] = {
    "42P01": Fault.NO_TABLE,  # undefined_table
    "42703": Fault.NO_COLUMN,  # undefined_column
}

# MySQL / MariaDB: error number -> fault.
MYSQL_FAULTS: Dict[int, Fault] = {
    1146: Fault.NO_TABLE,  # ER_NO_SUCH_TABLE
    1054: Fault.NO_COLUMN,  # ER_BAD_FIELD_ERROR
    1366: Fault.VALUE_REFUSED,  # ER_TRUNCATED_WRONG_VALUE_FOR_FIELD ("Incorrect string value")
    1406: Fault.VALUE_REFUSED,  # ER_DATA_TOO_LONG
    1267: Fault.VALUE_REFUSED,  # ER_CANT_AGGREGATE_2COLLATIONS
    1270: Fault.VALUE_REFUSED,  # ER_CANT_AGGREGATE_3COLLATIONS
    1271: Fault.VALUE_REFUSED,  # ER_CANT_AGGREGATE_NCOLLATIONS
    1300: Fault.VALUE_REFUSED,  # ER_INVALID_CHARACTER_STRING
}


def classify(exc: BaseException) -> Fault:
    """The fault `exc` reports (OTHER for anything not a known database error)."""
    if mysql_driver.is_mysql_error(exc):
        return classify_mysql(exc)
    return classify_postgres(exc)


def classify_postgres(exc: BaseException) -> Fault:
    """psycopg2's errors, by SQLSTATE, then by DB-API class."""
    fault = POSTGRES_FAULTS.get(getattr(exc, "pgcode", None) or "")
    if fault is not None:
        return fault
    import psycopg2

    return Fault.BAD_STATEMENT if isinstance(exc, psycopg2.ProgrammingError) else Fault.OTHER


def classify_mysql(exc: BaseException) -> Fault:
    """pymysql's and mysqlclient's errors, by error number, then by DB-API class."""
    code = mysql_driver.error_code(exc)
    fault = MYSQL_FAULTS.get(code) if code is not None else None
    if fault is not None:
        return fault
    if isinstance(exc, mysql_driver.error_classes("ProgrammingError")):
        return Fault.BAD_STATEMENT
    return Fault.OTHER


def server_message(exc: BaseException) -> str:
    """The database's own message, without the driver's decoration: MySQL's drivers
    keep (number, text) in `args`; psycopg2 its text.  First line only."""
    if mysql_driver.is_mysql_error(exc) and len(exc.args) > 1:
        return str(exc.args[1])
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
