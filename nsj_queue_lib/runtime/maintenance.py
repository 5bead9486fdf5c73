"""The admin jobs every worker cooperates on: rescue (retry), purge and notify.

What: rescue re-queues tasks whose worker died; purge deletes old finished
chains; notify promotes due 'agendada' tasks and re-wakes workers for tasks
left waiting.  When: at the start of each clock minute listed in
QUEUE_MINUTE_{RETRY,PURGE,NOTIFY}_THREAD (all workers try at the same instant;
a per-queue admin lock lets exactly one do the work).  Each run opens its own
connection and closes it afterwards.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import threading
from dataclasses import dataclass
from typing import Callable, FrozenSet, Iterator, Optional, Tuple

from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.base import (
    ADMIN_NOTIFY,
    ADMIN_PURGE,
    ADMIN_RETRY,
    Backend,
    Locker,
    admin_lock_key,
)
from nsj_queue_lib.coordination.keys import compat_1_2_2, task_keys
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.runtime.failure import WORKER_STOPPED, record_failure
from nsj_queue_lib.runtime.schedule import seconds_to_next_slot
from nsj_queue_lib.runtime.service import BackgroundService

logger = logging.getLogger(__name__)

PAGE = 100
PROMOTE_BATCH = 1000


@dataclass
class RunResult:
    skipped: bool = False  # another worker held the admin lock
    count: int = 0


class AdminService(BackgroundService):
    """Runs `work()` at the configured minutes, under the queue's admin lock."""

    admin_id = 0

    def __init__(self, settings: Settings, backend: Backend, minutes: FrozenSet[int],
                 stop_event: Optional[threading.Event] = None,
                 clock: Callable[[], _dt.datetime] = _dt.datetime.now) -> None:
        super().__init__(stop_event)
        self.settings = settings
        self.backend = backend
        self.minutes = minutes
        self.clock = clock

    def next_delay(self) -> float:
        return seconds_to_next_slot(self.minutes, self.clock())

    @contextlib.contextmanager
    def _admin(self) -> Iterator[Optional[Tuple[TaskRepository, Locker]]]:
        session = DbSession.open(self.settings, application_name=f"nsj_queue_lib:{self.name}")
        locker = self.backend.admin_locker(session)
        key = admin_lock_key(self.settings.queue_table, self.admin_id)
        try:
            if not locker.try_lock(key):
                yield None
                return
            try:
                repo = TaskRepository(session, self.settings.queue_table,
                                      self.settings.queue_subscriber_table,
                                      legacy=compat_1_2_2(self.settings))
                yield repo, locker
            finally:
                with contextlib.suppress(Exception):
                    locker.unlock(key)
        finally:
            with contextlib.suppress(Exception):
                locker.close()
            session.close()

    def run_once(self) -> RunResult:
        with self._admin() as held:
            if held is None:
                logger.debug("%s: outro worker está executando", self.name)
                return RunResult(skipped=True)
            return RunResult(count=self.work(*held))

    def work(self, repo: TaskRepository, locker: Locker) -> int:  # pragma: no cover
        raise NotImplementedError


class RetryService(AdminService):
    """Rescue: a 'processando' task whose lock is free lost its worker.

    The attempt is marked 'falha' with a message saying the worker stopped,
    and re-queued (or dead-lettered) with its payload, like any failure.
    """

    name = "retry_thread"
    admin_id = ADMIN_RETRY

    def work(self, repo: TaskRepository, locker: Locker) -> int:
        rescued = 0
        after = 0
        while True:
            ids = repo.task_list_running(after, PAGE)
            for task_id in ids:
                held = _take_all(locker, task_keys(self.settings, task_id))
                if held is None:
                    continue  # its worker (2.x, or 1.2.2 in compatibility mode) is alive
                try:
                    with repo.session.transaction():
                        if not repo.task_try_lock_row(task_id):
                            # Row held by the task's own transaction (client/server mode
                            # fences it): still running although its lock was lost.
                            continue
                        tarefa = repo.task_get(task_id)
                        if tarefa and tarefa["status"] == "processando" and record_failure(
                                repo, tarefa, WORKER_STOPPED, self.settings):
                            rescued += 1
                            logger.warning("Tarefa %s resgatada: o worker parou durante a "
                                           "execução", task_id)
                finally:
                    for key in reversed(held):
                        locker.unlock(key)
            if len(ids) < PAGE:
                break
            after = ids[-1]
        if rescued:
            self.backend.wake_workers(repo.session)
        return rescued


def _take_all(locker: Locker, keys: list) -> Optional[list]:
    """Take every key, or none (None when one is held by someone else)."""
    held = []
    for key in keys:
        if not locker.try_lock(key):
            for taken in reversed(held):
                locker.unlock(taken)
            return None
        held.append(key)
    return held


class PurgeService(AdminService):
    """Deletes rows older than QUEUE_PURGE_MAX_AGE days, of finished chains only,
    QUEUE_PURGE_LIMIT rows per statement, at most QUEUE_PURGE_ROUND_LIMIT statements."""

    name = "purge_thread"
    admin_id = ADMIN_PURGE

    def work(self, repo: TaskRepository, locker: Locker) -> int:
        total = 0
        for _ in range(self.settings.queue_purge_round_limit):
            deleted = repo.task_purge(self.settings.queue_purge_max_age,
                                      self.settings.queue_purge_limit)
            total += max(deleted, 0)
            if deleted < self.settings.queue_purge_limit or self.stopped:
                break
        if total:
            logger.info("Purge: %s registros antigos excluídos", total)
        return total


class NotifyService(AdminService):
    """Promotes due 'agendada' tasks to 'pendente' and wakes the workers when tasks
    are waiting longer than QUEUE_WAIT_NOTIFY_INTERVAL (a lost notification)."""

    name = "notify_thread"
    admin_id = ADMIN_NOTIFY

    def work(self, repo: TaskRepository, locker: Locker) -> int:
        promoted = 0
        while True:
            n = repo.task_promote_scheduled(PROMOTE_BATCH)
            promoted += max(n, 0)
            if n < PROMOTE_BATCH:
                break
        if promoted or repo.task_has_lost_pending(self.settings.queue_wait_notify_interval):
            self.backend.wake_workers(repo.session)
        return promoted


def admin_services(settings: Settings, backend: Backend,
                   stop_event: threading.Event) -> list:
    return [
        RetryService(settings, backend, settings.queue_minute_retry_thread, stop_event),
        PurgeService(settings, backend, settings.queue_minute_purge_thread, stop_event),
        NotifyService(settings, backend, settings.queue_minute_notify_thread, stop_event),
    ]
