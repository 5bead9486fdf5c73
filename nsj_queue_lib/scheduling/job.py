"""The workers' schedule job: an `AdminSlots` job (runtime/maintenance.py) that every
worker process runs between two tasks and at the end of idle waits.

About once a second (POLL) it reads the database's clock and the earliest next slot of
the queue's schedules (one small statement), so a schedule added or removed takes effect
within a second; when a slot is nearer than that, it plans its next look for the slot's
time.  The due slots are taken by `ScheduleStore.run_due` (exactly one task per slot
whatever the number of workers).  While the queue is paused no slot is taken; on resume
the missed slots count as downtime (catch-up rule).  A queue without the `<fila>_agenda`
table (not upgraded yet) is looked at again every MISSING_RECHECK seconds.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Collection, Optional

from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import DatabaseUnavailable
from nsj_queue_lib.scheduling.store import ScheduleStore

logger = logging.getLogger(__name__)

POLL = 1.0  # seconds between two looks at the schedules
MISSING_RECHECK = 600.0


class ScheduleJob:
    """Runs the queue's schedules (the `Job` protocol of runtime/maintenance.py)."""

    name = "agenda"
    on_demand = False

    def __init__(self, queue_table: str, poll: float = POLL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.queue_table = queue_table
        self.poll = poll
        self.clock = clock
        self._delay = 0.0  # the first look at once
        self._stores: dict = {}
        self.inserted = 0  # (for tests and diagnostics)

    def next_delay(self) -> float:
        return self._delay

    def _store(self, session: DbSession) -> ScheduleStore:
        store = self._stores.get(id(session))
        if store is None or store.session is not session:
            store = self._stores[id(session)] = ScheduleStore(session, self.queue_table)
        return store

    def run_slot(self, session: DbSession, busy: Collection[int] = ()) -> None:
        self._delay = self.poll
        try:
            store = self._store(session)
            state = store.poll()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            self._delay = MISSING_RECHECK
            logger.info("agenda: tabela dos agendamentos indisponível (%s); tarefas "
                        "periódicas desligadas por %.0f s (crie-a com nsj-queue schema "
                        "upgrade)", _first_line(exc), MISSING_RECHECK)
            if session.in_transaction:
                session.rollback()
            return
        agora, proximo = state["agora"], state["proximo"]
        if proximo is None or state["pausada"]:
            return
        if proximo <= agora:
            self.inserted += store.run_due(agora)
            return
        self._delay = min(self.poll, (proximo - agora).total_seconds())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def schedule_job(queue_table: str, poll: Optional[float] = None) -> ScheduleJob:
    return ScheduleJob(queue_table, POLL if poll is None else poll)
