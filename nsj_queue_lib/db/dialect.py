"""SQL dialects: identifier quoting, capabilities and detection from a connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

from nsj_queue_lib.exceptions import ConfigError

# Words that differ between dialects, so that a query whose logic is the same is written
# once in sql/common (db/queries.py fills them in once per queue, when it renders the
# statements): {now} is the current time (columns hold UTC on MySQL), casts a PostgreSQL
# parameter needs are empty on MySQL, and RETURNING id is PostgreSQL's way to the new
# row's id (MySQL's is the cursor's lastrowid).
DIALECT_WORDS: Dict[str, Dict[str, str]] = {
    "postgres": {
        "now": "now()",
        "seconds_since_data_hora": "extract(epoch FROM (now() - data_hora))",
        "hours_ago": "now() - %(hours)s * interval '1 hour'",
        "seconds_ago": "now() - %(seconds)s * interval '1 second'",
        "data_hora_or_now": "coalesce(%(data_hora)s::timestamptz, now())",
        "delay_from_now": "clock_timestamp() + %(delay)s * interval '1 second'",
        "system_schemas": "'pg_catalog', 'information_schema'",
        "returning_id": "RETURNING id",
        "as_varchar": "::varchar", "as_int8": "::int8", "as_boolean": "::boolean",
    },
    "mysql": {
        "now": "UTC_TIMESTAMP(6)",
        "seconds_since_data_hora":
            "TIMESTAMPDIFF(MICROSECOND, data_hora, UTC_TIMESTAMP(6)) / 1000000",
        "hours_ago": "UTC_TIMESTAMP(6) - INTERVAL %(hours)s HOUR",
        "seconds_ago": "UTC_TIMESTAMP(6) - INTERVAL ROUND(%(seconds)s * 1000000) MICROSECOND",
        "data_hora_or_now": "coalesce(CAST(%(data_hora)s AS DATETIME(6)), UTC_TIMESTAMP(6))",
        "delay_from_now": "UTC_TIMESTAMP(6) + INTERVAL ROUND(%(delay)s * 1000000) MICROSECOND",
        "system_schemas": "'mysql', 'information_schema', 'performance_schema', 'sys'",
        "returning_id": "",
        "as_varchar": "", "as_int8": "", "as_boolean": "",
    },
}


@dataclass(frozen=True)
class Dialect:
    """What differs between databases, as named capabilities instead of scattered ifs."""

    name: str  # "postgres" or "mysql": the folder of its SQL files (never compared)
    quote_char: str
    returning: bool  # INSERT/UPDATE ... RETURNING
    listen_notify: bool  # LISTEN/NOTIFY and the notify-on-insert trigger
    advisory_locks: bool  # session advisory locks usable inside SQL
    # nsj-queue-lib 1.2.2 workers may share the queue (1.2.2 runs on PostgreSQL only): the
    # mixed-fleet mode, its column in the control row and the look for 1.2.2 sessions
    mixed_fleet: bool
    # a list parameter is bound as one array (= ANY(%(ids)s), unnest(...)); else the
    # repository writes one placeholder per item (IN (...), multi-row VALUES)
    array_params: bool
    # the driver answers which rows lock how without asking the server: SKIP LOCKED always
    # (else db/server.py reads the server's version)
    skip_locked_always: bool
    # a deadlock rolls the whole transaction back while the client, whose error answer
    # carries no status, still believes it open (InnoDB): a statement after it tells
    silent_rollback: bool
    # SAVEPOINT x replaces an earlier savepoint of the same name (MySQL); on PostgreSQL
    # they stack, so the earlier one is released first
    savepoint_replaces: bool
    # the default isolation's locking range reads lock index gaps (InnoDB at REPEATABLE
    # READ): batch claims switch the session to READ COMMITTED
    gap_locks: bool
    # a statement's size is bounded by the server's max_allowed_packet (MySQL); on
    # PostgreSQL by the largest text literal (task_input.SizeRule)
    packet_limit: bool
    # an unquoted identifier is stored in lower case (PostgreSQL; db/identifiers.py)
    folds_lower: bool

    @property
    def words(self) -> Dict[str, str]:
        """The dialect's DIALECT_WORDS: {now} and the like in its SQL."""
        return DIALECT_WORDS[self.name]

    def quote(self, identifier: str) -> str:
        """Quote one identifier (already validated: no quote characters inside)."""
        q = self.quote_char
        return f"{q}{identifier}{q}"

    def quote_table(self, name: str) -> str:
        """Quote 'table' or 'schema.table'."""
        return ".".join(self.quote(part) for part in name.split("."))


POSTGRES = Dialect("postgres", '"', returning=True, listen_notify=True, advisory_locks=True,
                   mixed_fleet=True, array_params=True, skip_locked_always=True,
                   silent_rollback=False,
                   savepoint_replaces=False, gap_locks=False, packet_limit=False,
                   folds_lower=True)
MYSQL = Dialect("mysql", "`", returning=False, listen_notify=False, advisory_locks=False,
                mixed_fleet=False, array_params=False, skip_locked_always=False,
                silent_rollback=True,
                savepoint_replaces=True, gap_locks=True, packet_limit=True,
                folds_lower=False)
# By name (db/identifiers.py's rules take the name: config resolves names with them).
DIALECTS = {d.name: d for d in (POSTGRES, MYSQL)}


def dialect_for_driver(driver: str) -> Dialect:
    """Dialect of a DB_DRIVER value (POSTGRES, MYSQL, SINGLE_STORE).  (The one place a
    driver name is compared: it is what picks the dialect object.)"""
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
