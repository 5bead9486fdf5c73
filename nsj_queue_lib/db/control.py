"""The queue's control row (`<fila>_controle`): pause, HALT requests, fleet mode.

Written by the operator's API (admin.QueueAdmin) and read by the backends (MySQL
native workers poll it for HALT).  Both reach it through this module, so a backend
never imports the admin layer above it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Dict, Iterator, Optional

from nsj_queue_lib.db.names import control_table_name
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import ControlTableMissing, DatabaseUnavailable

logger = logging.getLogger(__name__)


def autocommit(conn: Any) -> bool:
    """Whether a DB-API connection is in autocommit mode, whatever its driver."""
    getter = getattr(conn, "get_autocommit", None)  # pymysql (its .autocommit is a setter)
    if callable(getter):
        return bool(getter())
    return bool(getattr(conn, "autocommit", False))  # psycopg2, mysql-connector


@contextlib.contextmanager
def atomic(session: DbSession) -> Iterator[None]:
    """A transaction of its own around a write, unless the caller already has one.

    A transaction already open on the connection is the caller's, even in autocommit
    mode: the task's own (bd_conn, whose session is the worker's), or a BEGIN the
    server reports.  A BEGIN/COMMIT of its own would commit the task's work so far."""
    if (autocommit(session.conn) and not session.in_transaction
            and not session.transaction_usable()):
        with session.transaction():
            yield
    else:
        yield  # the caller's transaction


class ControlRow:
    """The control row of one queue on one session.  `queue_table` must be validated."""

    def __init__(self, session: DbSession, queue_table: str,
                 queries: Optional[Queries] = None) -> None:
        self.session = session
        self.queue_table = queue_table
        self.table = control_table_name(queue_table)
        self.q = queries or Queries(session.dialect, queue_table, filename="admin.sql")

    def exists(self) -> bool:
        """Whether the control table exists (queues created before 2.1 lack it)."""
        *schema, table = self.table.split(".")
        return bool(self.session.fetch_value(
            self.q["control_table_exists"],
            {"schema": schema[0] if schema else None, "name": table}))

    def pause_state(self, control_known: bool = False) -> Dict[str, Any]:
        """{"pausada": bool, "motivo", "alterado_por", "alterado_em", "compat_1_2_2",
        "controle": bool}.

        "controle" is False when the queue has no control table yet (created by
        db_gen from version 2.1, or by `nsj-queue schema upgrade`): never paused then.
        `control_known`: the caller saw the table before, so its existence is not
        checked again (one statement instead of two; a dropped table raises).
        """
        if not control_known and not self.exists():
            return {"pausada": False, "motivo": None, "alterado_por": None,
                    "alterado_em": None, "controle": False}
        row = self.session.fetch_one(self.q["queue_pause_get"])
        state = dict(row) if row else {"pausada": False, "motivo": None,
                                       "alterado_por": None, "alterado_em": None}
        for key in ("pausada", "compat_1_2_2"):  # MySQL returns booleans as 0/1
            if state.get(key) is not None:
                state[key] = bool(state[key])
        state["pausada"] = bool(state.get("pausada"))  # (MySQL: no row id = 1 yet)
        state["controle"] = True
        return state

    def write(self, query: str, params: Dict[str, Any]) -> None:
        """Run the named write of admin.sql on the row, in a transaction (see atomic)."""
        if not self.exists():
            raise ControlTableMissing(
                f"A fila {self.queue_table} não tem a tabela de controle {self.table}: "
                "crie-a com `nsj-queue schema upgrade` (ou aplique o CREATE TABLE "
                f"{self.table} da saída do db_gen)")
        with atomic(self.session):
            self.session.execute(self.q[query], params)

    def request_halt(self, por: Optional[str] = None) -> None:
        """MySQL native mode: write a HALT request, timed by the database."""
        self.write("queue_halt_set", {"por": por})

    def halt_requested_at(self) -> Any:
        """MySQL native mode: the database time of the last HALT request (None: never).
        Needs the control table (`exists()`)."""
        return self.session.fetch_value(self.q["queue_halt_get"])


# -- mixed-fleet mode (engine/fleet_mode.py: what it is, one per queue and process) --

class FleetMode:
    """The current mode of one queue as this process knows it (shared by its threads)."""

    def __init__(self, queue_table: str, *, override: Optional[bool] = None,
                 possible: bool = True) -> None:
        self.queue_table = queue_table
        self.override = override  # QUEUE_COMPAT_1_2_2 (None: unset)
        self.possible = possible  # PostgreSQL coordinated by itself (not client/server)
        self._stored: Optional[bool] = None  # the queue's value; None: not read yet

    @classmethod
    def fixed(cls, mixed: bool) -> FleetMode:
        """A mode that never changes (tools and tests that pass a plain flag)."""
        return cls("", override=bool(mixed))

    @property
    def mixed(self) -> bool:
        """True while this worker must also hold 1.2.2's keys."""
        if not self.possible:
            return False
        if self.override is not None:
            return self.override
        return self._stored is not False

    @property
    def unread(self) -> bool:
        """The queue decides and has not been read yet (a tool or a task's code that uses
        a repository before any claim: it reads the mode on its own session first)."""
        return self.possible and self.override is None and self._stored is None

    @property
    def stored(self) -> Optional[bool]:
        """The queue's own value at the last read (None: not read yet)."""
        return self._stored

    @property
    def source(self) -> str:
        """Where the mode comes from, for status lines."""
        if not self.possible:
            return "não se aplica"
        return "QUEUE_COMPAT_1_2_2" if self.override is not None else "fila"

    def note(self, stored: Optional[bool]) -> None:
        """A read of the queue's control row: its compat_1_2_2 value, or None when there
        is no row, no column or no control table (mixed-fleet mode)."""
        before = self.mixed
        self._stored = True if stored is None else bool(stored)
        after = self.mixed
        if after != before and self.override is None and self.possible:
            if after:
                logger.warning("Fila %s em modo de frota mista com a 1.2.2: este worker "
                               "passa a segurar também as chaves da 1.2.2",
                               self.queue_table)
            else:
                logger.info("Fila %s fora do modo de frota mista: só workers 2.x a "
                            "consomem", self.queue_table)


def _in_transaction_block(session: Any) -> bool:
    status = getattr(session.conn, "get_transaction_status", None)  # psycopg2
    return bool(session.in_transaction or (callable(status) and status() != 0))


def read_stored_mode(session: Any, queue_table: str) -> Optional[bool]:
    """The queue's compat_1_2_2 (None: no row, no column or no control table).  Inside a
    transaction (a task's, a producer's) the read runs in a savepoint: a queue without a
    control table must not abort the caller's transaction."""
    sql = Queries(session.dialect, queue_table, filename="admin.sql")["queue_pause_get"]
    savepoint = _in_transaction_block(session)
    try:
        if savepoint:
            session.execute("SAVEPOINT nsjq_fleet_mode")
        row = session.fetch_one(sql)
        if savepoint:
            session.execute("RELEASE SAVEPOINT nsjq_fleet_mode")
    except DatabaseUnavailable:
        raise
    except Exception as exc:  # no control table (1.2.2's, an early 2.x): mixed-fleet
        logger.debug("Modo de frota mista não lido: %s", exc)
        if savepoint:
            session.execute("ROLLBACK TO SAVEPOINT nsjq_fleet_mode")
        return None
    if row is None or row.get("compat_1_2_2") is None:
        return None
    return bool(row["compat_1_2_2"])
