"""Periodic check for due tasks; wakes the waiting workers when there are any.

Every CHECK_TASKS_INTERVAL seconds (and once right at start) it calls the
injected `has_due_tasks()`; when it returns True and some worker is listening,
the server sends a wake-up to every listening worker.  The check is skipped
while no worker listens.  A failing check (database down) is logged and
retried at the next round; it never blocks waiting for a worker.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

logger = logging.getLogger(__name__)


class CheckTasksThread(threading.Thread):
    """Poll `has_due_tasks` and call `wake_workers` when it is True."""

    def __init__(self, has_due_tasks: Callable[[], bool], wake_workers: Callable[[], int],
                 listeners: Callable[[], int], interval: float,
                 stopping: threading.Event) -> None:
        super().__init__(name="nsj-queue-check-tasks", daemon=True)
        self._has_due_tasks = has_due_tasks
        self._wake_workers = wake_workers
        self._listeners = listeners
        self._interval = interval
        self._stopping = stopping
        self._failures = 0

    def run(self) -> None:
        logger.info("Verificação de tarefas pendentes a cada %.1f s.", self._interval)
        while not self._stopping.is_set():
            started = time.monotonic()
            self.check_once()
            elapsed = time.monotonic() - started
            if self._stopping.wait(max(0.0, self._interval - elapsed)):
                break

    def check_once(self) -> bool:
        """One round; True when workers were woken."""
        if self._listeners() == 0:
            return False
        try:
            due = bool(self._has_due_tasks())
        except Exception as exc:  # the DB may be down; keep serving locks
            self._failures += 1
            log = logger.error if self._failures % 20 == 1 else logger.debug
            log("Falha ao verificar tarefas pendentes (%d seguida(s)): %s", self._failures, exc)
            return False
        if self._failures:
            logger.info("Verificação de tarefas pendentes restabelecida.")
            self._failures = 0
        if not due:
            return False
        woken = self._wake_workers()
        logger.debug("Há tarefas pendentes; %d worker(s) notificado(s).", woken)
        return woken > 0
