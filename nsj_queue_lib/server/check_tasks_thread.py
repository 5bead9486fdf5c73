"""The server's due-task probe: wakes the waiting workers when tasks become due.

Every `probe_interval` seconds (QUEUE_POLL_INTERVAL, 0.1 s by default, at most
CHECK_TASKS_INTERVAL) it calls the injected `has_due_tasks()`, an index-only probe
whose cost does not grow with the backlog, and wakes the listening workers whenever
tasks are due: a producer that does not call notify_server still gets its task
picked up within about one interval.  (Waking only when the answer changes would
miss tasks that arrive back to back.)  Busy workers merge the wake-ups they receive
meanwhile into one.
The probe is skipped while no worker listens.  A failing probe (database down) is
retried at the next round and logged by the shared OutageReport (the first failure,
then one line every OUTAGE_LOG_EVERY seconds, and the recovery); it never blocks
waiting for a worker.
Runs on the shared BackgroundService lifecycle.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Optional

from nsj_queue_lib.runtime.service import BackgroundService, OutageReport

logger = logging.getLogger(__name__)

OUTAGE_LOG_EVERY = 20.0  # seconds between two lines of a lasting probe failure


class CheckTasksThread(BackgroundService):
    """Probe `has_due_tasks` and call `wake_workers` on new work."""

    name = "nsj-queue-check-tasks"

    def __init__(self, has_due_tasks: Callable[[], bool], wake_workers: Callable[[], int],
                 listeners: Callable[[], int], interval: float,
                 stopping: threading.Event, probe_interval: Optional[float] = None) -> None:
        super().__init__(stopping)
        self._has_due_tasks = has_due_tasks
        self._wake_workers = wake_workers
        self._listeners = listeners
        self._interval = interval
        self._probe_interval = min(probe_interval or interval, interval)
        self._outage = OutageReport("Verificação de tarefas pendentes", logger,
                                    every=OUTAGE_LOG_EVERY)

    def next_delay(self) -> float:
        return self._probe_interval

    def run_once(self) -> bool:
        return self.check_once()

    def check_once(self) -> bool:
        """One round; True when workers were woken."""
        if self._listeners() == 0:
            return False
        try:
            due = bool(self._has_due_tasks())
        except Exception as exc:  # the DB may be down; keep serving locks
            self._outage_report().failed(str(exc))
            return False
        self._outage_report().recovered()
        if not due:
            return False
        woken = self._wake_workers()
        logger.debug("Há tarefas pendentes; %d worker(s) notificado(s).", woken)
        return woken > 0
