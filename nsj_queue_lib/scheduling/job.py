"""The workers' schedule job: an `AdminJobs` job (runtime/maintenance.py) that every
worker process runs between two tasks and at the end of idle waits.

It costs nothing while the queue has no schedule.  The control row, which the worker
reads anyway with the pause flag, says when the queue's next slot falls
(scheduling/hint.py): the job is due then, or when that value changes (a schedule added,
replaced or removed).  It then reads the database's clock and the earliest next slot
(one small statement), takes the due slots (`ScheduleStore.run_due`: exactly one task per
slot whatever the number of workers) and plans its next run for the next slot.  While the
queue is paused no slot is taken (looked at again every PAUSED_RECHECK seconds); on resume
the missed slots count as downtime (catch-up rule).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Collection, Optional

from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import DatabaseUnavailable
from nsj_queue_lib.scheduling.hint import ScheduleHint, hint_for
from nsj_queue_lib.scheduling.store import ScheduleStore

logger = logging.getLogger(__name__)

PAUSED_RECHECK = 1.0  # seconds between looks while the queue is paused
FAILED_RECHECK = 60.0  # seconds after a look that failed (no <fila>_agenda table, ...)
PLAN_MAX = 60.0  # seconds: the longest the job trusts its own plan without a look


class ScheduleJob:
    """Runs the queue's schedules (the `Job` protocol of runtime/maintenance.py)."""

    name = "agenda"
    on_demand = True  # (its delay changes with what the control row says)

    def __init__(self, queue_table: str, hint: Optional[ScheduleHint] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.queue_table = queue_table
        self.hint = hint or hint_for(queue_table)
        self.clock = clock
        self._plan: Optional[float] = None  # monotonic time of the next look it planned
        self._version = 0  # the hint's version the job last acted on
        self._stores: dict = {}
        self.inserted = 0  # (for tests and diagnostics)
        self.looks = 0

    def next_delay(self) -> float:
        now = self.clock()
        due = float("inf")
        if self.hint.version != self._version:  # a change: look at its time (or at once)
            due = now if self.hint.deadline is None else self.hint.deadline
        if self._plan is not None:
            due = min(due, self._plan)
        return max(0.0, due - now)

    def _store(self, session: DbSession) -> ScheduleStore:
        store = self._stores.get(id(session))
        if store is None or store.session is not session:
            store = self._stores[id(session)] = ScheduleStore(session, self.queue_table)
        return store

    def run_slot(self, session: DbSession, busy: Collection[int] = ()) -> None:
        self._version = self.hint.version
        self._plan = None
        self.looks += 1
        try:
            store = self._store(session)
            state = store.poll()
            agora, proximo = state["agora"], state["proximo"]
            self.hint.note(proximo)  # (what it read is news to this worker's hint too)
            self._version = self.hint.version
            if proximo is None:
                return  # no schedule: nothing planned until the control row says otherwise
            if state["pausada"]:
                self._plan = self.clock() + PAUSED_RECHECK
                return
            if proximo <= agora:
                self.inserted += store.run_due(agora)
                self._plan = self.clock()  # look again at once for the next slot
                return
            self._plan = self.clock() + min(PLAN_MAX, (proximo - agora).total_seconds())
        except DatabaseUnavailable:
            self._plan = self.clock() + FAILED_RECHECK
            raise
        except Exception as exc:
            self._plan = self.clock() + FAILED_RECHECK
            logger.warning("agenda: leitura dos agendamentos falhou (%s); nova tentativa em "
                           "%.0f s (a fila tem a tabela <fila>_agenda? nsj-queue schema "
                           "upgrade a cria)", _first_line(exc), FAILED_RECHECK)
            if session.in_transaction:
                session.rollback()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
