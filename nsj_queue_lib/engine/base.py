"""The coordination contracts: how a worker claims tasks, gets wake-ups and locks.

Each backend (PostgreSQL, MySQL native, socket server) implements them all in
one place, with its own claim strategy; the runtime depends only on these
protocols and on the backend's `Capabilities`, never on which backend it is.

* `TaskGuard`: claim the next due task(s), mark one done, release it.  One
  guard serves one database session; a worker running several task threads
  opens one session and one guard per thread.
* `Notifier`: wake-ups for idle workers (and HALT).
* `Locker`: session locks, used by the admin jobs and the rescue.
* `Backend`: the factory of the three, plus `wake_workers`.

A backend's classes subclass these protocols explicitly, so they inherit the
defaults written here (no-op hooks, the dialect's batch claim) and override only
what differs, each with a comment saying why.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Protocol, Tuple

if TYPE_CHECKING:
    from nsj_queue_lib.db.repository import TaskRepository
    from nsj_queue_lib.db.session import DbSession
    from nsj_queue_lib.engine.postgres.listener_turn import ListenerTurn

from nsj_queue_lib.db.errors import Fault

# Lock keys (2.x and 1.2.2 forms) are defined in one place: engine/keys.py.
from nsj_queue_lib.engine.keys import (
    ADMIN_NOTIFY,
    ADMIN_PURGE,
    ADMIN_RETRY,
    LockKey,
    admin_lock_key,
    task_lock_key,
)

HALT_PAYLOAD = "HALT"

__all__ = ["ADMIN_NOTIFY", "ADMIN_PURGE", "ADMIN_RETRY", "HALT_PAYLOAD", "LockKey",
           "admin_lock_key", "task_lock_key"]


class TaskTakenOver(Exception):
    """The success mark sent with the task's COMMIT found the task no longer
    'processando' (`TaskGuard.finish_at_commit`): nothing was committed."""


@dataclass(frozen=True)
class Notification:
    """One wake-up: the channel it came on and its payload ('' or 'HALT')."""

    channel: str
    payload: str = ""


class Notifier(Protocol):
    """Delivers wake-ups to an idle worker."""

    # Seconds: the longest wait() the consumer asks for at once (it checks its stop
    # request and the admin jobs between two), so it bounds how long a stop request
    # waits for an idle worker.
    wait_slice: float = 0.5

    def listen(self) -> None:
        """Start receiving wake-ups for the queue (idempotent)."""

    def wait(self, timeout: float) -> list[Notification]:
        """Block up to `timeout` seconds; return the wake-ups received (maybe none).

        Returns early, with what has arrived, as soon as one wake-up is there.
        Notifications received while the worker was busy are returned at once.
        """

    def notify(self, payload: str = "") -> None:
        """Tell every worker of the queue that there is work (or HALT)."""

    def attach(self, stopping: Callable[[], bool],
               pause_seen: Optional[Callable[..., None]] = None) -> None:
        """The caller's stop request and its pause gate (`PauseGate.note`, the consumer's),
        for a notifier whose wait can end on a stop or reads the pause flag itself.
        Default: not needed."""
        return None  # a default, not an abstract method

    def claimed(self) -> None:
        """The consumer claimed a task (after an idle wait or its periodic claim); a
        notifier that shares wake-ups or an idle turn passes it on.  Default: nothing."""
        return None  # a default, not an abstract method

    def slot_idle(self) -> None:
        """QUEUE_CONCURRENCY: a task thread of the process started an idle wait (called
        from that thread); a notifier that tells its server when the process is idle
        does so now.  Default: nothing."""
        return None  # a default, not an abstract method

    def claiming_turn(self, queue_table: str, guard: TaskGuard,
                      repo: TaskRepository) -> Optional[ClaimingTurn]:
        """An idle wait taken in turns by the idle workers of the fleet that also claims
        (the consumer then waits through it instead of `wait`), or None: the consumer
        waits with `wait` and claims itself (the default; a notifier may still take turns
        inside `wait`, as MySQL native's idle turn does).  `guard` and `repo`: the
        consumer's, on this notifier's session."""
        return None

    def listener_turn(self, queue_table: str,
                      guard: Optional[TaskGuard] = None) -> Optional[ListenerTurn]:
        """The fleet-wide listener turn the runtime takes before an idle wait on this
        notifier's session (engine/postgres/listener_turn.py), or None: idle workers wait on
        their own (the default).  `guard`: the guard of the same session, when the caller
        claims with it (its claim may hand the turn on)."""
        return None

    def close(self) -> None:
        """Release the resources (idempotent)."""


# An idle claim found due rows but got none (another worker holds them right now): the
# next claim comes after BUSY_FIRST seconds, doubling up to BUSY_MAX while that lasts.
BUSY_FIRST = 0.002
BUSY_MAX = 1.0


def until_due(timeout: float, next_due: Optional[float], repo: TaskRepository) -> float:
    """An idle wait of `timeout` seconds, ended when the next task is due (`next_due`
    seconds; None: unknown) and, after a probe from the claim position, when a claim from
    the index start is due (PostgreSQL, db/claim_position.py), so that a task due before
    the position waits no longer than that."""
    if next_due is not None:
        timeout = min(timeout, next_due)
    cap = repo.idle_wait_cap()
    return timeout if cap is None else min(timeout, cap)


class PauseView(Protocol):
    """The consumer's pause gate (runtime/pause.py), as an idle turn reads it."""

    @property
    def control_seen(self) -> bool: ...

    @property
    def flag_sql(self) -> str: ...

    def is_paused(self) -> bool: ...

    def note(self, paused: bool, reason: Optional[str],
             compat: Optional[bool] = None, schedule: Any = None) -> None: ...


class IdleHost(Protocol):
    """What the consumer loop (runtime/consumer.py) lends a `ClaimingTurn` for one wait."""

    stop: threading.Event
    poll_interval: float  # QUEUE_WAIT_NOTIFY_INTERVAL
    gate: PauseView

    def claim(self) -> Any:
        """The consumer's claim: a task (or batch), or None."""

    def handle(self, notes: List[Notification]) -> None:
        """Wake-ups received outside `wait_notes` (HALT stops the worker)."""

    def wait_notes(self, timeout: float) -> bool:
        """Wait up to `timeout` for wake-ups (handled); True when it ended early (a
        wake-up, a stop, an admin job due)."""

    def admin_due(self) -> bool:
        """An admin job of the worker is due (the wait ends, the turn is handed on)."""

    def admin_cap(self, timeout: float) -> float:
        """`timeout`, shortened so that the wait ends when an admin job is due."""


class ClaimingTurn(Protocol):
    """An idle wait taken in turns across the fleet, in which the holder claims
    (PostgreSQL's listener turn: engine/postgres/idle.py).  The consumer loop calls
    `wait_claim` where it would otherwise wait and claim, and after a task that a claim
    of the turn kept the turn through (`kept`)."""

    @property
    def kept(self) -> bool:
        """The last claim kept the turn through its task: the consumer comes back to
        `wait_claim` after it (or `release`s the turn when stopping)."""

    def wait_claim(self, host: IdleHost, busy: float) -> Tuple[Any, bool, float]:
        """Wait for the turn and for work, claim: (the task or None, `woke`, busy).
        `woke`: the task followed a wake-up, with nothing else known to be due (after it,
        the consumer comes back here rather than claim directly); `busy`: the back-off
        (BUSY_FIRST..BUSY_MAX) carried between idle waits."""

    def release(self) -> None:
        """Hand the turn on (no-op when not held; a lost session releases it too)."""


class Locker(Protocol):
    """Session locks with the semantics of PostgreSQL session advisory locks.

    A lock belongs to the connection (session) that took it; only that session
    releases it, and every lock of the session is released when it ends.
    `try_lock` never blocks waiting for another owner.
    """

    def try_lock(self, key: LockKey) -> bool:
        """Take the lock if free; True when this session now holds it."""

    def unlock(self, key: LockKey) -> bool:
        """Release a lock held by this session; False if it did not hold it."""

    def close(self) -> None:
        """End the session, releasing all its locks (idempotent)."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend offers, for callers that adapt to it (tests skip by these too)."""

    # A task inserted by a producer wakes idle workers by itself (PostgreSQL trigger,
    # MySQL probe, server probe), without the producer calling notify.
    wakes_on_insert: bool
    # A wake-up sent inside a transaction is delivered only at its commit.
    notify_is_transactional: bool
    # claim_batch() serves batch mode (QUEUE_BATCH_SIZE > 1): several tasks claimed
    # inside one transaction (needs FOR UPDATE SKIP LOCKED).  False: batch mode refused.
    batch_claim: bool
    # The task lock lives on the task's own database session (it dies with it).
    lock_on_task_session: bool
    # The notifier itself wakes an idle worker when a task becomes due, scheduled ones
    # too (MySQL native's idle turn polls the probe): the idle wait needs no next-due
    # probe of its own, nor a retry loop while due rows are held by other workers.
    wakes_when_due: bool = False
    # Real 1.2.2 workers may share the queue with this backend's workers (mixed-fleet
    # mode: 1.2.2's task keys honoured).  PostgreSQL only.
    legacy_fleet: bool = False
    # Running tasks are owned through a lease in their row (DB_POOL_MODE=transaction):
    # the rescue takes expired leases (backend.lease_seconds), not free session locks.
    leases: bool = False
    # The guard honours the queue's concurrency limits (nsj-queue limit) and ordering keys
    # (db/limits.py).  False: a worker of this backend claims nothing while the queue
    # uses either.
    concurrency_limits: bool = False


class TaskGuard(Protocol):
    """A backend's whole claim strategy on one database session.

    The runner's order for each claimed task is: `begin(tarefa)` right after
    opening the task transaction (False: the task was taken over, roll back and
    skip it); the user code; `finish(tarefa, message)` inside the transaction
    (marks 'sucesso'; False when the row is no longer 'processando'); commit or
    roll back; then always `release(tarefa)`.

    Batch mode claims with `claim_batch` instead, inside the batch's transaction; its
    tasks are finished by the batch runner, never by `finish`/`release`.
    """

    repo: TaskRepository
    queue_table: str
    # Set by the consumer: whether, at a task's success, the consumer's next step is a
    # claim (not stopping, not paused, no admin job due, no listener turn to go back to).
    # A guard that can send the next claim with the success's COMMIT does so only then
    # (PgGuard); None: never.
    claim_next: Optional[Callable[[], bool]] = None

    def claim(self, limit: int = 1) -> List[dict]:
        """Move up to `limit` due tasks to 'processando', each locked by this session.

        Highest `prioridade` first, then oldest `data_hora`; never a task another
        worker holds.  Returns the `tarefa` dicts (empty when none is due).
        """

    def claim_batch(self, limit: int) -> List[dict]:
        """Batch mode: claim up to `limit` due tasks inside the caller's open transaction,
        in claim order; they are marked 'processando' in that transaction only.

        Default: the dialect's batch claim (db/repository.py `task_claim_batch`): the rows
        are locked with FOR UPDATE SKIP LOCKED until the batch commits, and nothing of the
        batch is visible before that, so no session lock is needed to keep the rescue
        off them (PostgreSQL also takes transaction-level advisory locks, read by the
        status tools).  Every backend uses it: a batch's claim depends on the dialect
        only.  Only backends whose `capabilities.batch_claim` is True are asked.
        """
        return self.repo.task_claim_batch(limit, task_lock_key(self.queue_table, 0)[0])

    def begin(self, tarefa: dict) -> bool:
        """Called inside the task transaction before the user code; False when the
        task no longer belongs to this worker."""

    def finish(self, tarefa: dict, message: str) -> bool:
        """Mark the task 'sucesso' with `message`, inside its transaction."""

    def finish_at_commit(self, tarefa: dict, message: str) -> bool:
        """`finish`, for a caller that commits right after with nothing in between: a
        guard may send the mark with the COMMIT instead (one round trip less), and then
        the commit raises TaskTakenOver for a task no longer 'processando'.  Default:
        `finish`."""
        return self.finish(tarefa, message)

    def release(self, tarefa: dict) -> None:
        """Free the task's lock (idempotent; after commit or rollback)."""

    def claimed_ahead(self) -> List[int]:
        """Ids of tasks this guard holds but has not handed out yet (claim-ahead), for
        jobs that run on the same session between two tasks (the rescue skips them)."""
        return []

    def settle(self) -> None:
        """Before an idle wait: release now what a guard defers to its next claim.
        Default: nothing is deferred."""
        return None  # a default, not an abstract method

    def close(self) -> None:
        """Release what the guard owns besides the session (idempotent)."""


class Backend(Protocol):
    """Factory of the coordination objects a worker needs."""

    # Read-only here: a class attribute in each backend, a property in a wrapper.
    @property
    def name(self) -> str:
        """The backend's name (postgres, mysql, socket)."""
        raise NotImplementedError

    @property
    def capabilities(self) -> Capabilities:
        """What the backend can do."""
        raise NotImplementedError

    def check(self, session: DbSession) -> None:
        """Refuse, with a ConfigError, a database this backend cannot serve."""

    def guard(self, session: DbSession, repo: TaskRepository) -> TaskGuard:
        """The claim strategy bound to `session` (one per task thread)."""

    def notifier(self, session: DbSession,
                 has_idle: Optional[Callable[[], bool]] = None) -> Notifier:
        """Wake-ups for the worker's idle wait.

        `has_idle` tells whether the process has a task slot free (QUEUE_CONCURRENCY);
        a notifier that takes part in a fleet-wide idle turn competes for it only then.
        None: always (one task at a time).
        """

    def admin_locker(self, session: DbSession) -> Locker:
        """Locks for the admin jobs and the rescue, owned by `session`."""

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        """Tell the queue's workers there is work (or HALT); never raises for a lost
        wake-up (idle workers poll anyway)."""

    def task_keys(self, task_id: int) -> List[LockKey]:
        """Every lock key that says "this task is being run" (the rescue must obtain all
        of them from `admin_locker`): the 2.x key, and whatever a backend's compatibility
        adds (PostgreSQL in mixed-fleet mode: 1.2.2's).  Admin jobs only."""
        raise NotImplementedError

    def classify(self, exc: BaseException) -> Fault:
        """What a database error means (db/errors.py `classify`), plus the faults only
        this backend's own SQL raises (PostgreSQL: TAKEN_OVER).  Error paths only."""
        raise NotImplementedError


class MarkedAhead:
    """The next task a guard marked 'processando' inside the finishing task's
    transaction (claim-ahead).  It may be used only if that very transaction commits:
    `DbSession.after_commit` confirms it, a rollback leaves it unconfirmed (the row is
    waiting again and only its lock is left to release), whatever the session commits
    afterwards.

    With `chain` (the MySQL dialect), that COMMIT also opens the transaction the
    marked task will run in (`DbSession.chain_commit`): one BEGIN less per task
    (none saved on SingleStore, which ignores AND CHAIN; the session notices)."""

    def __init__(self, chain: bool = False) -> None:
        self._task: Optional[dict] = None
        self._committed = False
        self._chain = chain

    def pending(self) -> bool:
        return self._task is not None

    def ids(self) -> List[int]:
        return [self._task["id"]] if self._task is not None else []

    def keep(self, session: DbSession, tarefa: dict) -> None:
        self._task, self._committed = tarefa, False
        session.after_commit(self._confirm)
        if self._chain:
            session.chain_commit()

    def _confirm(self) -> None:
        self._committed = True

    def take(self, rolled_back: Callable[[dict], None]) -> Optional[dict]:
        """The kept task if its transaction committed, else None; the slot is emptied.
        A task whose transaction rolled back is waiting again: it goes to `rolled_back`,
        which releases its (non-transactional) lock."""
        tarefa, self._task = self._task, None
        if tarefa is None or self._committed:
            return tarefa
        rolled_back(tarefa)
        return None
