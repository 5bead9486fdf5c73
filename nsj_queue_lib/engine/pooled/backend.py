"""PostgreSQL behind a transaction pooler (DB_POOL_MODE=transaction): leases, no sessions.

Behind PgBouncer in transaction pooling (RDS Proxy, Supavisor, PgCat) session state does not
survive a transaction, so this backend keeps none:

* Claim: one autocommit statement picks due rows with FOR UPDATE SKIP LOCKED and marks
  them 'processando' with a lease in the row: this worker's identity (lease_dono) and an
  expiry (lease_ate, QUEUE_LEASE_SECONDS ahead).
* Finish: the success mark in the task's own transaction, only while the row is still
  'processando' under this worker's lease (fenced: a worker whose task was taken over
  cannot finish it; its transaction rolls back).
* Heartbeat: a thread of the worker process, on a connection of its own, extends the
  leases of its running tasks every third of the lease.
* Rescue: running tasks whose lease expired are failed and re-queued (or dead-lettered),
  one row lock at a time (SKIP LOCKED: any number of workers may run it at once), every
  half lease by every worker (runtime/maintenance.py LeaseRescue).
* Wake-ups: each idle worker polls the index-only due probe, every 50 ms right after
  activity, slowing to once a second when idle; with DB_LISTEN_HOST, the wait between
  two probes is a LISTEN on a direct connection (a NOTIFY ends it at once).
* Admin jobs: a lease row in `<fila>_rotinas` instead of an advisory lock; HALT: that
  table's row 'halt', read by the workers as on MySQL native mode.
* Batch mode: the default claim_batch (row locks and transaction-level advisory locks,
  which end with the batch's transaction): no lease needed, nothing of a batch is visible
  before its commit.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Set

from nsj_queue_lib.config import Settings, validate_table_name
from nsj_queue_lib.db.errors import Fault, classify
from nsj_queue_lib.db.lease import LeaseRepository
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import (
    HALT_PAYLOAD,
    Capabilities,
    LockKey,
    Notification,
    Notifier,
    TaskGuard,
    task_lock_key,
)
from nsj_queue_lib.engine.mysql.backend import HaltWatch, ProbeNotifier
from nsj_queue_lib.engine.postgres.backend import PgNotifier
from nsj_queue_lib.exceptions import DatabaseUnavailable

logger = logging.getLogger(__name__)

POLL_FAST = 0.05  # seconds between two probes right after activity
POLL_IDLE = 1.0  # seconds between two probes of a worker idle for a while (pickup <= 1 s)
POLL_SLOWDOWN = 0.25  # the step grows as this fraction of the time since the last task
ADMIN_LEASE = 600.0  # seconds an admin job's lease row lasts (renewed by nothing: a job
# that runs longer may be started by a second worker; purge and notify are idempotent)


def _claim_order(tarefa: dict) -> tuple:
    return (-(tarefa.get("prioridade") or 0), tarefa["data_hora"], tarefa["id"])


def worker_identity() -> str:
    """host:pid:random (a restarted process with a reused pid is another owner)."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Heartbeat:
    """Extends the leases of the process's running tasks, on a connection of its own.

    One thread per backend (process), started at the first claim; it renews every third
    of the lease, so a task keeps its lease through two missed heartbeats."""

    def __init__(self, settings: Settings, owner: str) -> None:
        self.settings = settings
        self.owner = owner
        self.lease = float(settings.queue_lease_seconds)
        self._ids: Set[int] = set()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._session: Optional[DbSession] = None
        self.beats = 0  # successful renewals (tests, diagnostics)

    def add(self, task_id: int) -> None:
        with self._lock:
            self._ids.add(task_id)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="nsjq-lease",
                                                daemon=True)
                self._thread.start()

    def discard(self, task_id: int) -> None:
        with self._lock:
            self._ids.discard(task_id)

    def _run(self) -> None:
        while not self._stop.wait(self.lease / 3):
            with self._lock:
                ids = sorted(self._ids)
            if ids:
                self._beat(ids)

    def _beat(self, ids: List[int]) -> None:
        try:
            if self._session is None:
                self._session = DbSession.open(self.settings,
                                               application_name="nsj_queue_lib:lease")
            repo = TaskRepository(self._session, self.settings.queue_table)
            kept = LeaseRepository(repo).extend(ids, self.owner, self.lease)
            self.beats += 1
            lost = set(ids) - set(kept)
            if lost:
                logger.debug("Concessões não renovadas (tarefas concluídas ou tomadas): %s",
                             sorted(lost))
        except Exception as exc:  # the database is away: the next beat tries again
            logger.warning("Renovação das concessões das tarefas falhou: %s", exc)
            self._close_session()

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.close()
            except Exception:  # already gone
                pass

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(2.0)
        self._close_session()


class LeaseGuard(TaskGuard):
    """The claim of the lease backend (implements `TaskGuard`): see the module docstring."""

    def __init__(self, repo: TaskRepository, queue_table: str, owner: str, lease: float,
                 heartbeat: Heartbeat) -> None:
        self.repo = repo
        self.queue_table = queue_table
        self.leases = LeaseRepository(repo)
        self.owner = owner
        self.lease = lease
        self.heartbeat = heartbeat
        self._running: Set[int] = set()
        self.claim_next: Optional[Callable[[], bool]] = None  # (TaskGuard: never used here)

    def claim(self, limit: int = 1) -> List[dict]:
        rows = self.leases.claim(limit, self.owner, self.lease)
        for row in rows:
            self._running.add(row["id"])
            self.heartbeat.add(row["id"])
        return sorted(rows, key=_claim_order) if len(rows) > 1 else rows

    # (claim_batch: the default; its row and transaction-level locks end with the batch)

    def begin(self, tarefa: dict) -> bool:
        return True  # fenced at the finish (lease_finish), in this very transaction

    def finish(self, tarefa: dict, message: str) -> bool:
        return self.leases.finish(tarefa["id"], message, self.owner)

    def release(self, tarefa: dict) -> None:
        self._running.discard(tarefa["id"])
        self.heartbeat.discard(tarefa["id"])

    def close(self) -> None:
        for task_id in sorted(self._running):
            self.heartbeat.discard(task_id)
        self._running.clear()


class LeaseLocker:
    """Admin locks without a session (implements `Locker`): a lease row per key in
    `<fila>_rotinas`, owned by this locker, released by `unlock` or by its expiry."""

    def __init__(self, session: DbSession, queue_table: str, owner: str,
                 ttl: float = ADMIN_LEASE) -> None:
        self.leases = LeaseRepository(TaskRepository(session, queue_table))
        self.owner = f"{owner}:{uuid.uuid4().hex[:6]}"
        self.ttl = ttl
        self._held: Dict[str, int] = {}  # key -> holds (re-entrant, as a session lock)

    @staticmethod
    def _name(key: LockKey) -> str:
        return "trava:" + ":".join(str(part) for part in key)

    def try_lock(self, key: LockKey) -> bool:
        name = self._name(key)
        if not self.leases.admin_take(name, self.owner, self.ttl):
            return False
        self._held[name] = self._held.get(name, 0) + 1
        return True

    def unlock(self, key: LockKey) -> bool:
        name = self._name(key)
        holds = self._held.get(name, 0)
        if holds <= 0:
            return False
        if holds > 1:
            self._held[name] = holds - 1
            return True
        del self._held[name]
        return self.leases.admin_drop(name, self.owner)

    def close(self) -> None:
        """Drop every lease row still held (a crash leaves them to expire)."""
        held, self._held = list(self._held), {}
        for name in held:
            try:
                self.leases.admin_drop(name, self.owner)
            except Exception as exc:  # the database is away: the lease expires
                logger.debug("Trava %s não liberada: %s", name, exc)


class HaltRow:
    """HALT through `<fila>_rotinas` row 'halt' (what HaltWatch and ProbeNotifier read
    from MySQL's control row)."""

    def __init__(self, session: DbSession, queue_table: str) -> None:
        self.queue_table = queue_table
        self.leases = LeaseRepository(TaskRepository(session, queue_table))

    def exists(self) -> bool:
        return True  # (checked by the backend: LeaseRepository.check_schema)

    def halt_requested_at(self) -> Any:
        return self.leases.halt_get()

    def request_halt(self, por: Optional[str] = None) -> None:
        self.leases.halt_set(por)


class PollingNotifier(ProbeNotifier):
    """Wake-ups from the due probe, every idle worker on its own (no idle turn: that is a
    session lock).  The step between two probes grows with the time since a task was last
    seen, from POLL_FAST to POLL_IDLE.  With `listen` (DB_LISTEN_HOST), the wait between two
    probes is a LISTEN on that direct connection: a NOTIFY ends it."""

    def __init__(self, repo: TaskRepository, control: Any, channel: str,
                 halt: HaltWatch, listen: Optional[PgNotifier] = None) -> None:
        super().__init__(repo, control, channel, POLL_IDLE, halt=halt,
                         sleep=self._pause)
        self.listen_notifier = listen
        self.leases = LeaseRepository(repo)
        self._next_probe = 0.0  # (monotonic) the next due probe, across wait() calls
        # a NOTIFY 'HALT' came on the direct connection (sent by a tool in session mode)
        self._halt_notified = False

    def _step(self) -> float:
        idle = self.clock() - self._last_seen
        return min(POLL_IDLE, max(POLL_FAST, idle * POLL_SLOWDOWN))

    def wait(self, timeout: float) -> List[Notification]:
        """Probe when the step since the last probe has passed (whatever slices the caller
        waits in), pause in between.  The probe reads the HALT request too (one statement
        per poll: an idle worker sends one a second); `wait(0)`, between two tasks, reads
        HALT alone, at most every half second (HaltWatch)."""
        if timeout <= 0:
            return self._halted()
        deadline = self.clock() + timeout
        while True:
            if self._halt_notified:
                self._halt_notified = False
                return [Notification(self.channel, HALT_PAYLOAD)]
            if self.clock() >= self._next_probe:
                due, halt_at = self.leases.probe()
                if self.halt.control and self.halt.seen(halt_at):
                    return [Notification(self.channel, HALT_PAYLOAD)]
                if due:
                    self._last_seen = self.clock()
                    self._next_probe = 0.0
                    return [Notification(self.channel, "")]
                self._next_probe = self.clock() + self._step()
            remaining = deadline - self.clock()
            if remaining <= 0:
                return []
            self._pause(max(0.0, min(self._next_probe - self.clock(), remaining)))

    def _pause(self, seconds: float) -> None:
        if self.listen_notifier is None:
            time.sleep(seconds)
            return
        try:
            notes = self.listen_notifier.wait(seconds)
            if notes:
                self._last_seen = self.clock()  # a NOTIFY: probe now, then fast
                self._next_probe = 0.0
                self._halt_notified = any(n.payload == HALT_PAYLOAD for n in notes)
        except DatabaseUnavailable as exc:
            logger.warning("Conexão direta de LISTEN perdida (%s); sondagem apenas", exc)
            self._drop_listen()
            time.sleep(seconds)

    def listen(self) -> None:
        super().listen()
        if self.listen_notifier is not None:
            try:
                self.listen_notifier.listen()
            except DatabaseUnavailable as exc:
                logger.warning("LISTEN na conexão direta falhou (%s); sondagem apenas", exc)
                self._drop_listen()

    def _drop_listen(self) -> None:
        notifier, self.listen_notifier = self.listen_notifier, None
        if notifier is not None:
            try:
                notifier.session.close()
            except Exception:  # already gone
                pass

    def close(self) -> None:
        super().close()
        self._drop_listen()


class PooledBackend:
    """Leases in the rows, polling wake-ups, lease rows for the admin jobs and HALT."""

    name = "pooled"
    capabilities = Capabilities(wakes_on_insert=True, notify_is_transactional=True,
                                batch_claim=True, lock_on_task_session=False,
                                wakes_when_due=True, leases=True)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.queue_table = validate_table_name(settings.queue_table, "QUEUE_TABLE", "postgres")
        self.owner = worker_identity()
        self.lease = float(settings.queue_lease_seconds)
        self.heartbeat = Heartbeat(settings, self.owner)
        self._halt = HaltWatch()
        self._checked = False

    def check(self, session: DbSession) -> None:
        """The queue must have the lease columns and <fila>_rotinas (schema 7)."""
        if not self._checked:
            LeaseRepository(TaskRepository(session, self.queue_table)).check_schema()
            self._checked = True

    def guard(self, session: DbSession, repo: TaskRepository) -> LeaseGuard:
        return LeaseGuard(repo, self.queue_table, self.owner, self.lease, self.heartbeat)

    def notifier(self, session: DbSession,
                 has_idle: Optional[Callable[[], bool]] = None) -> Notifier:
        repo = TaskRepository(session, self.queue_table)
        return PollingNotifier(repo, HaltRow(session, self.queue_table),
                               self.settings.queue_name, self._halt, self._listen_notifier())

    def _listen_notifier(self) -> Optional[PgNotifier]:
        """LISTEN on a direct connection (DB_LISTEN_HOST), when configured and reachable."""
        host = self.settings.db_listen_host
        if not host:
            return None
        direct = self.settings.replace(
            db_host=host, db_port=self.settings.db_listen_port or self.settings.db_port,
            db_pool_mode="session")
        try:
            session = DbSession.open(direct, application_name="nsj_queue_lib:listen")
        except DatabaseUnavailable as exc:
            logger.warning("Conexão direta de LISTEN (DB_LISTEN_HOST=%s) indisponível (%s); "
                           "sondagem apenas", host, exc)
            return None
        return PgNotifier(session, self.settings.queue_name)

    def admin_locker(self, session: DbSession) -> LeaseLocker:
        return LeaseLocker(session, self.queue_table, self.owner)

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        if payload == HALT_PAYLOAD:
            HaltRow(session, self.queue_table).request_halt()
        # Idle workers poll the probe; a listener on a direct connection gets the NOTIFY
        # the insert trigger sends.

    def task_keys(self, task_id: int) -> List[LockKey]:
        return [task_lock_key(self.settings.queue_table, task_id)]

    def classify(self, exc: BaseException) -> Fault:
        return classify(exc)

    def close(self) -> None:
        self.heartbeat.close()
