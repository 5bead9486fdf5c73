"""MySQL native: one idle worker per queue polls; the others wait for their turn.

Without this, every idle worker polls the index probe every QUEUE_POLL_INTERVAL
(faster after activity) and reads the HALT request every HALT_CHECK seconds, so an
idle fleet's statements grow with its size (32 idle workers: about 380 per second,
and each one that sees a due task runs a claim).  With it, the idle workers of a
queue take turns through one session named lock (the "idle turn"):

* the holder polls the probe, as a lone worker did; the probe statement reads the
  HALT request too when it is due (and the pause flag), and, when a task is due,
  releases the turn in the same statement, so the next idle worker takes over polling
  while the holder claims;
* every other idle worker waits inside the server in a blocking
  `GET_LOCK(turn, TURN_WAIT)` (2 s), which reads the HALT request once the wait is
  over: one statement per TURN_WAIT, no polling.  A holder that stops (HALT, SIGTERM)
  hands the turn on, and the next one sees the HALT (or its own stop request) at once;
* a new holder waits half of QUEUE_POLL_INTERVAL before its first probe, so the claim
  of the worker that handed the turn on has committed (its task is no longer seen as
  due) and, under steady arrivals, one wake-up serves the tasks of that half interval;
* due rows that no claim gets (held by another worker's open transaction: a running
  batch) make the worker that announced them back off, as PostgreSQL's busy back-off
  (2 ms doubling to 1 s); while backing off, a holder's probe keeps the turn, so the
  fleet does not pass it round, each worker probing and claiming in vain.

MariaDB's GET_LOCK waits fractions of a second; MySQL's takes whole seconds (it reads
the timeout as an integer, so 0.3 would become no wait at all and a waiter would spin
through GET_LOCK statements): there a wait is rounded UP to whole seconds, so a waiter
sends one statement per second and reads HALT every second.

The named lock dies with its connection: a holder killed with kill -9 is replaced
by the next waiter as soon as the server notices the closed connection.  The turn
is taken on the connection the worker already has (the consumer's, or the
QUEUE_CONCURRENCY listener's): no connection is added.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Optional, Tuple

from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.server_version import is_mariadb
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import admin_lock_key
from nsj_queue_lib.engine.keys import ADMIN_LISTENER
from nsj_queue_lib.exceptions import DatabaseUnavailable

logger = logging.getLogger(__name__)


def turn_lock_name(prefix: str, queue_table: str) -> str:
    """The named lock of a queue's idle turn (`prefix`: mysql.lock_prefix)."""
    key = admin_lock_key(queue_table, ADMIN_LISTENER)
    return f"{prefix}{key[0]}:{key[1]}"


def fractional_lock_waits(session: DbSession) -> bool:
    """True when the server's GET_LOCK waits fractions of a second (MariaDB >= 10.1.2);
    False for MySQL (whole seconds) and when the server is unknown.  Read from the
    connection's handshake: no statement."""
    conn = session.conn
    version = getattr(conn, "server_version", None)
    if version is None and hasattr(conn, "get_server_info"):
        version = conn.get_server_info()
    return is_mariadb(str(version or ""))


class IdleTurn:
    """The idle turn of one queue on one MySQL session (a named lock)."""

    def __init__(self, session: DbSession, queue_table: str, name: str, has_due_sql: str,
                 control: bool = True, fractional: Optional[bool] = None) -> None:
        self.session = session
        self.name = name  # the named lock (see mysql.lock_name)
        # GET_LOCK takes fractions of a second (MariaDB), else whole seconds (MySQL).
        self.fractional = fractional_lock_waits(session) if fractional is None else fractional
        q = Queries(session.dialect, queue_table, filename="turn.sql")
        has_due = has_due_sql.strip()
        self._wait_sql = q["turn_wait"] if control else q["turn_wait_no_control"]
        # With a control table the probe also reads the pause flag (see turn.sql).
        pause = (" " + q["turn_pause_columns"].strip()) if control else ""
        self._probe_sql = q["turn_probe"].replace("{has_due}", has_due) + pause
        self._probe_halt_sql = q["turn_probe_halt"].replace("{has_due}", has_due) + pause
        self._probe_keep_sql = q["turn_probe_keep"].replace("{has_due}", has_due) + pause
        self._probe_keep_halt_sql = (q["turn_probe_keep_halt"].replace("{has_due}", has_due)
                                     + pause)
        self._release_sql = q["turn_release"]
        self.held = False
        # (pausada, motivo) read by the last probe; None without a control table.
        self.pause: Optional[Tuple[bool, Any, Any, Any]] = None
        # Statements sent (for tests and diagnostics): waits and probes.
        self.waits = 0
        self.probes = 0

    @classmethod
    def for_queue(cls, session: DbSession, queue_table: str, prefix: str, has_due_sql: str,
                  control: bool) -> IdleTurn:
        return cls(session, queue_table, turn_lock_name(prefix, queue_table), has_due_sql,
                   control)

    def wait(self, seconds: float) -> Tuple[bool, Any]:
        """Wait up to `seconds` for the turn inside the server; (granted, HALT time read)."""
        self.waits += 1
        # (its answer awaited in Python: a SIGTERM ends the wait at once, on either driver)
        row = self.session.fetch_one_interruptible(
            self._wait_sql, {"turn": self.name, "wait": self.wait_argument(seconds)})
        self.held = bool(row and row["got"] == 1)
        return self.held, row["halt_at"] if row else None

    def wait_argument(self, seconds: float) -> Any:
        """GET_LOCK's timeout for a wait of `seconds`: milliseconds on MariaDB; whole
        seconds, rounded up, on MySQL (never a fraction it would round down to 0)."""
        wait = round(max(0.0, seconds), 3)
        if self.fractional or wait <= 0:
            return wait
        return math.ceil(wait)

    def probe(self, read_halt: bool, keep: bool = False) -> Tuple[bool, Any]:
        """The holder's poll: (a task is due, HALT time read or None).  A due task also
        hands the turn on, in the same statement, unless `keep` (a holder backing off)."""
        self.probes += 1
        if keep:
            sql = self._probe_keep_halt_sql if read_halt else self._probe_keep_sql
        else:
            sql = self._probe_halt_sql if read_halt else self._probe_sql
        row = self.session.fetch_one(sql, {"turn": self.name})
        due = bool(row and row["due"])
        if row and "pausada" in row:
            self.pause = (bool(row["pausada"]), row["motivo"], None, row.get("agenda"))
        if due and not keep:
            self.held = False
        return due, row["halt_at"] if row else None

    def release(self) -> None:
        """Hand the turn on (no-op when not held)."""
        if not self.held:
            return
        self.held = False
        try:
            self.session.fetch_value(self._release_sql, {"turn": self.name})
        except DatabaseUnavailable:
            pass  # the session is gone, and its lock with it

