"""What the connected server's version offers for row locks: SKIP LOCKED, NOWAIT or neither.

MySQL native mode needs `FOR UPDATE SKIP LOCKED` (MySQL >= 8.0, MariaDB >= 10.6); the
client/server mode runs on older servers and on SingleStore too, and its one row-lock
statement that must not wait (the rescue's fence, `TaskRepository.task_try_lock_row`)
takes the form the server has:

* `SKIP_LOCKED`: PostgreSQL, MySQL >= 8.0, MariaDB >= 10.6;
* `NOWAIT` (fails at once on a held row): MariaDB 10.3 to 10.5;
* `LOCK_WAIT` (MySQL 5.7, MariaDB < 10.3) and `LOCK_WAIT_SINGLESTORE`: a plain
  `FOR UPDATE` under a one-second session lock wait (innodb_lock_wait_timeout;
  SingleStore's row locks obey lock_wait_timeout), the session's own value restored.

The version rule is written here once; native mode refuses what lacks SKIP LOCKED.
"""

from __future__ import annotations

import re
from typing import Tuple

from nsj_queue_lib.db.session import DbSession

SKIP_LOCKED = "skip_locked"
NOWAIT = "nowait"
LOCK_WAIT = "lock_wait"
LOCK_WAIT_SINGLESTORE = "lock_wait_singlestore"

MIN_MYSQL = (8, 0)  # SKIP LOCKED (and NOWAIT)
MIN_MARIADB = (10, 6)  # SKIP LOCKED
MIN_MARIADB_NOWAIT = (10, 3)

_MODE = "row_lock_mode"  # key of the detected mode in DbSession.server


def version_numbers(version: str) -> Tuple[int, ...]:
    """(major, minor) of a VERSION() string ('10.11.19-MariaDB-...'); () if unreadable."""
    if version.startswith("5.5.5-"):  # MariaDB's handshake prefix (not in VERSION())
        version = version[6:]
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
    return numbers if len(numbers) == 2 else ()


def is_mariadb(version: str) -> bool:
    return "mariadb" in version.lower()


def has_skip_locked(version: str, singlestore: bool) -> bool:
    """FOR UPDATE SKIP LOCKED: MySQL >= 8.0, MariaDB >= 10.6; SingleStore never."""
    if singlestore:
        return False
    numbers = version_numbers(version)
    return bool(numbers) and numbers >= (MIN_MARIADB if is_mariadb(version) else MIN_MYSQL)


def row_lock_mode(version: str, singlestore: bool) -> str:
    """The mode of a MySQL-family server (module docstring)."""
    if singlestore:
        return LOCK_WAIT_SINGLESTORE
    if has_skip_locked(version, singlestore):
        return SKIP_LOCKED
    numbers = version_numbers(version)
    if is_mariadb(version) and numbers and numbers >= MIN_MARIADB_NOWAIT:
        return NOWAIT
    return LOCK_WAIT


def is_singlestore(session: DbSession) -> bool:
    """SingleStore answers VERSION() like a MySQL; only it has @@memsql_version."""
    try:
        return session.fetch_value("SELECT @@memsql_version") is not None
    except Exception:
        return False


def session_row_lock_mode(session: DbSession, singlestore: bool = False) -> str:
    """The row-lock mode of the session's server, read once per session and kept in
    `session.server` (PostgreSQL: SKIP_LOCKED, no query).  `singlestore`: known from
    DB_DRIVER=SINGLE_STORE (else asked of the server)."""
    mode = session.server.get(_MODE)
    if mode is None:
        if session.dialect.skip_locked_always:
            mode = SKIP_LOCKED
        else:
            version = str(session.fetch_value("SELECT VERSION()") or "")
            mode = row_lock_mode(version, singlestore or is_singlestore(session))
        session.server[_MODE] = mode
    return mode
