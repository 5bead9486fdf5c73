"""The worker's view of the queue's next schedule slot, as the control row says.

`schedule add/remove` and every slot taken write the earliest next slot of the queue's
schedules into the control row (PostgreSQL: `<fila>_controle.agenda_proximo`; MySQL: the
row id = 3's `alterado_em`).  The worker reads that row anyway (the pause flag, before
claiming or in the idle turn's statement), and notes the value here: so a queue without
schedules costs its workers no statement at all, and the schedule job (scheduling/job.py)
knows when the next slot falls without polling.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from typing import Any, Dict, Optional

UTC = _dt.timezone.utc
# The origem of a slot's task: a worker that claims one knows the queue has schedules.
SCHEDULE_ORIGIN = "nsj-queue agenda"


def _as_utc(value: Any) -> Optional[_dt.datetime]:
    if value is None:
        return None
    if isinstance(value, str):  # (a JSON answer: the PostgreSQL listener turn's)
        value = _dt.datetime.fromisoformat(value)
    if not isinstance(value, _dt.datetime):
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class ScheduleHint:
    """The last value seen, and the monotonic time it falls at on this worker's clock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value: Optional[_dt.datetime] = None
        self.deadline: Optional[float] = None
        self.version = 0  # bumped at every change (the job runs once per change)

    def note(self, value: Any) -> None:
        at = _as_utc(value)
        with self._lock:
            if at == self.value:
                return
            self.value = at
            self.deadline = None if at is None else time.monotonic() + (
                at - _dt.datetime.now(UTC)).total_seconds()
            self.version += 1


    def poke(self) -> None:
        """The queue has schedules (this worker just claimed a slot's task): the job looks
        at once, unless it already knows (it plans its own looks from then on)."""
        with self._lock:
            if self.value is None:
                self.deadline = None
                self.version += 1


_HINTS: Dict[str, ScheduleHint] = {}
_HINTS_LOCK = threading.Lock()


def hint_for(queue_table: str) -> ScheduleHint:
    """The process's hint for a queue table (shared by its consumers and its job; the name
    as given or as resolved, whatever its case)."""
    key = queue_table.lower()
    with _HINTS_LOCK:
        hint = _HINTS.get(key)
        if hint is None:
            hint = _HINTS[key] = ScheduleHint()
        return hint
