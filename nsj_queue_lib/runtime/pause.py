"""PauseGate: the worker's view of `nsj-queue pause` (the queue's control table)."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

from nsj_queue_lib.config import validate_table_name
from nsj_queue_lib.db.control import ControlRow
from nsj_queue_lib.db.limits import LimitsHint
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.fleet_mode import FleetMode
from nsj_queue_lib.exceptions import DatabaseUnavailable
from nsj_queue_lib.scheduling.hint import hint_for

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 0.5  # seconds a read of the pause flag is trusted before claiming
MISSING_RECHECK = 60.0  # seconds between looks for a control table that does not exist
# Seconds between two reads of the row itself even while other statements refresh the flag
# (`note`: they read the pause flag, not the concurrency-limits flag).
FULL_READ_EVERY = 2.0


class PauseGate:
    """Answers "is the queue paused?" from the control table, read at most every
    CHECK_INTERVAL seconds on the consumer's own session (autocommit, between tasks).

    A queue without a control table (created before 2.1 and not upgraded) is never
    paused; the table is looked for again every MISSING_RECHECK seconds.

    The same row carries the queue's mixed-fleet mode: each read is noted in `fleet`
    (engine/fleet_mode.py), so the claims follow a change within about a second.
    """

    def __init__(self, session: DbSession, queue_table: str,
                 clock: Callable[[], float] = time.monotonic,
                 fleet: Optional[FleetMode] = None,
                 limits: Optional[LimitsHint] = None) -> None:
        self.control = ControlRow(session, validate_table_name(
            queue_table, "QUEUE_TABLE", session.dialect.name))
        # The same row says when the next schedule slot falls (scheduling/hint.py).
        self.schedules = hint_for(self.control.queue_table)
        # And whether the queue has concurrency limits (db/limits.py).
        # (the guard's, which claims by it; else one of its own)
        self.limits = limits if limits is not None else LimitsHint()
        self.fleet = fleet
        self.clock = clock
        self.paused = False
        self.reason: Optional[str] = None
        self._checked_at: Optional[float] = None
        self._read_at: Optional[float] = None  # the last read of the row by this gate
        self._missing = False
        self._seen = False  # the control table existed at the last read

    def is_paused(self) -> bool:
        now = self.clock()
        trust = MISSING_RECHECK if self._missing else CHECK_INTERVAL
        if (self._checked_at is not None and now - self._checked_at < trust
                and (self._missing or (self._read_at is not None
                                       and now - self._read_at < FULL_READ_EVERY))):
            return self.paused
        self._checked_at = self._read_at = now
        try:
            # Once the control table was seen, only the flag is read (one statement).
            state = self.control.pause_state(control_known=self._seen)
        except DatabaseUnavailable:
            raise
        except Exception as exc:  # no privilege on the table, odd schema: never block work
            logger.warning("Não foi possível ler a pausa da fila (%s); seguindo sem pausa",
                           str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
            state = {"pausada": False, "motivo": None, "controle": False, "erro": True}
        self._missing = not state["controle"]
        self._seen = bool(state["controle"])
        self._update(bool(state["pausada"]), state.get("motivo"))
        if self.fleet is not None:
            self.fleet.note(state.get("compat_1_2_2"))
        if "agenda_proximo" in state:
            self.schedules.note(state["agenda_proximo"])
        if not state.get("erro"):  # (a failed read keeps what the last one said)
            self.limits.note(state.get("limites"), state.get("ordenacao"))
        return self.paused

    @property
    def flag_sql(self) -> str:
        """The SELECT of the flag (columns pausada, motivo, compat_1_2_2), for a statement
        that reads it together with other things."""
        return self.control.q["queue_pause_get"]

    @property
    def control_seen(self) -> bool:
        """The control table existed at the last read (its flag can be read directly)."""
        return self._seen

    def note(self, paused: bool, reason: Optional[str],
             compat: Optional[bool] = None, schedule: Any = None) -> None:
        """A fresh read of the row made by another statement (the listener turn's, the
        MySQL idle turn's): the flag, the fleet mode and the next schedule slot."""
        self._checked_at = self.clock()
        self._update(bool(paused), reason)
        if self.fleet is not None:
            self.fleet.note(compat)
        self.schedules.note(schedule)

    def _update(self, paused: bool, reason: Optional[str]) -> None:
        if paused and not self.paused:
            logger.warning("Fila %s pausada%s: o worker não pega novas tarefas até o resume",
                           self.control.queue_table, f" ({reason})" if reason else "")
        elif self.paused and not paused:
            logger.info("Fila %s retomada: o worker volta a pegar tarefas",
                        self.control.queue_table)
        self.paused, self.reason = paused, reason
