"""The admin jobs every worker cooperates on: rescue (retry), purge and notify.

What: rescue re-queues tasks whose worker died; purge deletes old finished
chains; notify promotes due 'agendada' tasks and re-wakes workers for tasks
left waiting.  When: at the start of each clock minute listed in
QUEUE_MINUTE_{RETRY,PURGE,NOTIFY}_THREAD (all workers try at the same instant;
a per-queue admin lock lets exactly one do the work).  Once per slot: under that
lock a job reads, and after its work writes, the slot it ran for in the queue's
`<fila>_rotinas` table, so a worker that reaches the job late (a task ran through
the slot) skips it when another worker already ran it for the current slot.  A queue
whose table predates `<fila>_rotinas` runs as before (a late worker repeats the job).

Where: on a connection the worker already holds (`AdminJobs`, one per process):
a consumer runs a due job between two tasks (never inside a task's transaction)
and ends its idle waits at the next slot.  With QUEUE_CONCURRENCY > 1 every task
thread does so on its own connection, and the first that is free at the slot runs
the job (two threads never run the same job at once); the listener thread runs no
job, so a long purge delays neither the wake-ups nor HALT.  So a worker process
holds one connection per task thread (plus the one listener connection with
concurrency) and nothing more.  `run_once()` opens a connection of its own, for
tools and tests.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import (
    Callable,
    Collection,
    Dict,
    FrozenSet,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
)

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import (
    ADMIN_NOTIFY,
    ADMIN_PURGE,
    ADMIN_RETRY,
    Backend,
    Fault,
    Locker,
    admin_lock_key,
)
from nsj_queue_lib.engine.fleet_mode import fleet_mode
from nsj_queue_lib.exceptions import CoordinationError, DatabaseUnavailable
from nsj_queue_lib.runtime.failure import WORKER_STOPPED, record_failure
from nsj_queue_lib.runtime.schedule import current_slot, seconds_to_next_slot
from nsj_queue_lib.runtime.service import OutageReport

logger = logging.getLogger(__name__)

PAGE = 100
PROMOTE_BATCH = 1000
# A slot's run may start up to this many seconds before the minute (the wait that ends
# at a slot runs on the monotonic clock): it still counts as that minute's run.
SLOT_EARLY = 1.0
MISSING_RECHECK = 600.0  # seconds between looks for a missing <fila>_rotinas table
# A recorded slot more than this many seconds ahead of this worker's clock was written by
# a worker whose clock runs fast: ignored (the job runs and records its own slot), so one
# bad clock never silences a job for the others until their clocks get there.
CLOCK_SKEW_MAX = 300.0


@dataclass
class RunResult:
    skipped: bool = False  # another worker held the admin lock, or ran the job this slot
    count: int = 0


class AdminService:
    """One admin job: `work()` under the queue's admin lock, at the configured minutes."""

    name = "admin"
    admin_id = 0
    on_demand = False  # (Job: due at the configured minutes)

    def __init__(self, settings: Settings, backend: Backend, minutes: FrozenSet[int],
                 stop_event: Optional[threading.Event] = None,
                 clock: Callable[[], _dt.datetime] = _dt.datetime.now) -> None:
        self.settings = settings
        self.backend = backend
        self.minutes = minutes
        self.clock = clock
        self._stop = stop_event or threading.Event()
        self._local = threading.local()  # per thread: the task threads share one job
        self._missing_until = 0.0  # no <fila>_rotinas table: no slot record until then

    @property
    def _busy(self) -> Collection[int]:
        return getattr(self._local, "busy", ())

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def next_delay(self) -> float:
        """Seconds to the start of the next configured minute."""
        return seconds_to_next_slot(self.minutes, self.clock())

    @contextlib.contextmanager
    def _admin(self, session: DbSession) -> Iterator[Optional[Tuple[TaskRepository, Locker]]]:
        locker = self.backend.admin_locker(session)
        key = admin_lock_key(self.settings.queue_table, self.admin_id)
        try:
            if not locker.try_lock(key):
                yield None
                return
            try:
                repo = TaskRepository(session, self.settings.queue_table,
                                      self.settings.queue_subscriber_table,
                                      legacy=fleet_mode(self.settings))
                yield repo, locker
            finally:
                with contextlib.suppress(Exception):
                    locker.unlock(key)
        finally:
            with contextlib.suppress(Exception):
                locker.close()  # (a socket server session; a database locker keeps nothing)

    def run_on(self, session: DbSession, busy: Collection[int] = (),
               slot: Optional[_dt.datetime] = None) -> RunResult:
        """Run the job on `session`, a connection the caller owns, outside any transaction.

        `busy`: ids of tasks this very session has claimed and not run yet (a task
        claimed ahead): their locks are this session's own, and session locks are
        re-entrant, so the rescue must not take them for a dead worker's.
        `slot` (naive UTC minute): skip the job when it already ran for this slot (or a
        later one), and record the slot after the work; None: run unconditionally (the
        start-up rescue, tools).
        """
        self._local.busy = busy
        with self._admin(session) as held:
            if held is None:
                logger.debug("%s: outro worker está executando", self.name)
                return RunResult(skipped=True)
            repo = held[0]
            if slot is not None and self._ran_for(repo, slot, self._utc_now()):
                logger.debug("%s: já executada no horário %s UTC; ignorada", self.name,
                             f"{slot:%H:%M}")
                return RunResult(skipped=True)
            count = self.work(*held)
            if slot is not None:
                self._record(repo, slot)
            return RunResult(count=count)

    def run_slot(self, session: DbSession, busy: Collection[int] = ()) -> RunResult:
        """The run at a slot (`AdminJobs`): at most once per slot across the workers."""
        now = self.clock() + _dt.timedelta(seconds=SLOT_EARLY)
        return self.run_on(session, busy, slot=current_slot(self.minutes, now))

    def _utc_now(self) -> _dt.datetime:
        """This worker's clock as a naive UTC datetime (a naive clock is local time)."""
        return self.clock().astimezone(_dt.timezone.utc).replace(tzinfo=None)

    def _ran_for(self, repo: TaskRepository, slot: _dt.datetime, now: _dt.datetime) -> bool:
        if time.monotonic() < self._missing_until:
            return False
        try:
            last = repo.admin_slot_get(self.name)
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            self._no_record(exc)
            return False
        if last is None or last < slot:
            return False
        if last > now + _dt.timedelta(seconds=CLOCK_SKEW_MAX):
            logger.warning("%s: horário %s UTC gravado em <fila>_rotinas está no futuro "
                           "(relógio de outro worker adiantado?); a rotina roda agora",
                           self.name, f"{last:%Y-%m-%d %H:%M}")
            return False
        return True

    def _record(self, repo: TaskRepository, slot: _dt.datetime) -> None:
        if time.monotonic() < self._missing_until:
            return
        try:
            with repo.session.transaction():
                repo.admin_slot_set(self.name, slot, f"{socket.gethostname()}:{os.getpid()}")
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            self._no_record(exc)

    def _no_record(self, exc: BaseException) -> None:
        """<fila>_rotinas unusable (a queue not upgraded yet, a role without grants on it):
        the job runs as before, without the once-per-slot check, for MISSING_RECHECK s;
        never a reason not to run it."""
        self._missing_until = time.monotonic() + MISSING_RECHECK
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if self.backend.classify(exc) is Fault.NO_TABLE:
            logger.info("%s: sem a tabela das rotinas (%s): um worker atrasado pode repetir "
                        "a rotina; crie-a com nsj-queue schema upgrade", self.name, text)
        else:
            logger.warning("%s: tabela das rotinas inacessível (%s): um worker atrasado pode "
                           "repetir a rotina", self.name, text)

    def run_once(self) -> RunResult:
        """Run the job on a connection of its own, closed afterwards (tools, tests)."""
        session = DbSession.open(self.settings, application_name=f"nsj_queue_lib:{self.name}")
        try:
            return self.run_on(session)
        finally:
            session.close()

    def work(self, repo: TaskRepository, locker: Locker) -> int:  # pragma: no cover
        raise NotImplementedError


class Job(Protocol):
    """What `AdminJobs` runs: an admin job, or another periodic read of the worker."""

    name: str
    # True: `next_delay()` is asked afresh at each check (its delay depends on requests
    # that come meanwhile); False: once per run (a clock slot must not be skipped because
    # it was checked a moment after it began).
    on_demand: bool

    def next_delay(self) -> float:
        """Seconds from now to the job's next run (inf: none planned)."""

    def run_slot(self, session: DbSession, busy: Collection[int] = ()) -> object:
        """The run `AdminJobs` asks for when the job is due, on the worker's `session`
        (outside a transaction); `busy`: tasks this session claimed and has not run."""


class AdminJobs:
    """The worker's jobs and when each is due, run on the connection of whoever checks.

    Every consumer of the process (one, or each task thread with QUEUE_CONCURRENCY > 1)
    calls `run_due(session)` between two tasks when `due()`, and caps its idle waits with
    `cap()`.  A job being run by one thread is neither due nor counted in `delay()` for
    the others until it ends.  A job that fails is logged and tried again at its next
    slot: background work never takes the worker down (a database outage is one line,
    rate-limited).
    """

    def __init__(self, jobs: Sequence[Job], clock: Callable[[], float] = time.monotonic) -> None:
        self.jobs = list(jobs)
        self.clock = clock
        self._lock = threading.Lock()
        self._due = {id(job): clock() + job.next_delay() for job in self.jobs}
        self._running: Set[int] = set()  # jobs a thread is running now
        self._outages: Dict[str, OutageReport] = {}
        self.runs = 0  # (for tests and diagnostics)

    def add(self, job: Job) -> None:
        with self._lock:
            self.jobs.append(job)
            self._due[id(job)] = self.clock() + job.next_delay()

    def _deadline(self, job: Job, now: float) -> float:
        if id(job) in self._running:
            return float("inf")
        if job.on_demand:
            return now + job.next_delay()
        return self._due[id(job)]

    def delay(self) -> float:
        """Seconds until the first job is due (0 when one is due now)."""
        with self._lock:
            now = self.clock()
            return max(0.0, min((self._deadline(j, now) - now for j in self.jobs),
                                default=float("inf")))

    def due(self) -> bool:
        """Whether a job is due now (`delay() <= 0`; asked between every two tasks)."""
        with self._lock:
            now = self.clock()
            for job in self.jobs:
                if self._deadline(job, now) <= now:
                    return True
            return False

    def cap(self, timeout: float) -> float:
        """`timeout`, shortened so that an idle wait ends when a job is due."""
        return min(timeout, self.delay())

    def _take(self, job: Job) -> bool:
        """Mark `job` as run by the calling thread if it is due and nobody runs it."""
        with self._lock:
            now = self.clock()
            if self._deadline(job, now) > now:
                return False
            self._running.add(id(job))
            return True

    def run_due(self, session: DbSession, busy: Collection[int] = ()) -> None:
        """Run every job that is due on `session` (never inside a transaction)."""
        for job in list(self.jobs):
            if self._take(job):
                self._run(job, session, busy)

    def run_now(self, job: Job, session: DbSession, busy: Collection[int] = ()) -> None:
        """Run `job` on `session` at once (guarded) and plan its next run."""
        with self._lock:
            self._running.add(id(job))
        self._run(job, session, busy)

    def _run(self, job: Job, session: DbSession, busy: Collection[int]) -> None:
        outage = self._outages.get(job.name)
        try:
            job.run_slot(session, busy)
        except (DatabaseUnavailable, CoordinationError) as exc:
            if outage is None:
                outage = self._outages[job.name] = OutageReport(
                    f"{job.name}: banco ou servidor indisponível", logger, every=900.0)
            outage.failed(str(exc))
        except Exception:
            logger.exception("%s: falha na execução", job.name)
        else:
            if outage is not None:
                outage.recovered()
        finally:
            if session.in_transaction:  # (a job ends its own transactions; never leak one)
                with contextlib.suppress(Exception):
                    session.rollback()
            with self._lock:
                self.runs += 1
                self._due[id(job)] = self.clock() + job.next_delay()
                self._running.discard(id(job))


class RetryService(AdminService):
    """Rescue: a 'processando' task whose lock is free lost its worker.

    The attempt is marked 'falha' with a message saying the worker stopped,
    and re-queued (or dead-lettered) with its payload, like any failure.
    """

    name = "retry_thread"
    admin_id = ADMIN_RETRY

    def work(self, repo: TaskRepository, locker: Locker) -> int:
        if self.backend.capabilities.leases:  # no session locks: expired leases instead
            return rescue_expired_leases(repo.session, self.settings, self.backend)
        rescued = 0
        after = 0
        while True:
            ids = repo.task_list_running(after, PAGE)
            for task_id in ids:
                if task_id in self._busy:
                    continue  # claimed by this very session (its lock is re-entrant here)
                held = _take_all(locker, self.backend.task_keys(task_id))
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


LEASE_RESCUE_PAGE = 100  # expired leases rescued per run at most (the next run: the rest)


def rescue_expired_leases(session: DbSession, settings: Settings, backend: Backend) -> int:
    """DB_POOL_MODE=transaction: fail and re-queue (or dead-letter) the running tasks whose
    lease expired, each in a transaction of its own under its row lock (SKIP LOCKED), so
    one worker rescues it, once, whoever else runs this at the same time.  The next
    attempt is due at once: a killed worker's task runs again within 1.5 leases."""
    from nsj_queue_lib.db.lease import LeaseRepository

    repo = TaskRepository(session, settings.queue_table, settings.queue_subscriber_table)
    leases = LeaseRepository(repo)
    rescued = 0
    if not leases.any_expired():
        return 0
    for _ in range(LEASE_RESCUE_PAGE):
        with session.transaction():
            task_id = leases.expired()
            if task_id is None:
                break
            tarefa = repo.task_get(task_id)
            # (the next attempt is due at once: the lease already made it wait, and its
            # worker's death is no fault of the task)
            if tarefa and record_failure(repo, tarefa, WORKER_STOPPED, settings, delay=0.0):
                rescued += 1
                logger.warning("Tarefa %s resgatada: a concessão (lease) venceu; o worker "
                               "parou ou perdeu o banco durante a execução", task_id)
    if rescued:
        backend.wake_workers(session)
    return rescued


class LeaseRescue:
    """DB_POOL_MODE=transaction: the rescue of expired leases, every half lease, by every
    worker (a `Job` of AdminJobs; no admin lock needed: row locks with SKIP LOCKED)."""

    name = "lease_rescue"
    on_demand = False

    def __init__(self, settings: Settings, backend: Backend) -> None:
        self.settings = settings
        self.backend = backend

    def next_delay(self) -> float:
        return self.settings.queue_lease_seconds / 2

    def run_slot(self, session: DbSession, busy: Collection[int] = ()) -> int:
        return rescue_expired_leases(session, self.settings, self.backend)


def _take_all(locker: Locker, keys: list) -> Optional[list]:
    """Take every key, or none (None when one is held by someone else)."""
    held: list = []
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
        total += self._purge_deliveries(repo)
        if total:
            logger.info("Purge: %s registros antigos excluídos", total)
        return total

    def _purge_deliveries(self, repo: TaskRepository) -> int:
        """The webhook delivery log ages like the tasks (schema 5; none before it)."""
        if getattr(self, "_no_deliveries", False):
            return 0
        from nsj_queue_lib.pubsub.webhook_store import WebhookStore, is_missing_object

        store = WebhookStore(repo.session, repo.queue_table, None)
        total = 0
        try:
            for _ in range(self.settings.queue_purge_round_limit):
                deleted = store.delivery_purge(self.settings.queue_purge_max_age,
                                               self.settings.queue_purge_limit)
                total += max(deleted, 0)
                if deleted < self.settings.queue_purge_limit or self.stopped:
                    break
        except Exception as exc:
            if not is_missing_object(exc):
                raise
            self._no_deliveries = True
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
                   stop_event: threading.Event) -> List[Job]:
    jobs: List[Job] = [
        RetryService(settings, backend, settings.queue_minute_retry_thread, stop_event),
        PurgeService(settings, backend, settings.queue_minute_purge_thread, stop_event),
        NotifyService(settings, backend, settings.queue_minute_notify_thread, stop_event),
    ]
    if backend.capabilities.leases:
        jobs.append(LeaseRescue(settings, backend))
    return jobs
