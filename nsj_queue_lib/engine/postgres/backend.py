"""PostgreSQL backend: LISTEN/NOTIFY, session advisory locks and the one-statement claim.

Everything lives on the worker's own connections: the task lock is taken by
the claim statement on the task's session, so it dies with that session (and
with the task's transaction), which is what lets the rescue tell a dead
worker's task by its free lock.
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.errors import Fault, classify
from nsj_queue_lib.db.limits import LimitedClaim, LimitsHint
from nsj_queue_lib.db.pooler import check_pool_mode
from nsj_queue_lib.db.queries import raw_queries
from nsj_queue_lib.db.repository import SUCESSO, TaskRepository
from nsj_queue_lib.db.session import (
    AFTER_COMMIT,
    BEFORE_COMMIT,
    CommitRider,
    DbSession,
    is_connection_error,
)
from nsj_queue_lib.engine.base import (
    Capabilities,
    LockKey,
    Notification,
    Notifier,
    TaskGuard,
    TaskTakenOver,
    task_lock_key,
)
from nsj_queue_lib.engine.postgres.compat_1_2_2 import legacy_task_key, task_keys
from nsj_queue_lib.engine.postgres.idle import PgIdleTurn
from nsj_queue_lib.engine.postgres.listener_turn import ListenerTurn
from nsj_queue_lib.engine.postgres.locker import PgLocker
from nsj_queue_lib.exceptions import DatabaseUnavailable

logger = logging.getLogger(__name__)


class PgNotifier(Notifier):
    """LISTEN on the queue's channel, on the worker's own session.

    The channel is quoted, so it is exactly the name the trigger passes to
    pg_notify(), whatever its case.  Notifications that arrive while the
    session runs a task are queued by psycopg2 and returned by the next wait().
    """

    def __init__(self, session: DbSession, channel: str) -> None:
        self.session = session
        self.channel = channel
        self._listening = False

    def listen(self) -> None:
        if not self._listening:
            self.session.execute(f"LISTEN {self.session.dialect.quote(self.channel)}")
            self._listening = True

    def _drain(self) -> List[Notification]:
        conn = self.session.conn
        # (only the queue's channel: the listener turn's marker channel is not news)
        out = [Notification(n.channel, n.payload) for n in conn.notifies
               if n.channel == self.channel]
        conn.notifies.clear()
        return out

    def wait(self, timeout: float) -> List[Notification]:
        conn = self.session.conn
        try:
            conn.poll()
            found = self._drain()
            deadline = time.monotonic() + max(0.0, timeout)
            while not found:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                readable, _, _ = select.select([conn], [], [], remaining)
                if readable:
                    conn.poll()
                    found = self._drain()
            return found
        except Exception as exc:
            if isinstance(exc, DatabaseUnavailable):
                raise
            import psycopg2

            if isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError, OSError,
                                ValueError)) or is_connection_error(exc):
                raise DatabaseUnavailable(f"Conexão de LISTEN perdida: {exc}") from exc
            raise

    def notify(self, payload: str = "") -> None:
        sql = raw_queries(self.session.dialect)["notify"]
        self.session.execute(sql, {"channel": self.channel, "payload": payload})

    def claiming_turn(self, queue_table: str, guard: TaskGuard,
                      repo: TaskRepository) -> Optional[PgIdleTurn]:
        """The consumer's idle workers take turns listening, the holder claiming
        (engine/postgres/idle.py)."""
        return PgIdleTurn(ListenerTurn(self.session, queue_table, guard), self.session, repo)

    def listener_turn(self, queue_table: str,
                      guard: Optional[TaskGuard] = None) -> Optional[ListenerTurn]:
        """Idle workers take turns listening (one is woken per NOTIFY, not all of them):
        the turn is an advisory lock on this LISTEN session."""
        # (the guard is this backend's PgGuard: its claim hands the turn on)
        return ListenerTurn(self.session, queue_table, guard)

    def close(self) -> None:
        self._listening = False


# Runs of task_locks_release_stale after a failed claim, at most (one per nesting level
# of a lock taken more than once).
_STALE_RUNS = 4
# Seconds: the holder of the listener turn keeps it through a lone task while its
# session's tasks take less than this on average (claim to release).  Meanwhile nobody
# listens: a task that arrives then waits for the end of that task (this long at most, on
# average), and in exchange the turn does not change hands (one statement less per task).
KEEP_TURN_RUN = 0.02
RUN_WEIGHT = 0.25  # weight of the last task in that average


def _taken_over(exc: BaseException) -> bool:
    """The error task_finish_unlock_at_commit raises for a row no longer 'processando'."""
    return getattr(exc, "pgcode", None) == "22P02" and "nsjq_taken_over" in str(exc)


def _claim_order(tarefa: dict) -> tuple:
    return (-(tarefa.get("prioridade") or 0), tarefa["data_hora"], tarefa["id"])


class PgGuard(TaskGuard):
    """The claim of the PostgreSQL backend (implements `TaskGuard`).

    One statement picks the due rows (FOR UPDATE SKIP LOCKED), takes each one's
    advisory lock on this session and marks it 'processando' (autocommit), so
    the status is visible while the task runs.  The success mark releases the
    lock in the same round trip.

    Two releases ride on the next claim instead of costing statements of their own:

    * in mixed-fleet mode, 1.2.2's key of a finished task (the raw id) is kept
      after its commit and released by the next claim (or by `settle()`, which the
      worker calls before any idle wait, and by the listener turn's wait statement).
      Harmless meanwhile: the task is no longer 'processando', so 1.2.2's claim (it
      checks the status after its lock) and both rescues (they only look at
      'processando' rows) have no use for the key;
    * `hand_over(turn)`: the listener turn this session holds is released by the
      next claim that returns a task (the turn stays held when it finds nothing), unless
      that task is the only one due and this session's recent tasks ran short (an
      exponential average of claim-to-release time under KEEP_TURN_RUN): then the turn
      is kept, and the worker goes back to holding it after the task
      (engine/postgres/listener_turn.py, "keeping the turn").
    """

    def __init__(self, repo: TaskRepository, queue_table: str) -> None:
        self.repo = repo
        self.queue_table = queue_table
        self.lock_ns = task_lock_key(queue_table, 0)[0]
        self.locker = PgLocker(repo.session)
        self._released: Set[int] = set()
        self._running: Set[int] = set()  # ids claimed and not yet released (their locks)
        self._legacy: Set[int] = set()  # of those, the ones holding 1.2.2's key too
        self._deferred: Optional[int] = None  # 1.2.2 key (raw id) still to release
        self._turn: Any = None  # ListenerTurn to release with the next successful claim
        # Exponential average of this session's task run times, claim to release (seconds;
        # None: no task yet), and the claim time of each task running.
        self.run_average: Optional[float] = None
        self._claimed_at: Dict[int, float] = {}
        # Claim-ahead: the result of the claim sent with the last success's COMMIT (None:
        # none), and the finished task whose 1.2.2 key that claim carried (see release()).
        self._ahead: Optional[List[dict]] = None
        self._carried: Optional[int] = None
        self.claim_next: Optional[Callable[[], bool]] = None  # (TaskGuard: set by the consumer)
        # Concurrency limits (db/limits.py): the hint the pause gate keeps, and the
        # limit-aware claim, made when the queue first has limits.
        self.limits = LimitsHint()
        self.limited: Optional[LimitedClaim] = None
        self._legacy_limits_told = False

    def _limits_apply(self) -> bool:
        """Whether this claim honours the queue's limits: it has some, and the queue is not in
        mixed-fleet mode (`limit set` refuses that mode; a queue put back into it later
        claims as 1.2.2 workers do, without limits: said once)."""
        if not self.limits.active:
            return False
        if self.repo.legacy:
            if not self._legacy_limits_told:
                self._legacy_limits_told = True
                logger.error("Fila %s em modo misto (1.2.2): limites de concorrência, "
                             "ordering_key e QUEUE_FAIR_TENANTS não valem nesse modo; "
                             "`nsj-queue compat off`", self.queue_table)
            return False
        if self.limited is None:
            self.limited = LimitedClaim(self.repo.session, self.queue_table, self.lock_ns)
        return True

    def _claim_limited(self, limit: int) -> List[dict]:
        """The limit-aware claim, in a transaction of its own (see db/limits.py)."""
        assert self.limited is not None
        session = self.repo.session
        session.begin()
        try:
            rows = self.limited.claim(limit, ordered=self.limits.ordering,
                                      fair=self.limits.fair)
            session.commit()
        except BaseException:
            session.rollback()
            self._after_failed_claim(None)
            raise
        return self._claimed(rows, False)

    def claim_batch(self, limit: int) -> List[dict]:
        if self._limits_apply():
            assert self.limited is not None
            return self.limited.claim(limit, batch=True, ordered=self.limits.ordering,
                                      fair=self.limits.fair)
        return super().claim_batch(limit)

    @property
    def deferred_unlock(self) -> Optional[int]:
        """The 1.2.2 key (raw task id) this session still holds for a finished task."""
        return self._deferred

    def take_deferred(self) -> Optional[int]:
        """Hand the deferred 1.2.2 key to a statement about to release it."""
        key, self._deferred = self._deferred, None
        return key

    def hand_over(self, turn: Any) -> None:
        """Release `turn` (a held ListenerTurn) with the next claim that gets a task."""
        self._turn = turn

    def claim(self, limit: int = 1) -> List[dict]:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:  # claimed with the last success's COMMIT (claim-ahead)
            return ahead
        if self._limits_apply():
            return self._claim_limited(limit)
        turn = self._turn if limit == 1 and self._turn is not None and self._turn.held else None
        # (keep the turn through a lone task only while this session's tasks run short)
        keep = (turn is not None and self.run_average is not None
                and self.run_average < KEEP_TURN_RUN and turn.may_keep())
        legacy = self.repo.legacy  # (the queue's mode may change between two claims)
        if legacy and not self._legacy.issuperset(self._running):
            self._take_legacy_keys()
        try:
            rows = self.repo.task_claim_locked(
                self.lock_ns, limit, unlock=self._deferred,
                turn=(*turn.key, turn.hand_key[1]) if turn is not None else None, keep=keep,
                legacy=legacy)
        except BaseException:
            self._after_failed_claim(turn)
            raise
        self._deferred = None
        return self._claimed(rows, legacy, turn)

    def _claimed(self, rows: List[dict], legacy: bool, turn: Any = None) -> List[dict]:
        self._running.update(row["id"] for row in rows)
        if legacy:
            self._legacy.update(row["id"] for row in rows)
        now = time.monotonic()
        released = False
        for row in rows:
            self._claimed_at[row["id"]] = now
            released = bool(row.pop("nsjq_turn_released", None)) or released
        if turn is not None and released:
            turn.forget()  # released by the claim: the next idle worker holds it now
            self._turn = None
        elif turn is not None and rows:
            besides = self.repo.take_claim_besides()
            # kept: the holder waits by the next due time the claim read besides its task
            turn.keep(besides[0] if besides is not None else None, rows[0]["id"])
        return sorted(rows, key=_claim_order) if len(rows) > 1 else rows

    def _claim_with_commit(self, task_id: int) -> Optional[Tuple[Any, ...]]:
        """Claim-ahead: the next claim, to be sent with the COMMIT of task `task_id`'s
        transaction (one round trip less per task); its result is what the next `claim()`
        returns.  Only when the consumer's next step is that claim (`claim_next`), no
        listener turn is held (its claims hand the turn on, or keep it), and the claim's
        statement is prepared and needs no statement of its own first; else None: the
        claim comes after the commit as before.  The claim runs after the COMMIT, in a
        transaction of its own, with the same statement: the task becomes 'processando'
        (visible) and locked at once, exactly as a claim of its own would leave it.

        In mixed-fleet mode 1.2.2's key of the task just finished, given back only after
        its commit, rides on that claim too (it runs after the commit).
        Returns (the claim, its EXECUTE text and arguments, legacy, the carried key)."""
        if self.claim_next is None or not self.claim_next() or self.limits.active:
            return None
        if (self._turn is not None and self._turn.held) or not self.repo.claim_ahead_ready():
            return None
        legacy = self.repo.legacy
        if legacy and not self._legacy.issuperset(self._running):
            return None  # the mode changed: the keys are taken before a claim (claim())
        carried = task_id if task_id in self._legacy else None
        unlock = self._deferred
        if carried is not None:
            if unlock is not None:
                return None  # two keys to give back: left to the claim after the commit
            unlock = carried
        claim = self.repo.claim_call(self.lock_ns, 1, unlock=unlock, legacy=legacy)
        call = self.repo.session.prepared_text(claim.name, claim.params)
        if call is None:
            return None  # (prepared by the first claim of its variant, outside a transaction)
        return claim, call, legacy, carried

    def _send_with_commit(self, task_id: int, finish: Optional[Tuple[str, tuple]]) -> None:
        """Have the task's success mark (`finish`: its EXECUTE, or None when already sent)
        and the next claim (when `_claim_with_commit` allows it) sent with its COMMIT."""
        ahead = self._claim_with_commit(task_id)
        if finish is None and ahead is None:
            return

        def on_rows(rows: List[dict]) -> None:
            if finish is not None:
                self._released.add(task_id)  # (the mark released the lock)
            if ahead is not None:
                claim, _, legacy, carried = ahead
                self._deferred, self._carried = None, carried
                try:
                    tarefas = self.repo.claimed_rows(claim, rows)
                except Exception:  # (the task's commit stands: only the claim is undone)
                    logger.exception("Tarefa pega com o COMMIT não lida; devolvida à fila")
                    self._unclaim_rows(rows)
                    return
                self._ahead = self._claimed(tarefas, legacy)

        def on_error(exc: BaseException, where: str) -> None:
            if where == BEFORE_COMMIT:
                if finish is not None and _taken_over(exc):
                    raise TaskTakenOver(task_id) from exc
                return  # (an error of the task's transaction: the runner rolls back)
            if finish is not None:
                self._released.add(task_id)  # the mark ran, and released the lock
            if where != AFTER_COMMIT or ahead is None:
                return
            logger.debug("Claim enviado com o COMMIT falhou: %s", exc)
            carried = ahead[3]
            self._carried = carried
            if carried is not None:
                self._deferred = carried  # released or not: _after_failed_claim asks
            self._after_failed_claim(None)

        def committed() -> bool:
            row = self.repo.task_get(task_id)
            return row is not None and row["status"] == SUCESSO

        self.repo.session.send_with_commit(CommitRider(
            finish, ahead[1] if ahead is not None else None, on_rows, on_error, committed))

    def _unclaim_rows(self, rows: List[dict]) -> None:
        """Claimed rows that could not be read: back to waiting, their locks released."""
        for row in rows:
            if row.get("id") is not None:
                self.repo.task_unclaim(int(row["id"]))
        self._after_failed_claim(None)

    def claimed_ahead(self) -> List[int]:
        return [row["id"] for row in self._ahead or ()]

    def _take_legacy_keys(self) -> None:
        """The queue went back to mixed-fleet mode while this session runs tasks claimed
        without 1.2.2's keys: take them now, before claiming again, so that neither a
        1.2.2 claim nor a 1.2.2 rescue takes those tasks from here on."""
        for task_id in sorted(self._running - self._legacy):
            if not self.locker.try_lock(legacy_task_key(task_id)):
                logger.warning("Chave 1.2.2 da tarefa %s em uso por outra sessão (um worker "
                               "1.2.2?) ao voltar ao modo de frota mista", task_id)
                continue
            self._legacy.add(task_id)

    def _after_failed_claim(self, turn: Any) -> None:
        """A claim that failed may have released the turn and the deferred 1.2.2 key (the
        statement releases them in its RETURNING and filter, and advisory unlocks are not
        undone by the error), or not: ask the server, so that no later unlock of a key no
        longer held draws a server WARNING (or keeps a turn that is gone).

        It may also have taken task locks before the error (pg_try_advisory_lock in its
        filter): the rows stay 'pendente' (the UPDATE is rolled back) but the session
        locks are not undone, and every other worker's claim would skip those tasks until
        this session ends.  They are released here: every task lock of this queue held by
        this session for a task it is not running (and, in compat mode, the 1.2.2 raw
        keys of such tasks)."""
        deferred, self._deferred = self._deferred, None
        try:
            if self.repo.session.in_transaction:
                raise DatabaseUnavailable("claim dentro de uma transação")
            self._release_stale_task_locks(deferred)
            if deferred is not None and self.locker.holds(legacy_task_key(deferred)):
                self._deferred = deferred  # still held: the next statement releases it
            if turn is not None and not self.locker.holds(turn.key):
                turn.forget()
                self._turn = None
        except Exception as exc:  # the session is gone (and its locks with it), or unusable
            logger.debug("Estado dos locks após o claim com erro não lido: %s", exc)
            if turn is not None:
                turn.forget()
            self._turn = None

    def _release_stale_task_locks(self, deferred: Optional[int]) -> None:
        keep_raw = [*self._running, *([deferred] if deferred is not None else [])]
        # (a lock taken twice is released once per run: a few runs at most)
        for _ in range(_STALE_RUNS):
            if not self.repo.task_locks_release_stale(self.lock_ns, sorted(self._running),
                                                      keep_raw):
                return

    def begin(self, tarefa: dict) -> bool:
        return True  # the lock is on this very session: nobody else can hold the task

    def finish(self, tarefa: dict, message: str) -> bool:
        key = task_lock_key(self.queue_table, tarefa["id"])
        done = self.repo.task_finish_unlock(tarefa["id"], message, key)
        if done:
            # pg_advisory_unlock is not transactional: the lock is gone from here on,
            # and the row stays locked by the UPDATE until the commit.
            self._released.add(tarefa["id"])
            self._send_with_commit(tarefa["id"], None)
        return done

    def finish_at_commit(self, tarefa: dict, message: str) -> bool:
        """The success mark sent with the task's COMMIT (and the next claim, see
        `_claim_with_commit`): one message for the three.  A task taken over meanwhile
        fails that message before its COMMIT: the commit raises TaskTakenOver."""
        task_id = tarefa["id"]
        name, sql, params = self.repo.finish_at_commit_call(
            task_id, message, task_lock_key(self.queue_table, task_id))
        session = self.repo.session
        session.prepare(name, sql)  # (once per session; a PREPARE outlives a rollback)
        finish = session.prepared_text(name, params)
        if finish is None:
            return self.finish(tarefa, message)
        self._send_with_commit(task_id, finish)
        return True

    def release(self, tarefa: dict) -> None:
        task_id = tarefa["id"]
        self._running.discard(task_id)
        if self.limited is not None and task_id in self.limited.held:
            try:
                self.limited.release(task_id)  # (its slot: after the commit or rollback)
            except DatabaseUnavailable:
                pass  # the session is gone, and its locks with it
        claimed_at = self._claimed_at.pop(task_id, None)
        if claimed_at is not None:
            ran = time.monotonic() - claimed_at
            self.run_average = ran if self.run_average is None else (
                self.run_average + RUN_WEIGHT * (ran - self.run_average))
        turn = self._turn
        if turn is not None and task_id not in self._released:
            # Not a success: its failure may have scheduled a retry, which the claim's
            # next due time does not know (an UPDATE sends no notification).
            turn.kept_task_failed(task_id)
        try:
            if task_id in self._legacy:
                # 1.2.2's key is given back only after the commit or rollback (a 1.2.2
                # rescuer that got it earlier would re-queue a finished task: its status
                # update has no guard), and by the next statement that can carry it:
                # the claim sent with the commit, if any, carried it already.
                self._legacy.discard(task_id)
                if self._carried == task_id:
                    self._carried = None
                else:
                    self._settle_deferred()
                    self._deferred = task_id
            if task_id in self._released:
                self._released.discard(task_id)
                return
            self.locker.unlock(task_lock_key(self.queue_table, task_id))
        except DatabaseUnavailable:
            self._deferred = None  # the session is gone, and its locks with it

    # (claim_batch: the default, one statement with transaction-level advisory locks)

    def settle(self) -> None:
        """Release now what waits for the next claim (before the worker waits idle, or
        when paused): a task claimed ahead and not handed out goes back to waiting."""
        self._give_back()
        self._settle_deferred()

    def _give_back(self) -> None:
        """A task claimed ahead but not run (a stop, a pause): back to 'pendente', as if
        never claimed (its attempt is not counted: only the claim had happened)."""
        ahead, self._ahead = self._ahead, None
        for tarefa in ahead or ():
            task_id = tarefa["id"]
            self._claimed_at.pop(task_id, None)  # (not a run: kept out of run_average)
            try:
                self.repo.task_unclaim(task_id)
                self.release(tarefa)
            except DatabaseUnavailable:
                return  # the session is gone (and its locks): the rescue re-queues it

    def _settle_deferred(self) -> None:
        key = self.take_deferred()
        if key is not None:
            try:
                self.locker.unlock(legacy_task_key(key))
            except DatabaseUnavailable:
                pass  # the session is gone, and its locks with it

    def close(self) -> None:
        try:
            self._give_back()
        except Exception as exc:  # closing after an error: the rescue re-queues it
            logger.debug("Tarefa pega adiante não devolvida: %s", exc)
        if self.limited is not None:
            try:
                self.limited.release_all()
            except Exception as exc:  # the session is gone, and its locks with it
                logger.debug("Vagas de limite não liberadas: %s", exc)
            self.limited.held.clear()
        self._released.clear()
        self._running.clear()
        self._legacy.clear()
        self._claimed_at.clear()
        self._deferred = None
        self._turn = None


class PostgresBackend:
    """LISTEN/NOTIFY and session advisory locks, all on the worker's own connections."""

    name = "postgres"
    capabilities = Capabilities(wakes_on_insert=True, notify_is_transactional=True,
                                batch_claim=True, lock_on_task_session=True,
                                legacy_fleet=True, concurrency_limits=True)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.channel = settings.queue_name
        self._checked = False

    def check(self, session: DbSession) -> None:
        """PostgreSQL >= 9.5 (SKIP LOCKED) is all the claim needs; the session state this
        backend rests on must survive between transactions: no transaction pooler in
        front of the database (checked once, at the first session: db/pooler.py)."""
        if not self._checked:
            check_pool_mode(session, self.settings)
            self._checked = True

    def guard(self, session: DbSession, repo: TaskRepository) -> PgGuard:
        guard = PgGuard(repo, self.settings.queue_table)
        guard.limits.fair = self.settings.queue_fair_tenants  # (QUEUE_FAIR_TENANTS)
        return guard

    def notifier(self, session: DbSession,
                 has_idle: Optional[Callable[[], bool]] = None) -> PgNotifier:
        # (its listener_turn() gives the runtime the fleet-wide turn to wait for)
        return PgNotifier(session, self.channel)

    def admin_locker(self, session: DbSession) -> PgLocker:
        return PgLocker(session)

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        PgNotifier(session, self.channel).notify(payload)

    def task_keys(self, task_id: int) -> List[LockKey]:
        return task_keys(self.settings, task_id)

    def classify(self, exc: BaseException) -> Fault:
        return Fault.TAKEN_OVER if _taken_over(exc) else classify(exc)
