"""The queue's control row (`<fila>_controle`): pause, HALT requests, fleet mode.

Written by the operator's API (admin.QueueAdmin) and read by the backends (MySQL
native workers poll it for HALT).  Both reach it through this module, so a backend
never imports the admin layer above it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional

from nsj_queue_lib.db.names import control_table_name
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import ControlTableMissing


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
