"""SQL dialects: identifier quoting, capabilities and detection from a connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nsj_queue_lib.exceptions import ConfigError


@dataclass(frozen=True)
class Dialect:
    """What differs between databases, as named capabilities instead of scattered ifs."""

    name: str  # "postgres" or "mysql": also the folder of its SQL files
    quote_char: str
    returning: bool  # INSERT/UPDATE ... RETURNING
    listen_notify: bool  # LISTEN/NOTIFY and the notify-on-insert trigger
    advisory_locks: bool  # session advisory locks usable inside SQL

    def quote(self, identifier: str) -> str:
        """Quote one identifier (already validated: no quote characters inside)."""
        q = self.quote_char
        return f"{q}{identifier}{q}"

    def quote_table(self, name: str) -> str:
        """Quote 'table' or 'schema.table'."""
        return ".".join(self.quote(part) for part in name.split("."))


POSTGRES = Dialect("postgres", '"', returning=True, listen_notify=True, advisory_locks=True)
MYSQL = Dialect("mysql", "`", returning=False, listen_notify=False, advisory_locks=False)


def dialect_for_driver(driver: str) -> Dialect:
    """Dialect of a DB_DRIVER value (POSTGRES, MYSQL, SINGLE_STORE)."""
    if driver == "POSTGRES":
        return POSTGRES
    if driver in ("MYSQL", "SINGLE_STORE"):
        return MYSQL
    raise ConfigError(f"DB_DRIVER '{driver}' não suportado (use POSTGRES, MYSQL ou SINGLE_STORE).")


def detect_dialect(conn: Any) -> Dialect:
    """Detect the dialect of a DB-API connection (psycopg2, pymysql, mysql-connector).

    Wrappers exposing the raw connection as `.conn` are unwrapped; a subclass of a
    driver's connection class (a `connection_factory`) is that driver's.
    """
    raw = getattr(conn, "conn", conn)
    for klass in type(raw).__mro__:
        module = klass.__module__.split(".")[0]
        if module in ("psycopg2", "psycopg"):
            return POSTGRES
        if module in ("pymysql", "mysql", "MySQLdb", "mariadb"):
            return MYSQL
    raise ConfigError(
        f"Conexão de tipo {type(raw).__module__}.{type(raw).__name__} não suportada "
        "(use psycopg2, pymysql ou mysql-connector-python)."
    )
