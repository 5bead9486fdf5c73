"""MySQL native backend (MySQL >= 8.0, MariaDB >= 10.6): no server process needed.

* Claim: inside a short transaction on the task's session, `FOR UPDATE SKIP LOCKED`
  picks due rows no other claim holds, each row's session named lock is taken
  (GET_LOCK) and the row is marked 'processando', then committed.  The named lock
  belongs to the session, like a PostgreSQL advisory lock: it dies with the
  connection, so the rescue recognises a dead worker's task by its free lock.
* Wake-ups: MySQL has no LISTEN/NOTIFY.  One idle worker per queue (the holder of
  the idle turn, engine/mysql/idle_turn.py) polls an index-only probe (is any task
  due? one entry of the (status, data_hora) index, whatever the backlog) every
  QUEUE_POLL_INTERVAL seconds, faster right after activity; the other idle workers
  wait for the turn inside the server.
* HALT: `QueueAdmin.halt()` writes the request, timed by the database, to the
  queue's control table; each worker reads it at most every HALT_CHECK seconds
  (also between tasks) and stops when it is newer than what it saw at start.
* Admin jobs and the rescue use named locks too.

Lock names are server-wide in MySQL (not per database), so they carry a tag of the
database besides the queue's namespace: ``nsjq:<database tag>:<namespace>:<id>``.
"""

from __future__ import annotations

import logging
import time
import zlib
from typing import Any, Callable, List, Optional, Set

from nsj_queue_lib.config import Settings, validate_table_name
from nsj_queue_lib.db.control import ControlRow
from nsj_queue_lib.db.errors import Fault, classify
from nsj_queue_lib.db.limits import LimitedClaim, LimitsHint
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.server_version import (
    MIN_MARIADB,
    MIN_MYSQL,
    has_skip_locked,
    is_mariadb,
    is_singlestore,
)
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import (
    HALT_PAYLOAD,
    Capabilities,
    LockKey,
    MarkedAhead,
    Notification,
    Notifier,
    TaskGuard,
    task_lock_key,
)
from nsj_queue_lib.engine.mysql.idle_turn import IdleTurn
from nsj_queue_lib.exceptions import ConfigError, DatabaseUnavailable
from nsj_queue_lib.interrupt import WaitInterrupted, interruptible

logger = logging.getLogger(__name__)

CANDIDATES = 16  # index entries read per status for a claim (more for bigger batches)
FAST_POLL_FOR = 2.0  # seconds after activity during which the probe runs at its fastest
MIN_TURN_WAIT = 0.01  # seconds; a shorter rest of a wait does not send one more GET_LOCK
# The fast step, as a fraction of QUEUE_POLL_INTERVAL.
FAST_FRACTION = 0.25
# A worker granted the turn by a hand-over (the holder before found a task) waits this
# fraction of QUEUE_POLL_INTERVAL before its first probe.  Each probe that finds a task
# costs a hand-over and a claim (about 5 statements): under steady arrivals this wait
# sets how many tasks one wake-up serves (100/s: about 5 at half of 0.1 s, 2.5 at a
# quarter), while a task arriving when the holder has been polling for a while is still
# seen within one fast step.
HANDOVER_FRACTION = 0.5
# Back-off (seconds) after a task announced by the probe could not be claimed (its row is
# held by another worker's open transaction), as the consumer's busy back-off.
BUSY_FIRST = 0.002
BUSY_MAX = 1.0


def lock_prefix(settings: Settings) -> str:
    """`nsjq:<database tag>:` for the queue's database (named locks are server-wide)."""
    schema, _, _ = settings.queue_table.rpartition(".")
    database = schema or settings.db_name
    return f"nsjq:{zlib.crc32(database.encode()):08x}:"


def lock_name(prefix: str, key: LockKey) -> str:
    """Named-lock name of a lock key (at most 64 characters, the MySQL limit)."""
    return f"{prefix}{key[0]}:{key[1]}"


def check_server_version(version: str, singlestore: bool) -> None:
    """Refuse servers without SKIP LOCKED / several named locks per session."""
    hint = ("use o modo cliente/servidor (CLIENT_SERVER_MODE=true e o servidor de filas: "
            "python -m nsj_queue_lib.server.server_main)")
    if singlestore:
        raise ConfigError(f"SingleStore não tem FOR UPDATE SKIP LOCKED nem GET_LOCK: {hint}.")
    if not has_skip_locked(version, singlestore):
        mariadb = is_mariadb(version)
        needed = MIN_MARIADB if mariadb else MIN_MYSQL
        name = "MariaDB" if mariadb else "MySQL"
        raise ConfigError(
            f"O modo nativo MySQL exige {name} >= {needed[0]}.{needed[1]} (FOR UPDATE SKIP "
            f"LOCKED e locks nomeados por sessão); o servidor é "
            f"{version or 'de versão desconhecida'}: {hint}.")


class MysqlLocker:
    """Session named locks (GET_LOCK / RELEASE_LOCK) on a given session (implements Locker).

    Re-entrant with a count and released only by the owner session or with it,
    which are the semantics of PostgreSQL session advisory locks.
    """

    def __init__(self, session: DbSession, prefix: str) -> None:
        self.session = session
        self.prefix = prefix

    def try_lock(self, key: LockKey) -> bool:
        return self.session.fetch_value("SELECT GET_LOCK(%(n)s, 0)",
                                        {"n": lock_name(self.prefix, key)}) == 1

    def unlock(self, key: LockKey) -> bool:
        return self.session.fetch_value("SELECT RELEASE_LOCK(%(n)s)",
                                        {"n": lock_name(self.prefix, key)}) == 1

    def close(self) -> None:
        """Locks end with the session; the session's owner closes it."""


class MysqlGuard(TaskGuard):
    """The claim of the MySQL native backend (implements `TaskGuard`).

    The next task is claimed inside the finishing task's transaction, so one durable
    COMMIT serves both: MySQL has no per-transaction asynchronous commit, and a
    separate claim transaction would double the log flushes per task.  Its rows are
    locked (SKIP LOCKED) first, then one UPDATE marks them and the finished task
    'sucesso'.  That claim is used only if that COMMIT succeeded; on `close()` (a
    stop) a claimed task not yet run goes back to 'pendente'.

    Batch mode uses the default `claim_batch` (rows locked with SKIP LOCKED, then marked,
    no named locks: nothing of the batch is visible before its commit).
    """

    claim_ahead = True  # claim the next task inside the finishing task's transaction

    def __init__(self, repo: TaskRepository, queue_table: str, prefix: str) -> None:
        self.repo = repo
        self.session = repo.session
        self.queue_table = queue_table
        self.locker = MysqlLocker(repo.session, prefix)
        ns = task_lock_key(queue_table, 0)[0]
        self.task_prefix = f"{prefix}{ns}:"  # + task id (int32), as in lock_name()
        self._released: Set[int] = set()
        # The last finish looked for a next task (claim-ahead) and found none: the claim
        # that follows it right away would find none either, and is not sent.  A task
        # that arrived in between is seen by the idle turn's probe.
        self._found_none = False
        # Claimed ahead with the last success, not run yet; its COMMIT opens the next
        # task's transaction (AND CHAIN: native mode never runs on SingleStore).
        self._marked = MarkedAhead(chain=True)
        # Concurrency limits (db/limits.py): the pause gate's hint, the limit-aware claim.
        self.limits = LimitsHint()
        self.limited: Optional[LimitedClaim] = None

    def _limited_claim(self) -> LimitedClaim:
        if self.limited is None:
            prefix = self.locker.prefix
            self.limited = LimitedClaim(
                self.session, self.queue_table, task_lock_key(self.queue_table, 0)[0],
                task_lock=self._name, slot_name=lambda ns, key: lock_name(prefix, (ns, key)))
        return self.limited

    def claim_batch(self, limit: int) -> List[dict]:
        if self.limits.active:
            return self._limited_claim().claim(limit, batch=True, ordered=self.limits.ordering,
                                              fair=self.limits.fair)
        return super().claim_batch(limit)

    def _claim_limited(self, limit: int) -> List[dict]:
        """The limit-aware claim, in a transaction of its own (see db/limits.py)."""
        limited = self._limited_claim()
        session = self.session
        session.begin()
        try:
            rows = limited.claim(limit, ordered=self.limits.ordering, fair=self.limits.fair)
            session.commit()
        except BaseException:
            session.rollback()
            self._release_failed_claim(limited.marking)
            raise
        return rows

    def _name(self, task_id: int) -> str:
        return lock_name(self.locker.prefix, task_lock_key(self.queue_table, task_id))

    def claim(self, limit: int = 1) -> List[dict]:
        prefetched = self._take_next()
        if prefetched is not None:
            return [prefetched]
        if self._found_none:
            self._found_none = False
            return []
        if self.limits.active:
            return self._claim_limited(limit)
        session = self.session
        session.begin()
        marking: List[int] = []  # rows whose named locks the mark may have taken
        try:
            rows = self._claim_in_transaction(limit, marking)
            if rows:  # the task's transaction starts with this COMMIT (no BEGIN)
                session.chain_commit()
            session.commit()
        except BaseException:
            session.rollback()
            # The rollback puts the rows back to waiting but does not release their named
            # locks (session-scoped): every other worker's mark would skip them until
            # this connection ends.
            self._release_failed_claim(marking)
            raise
        return rows

    def _claim_in_transaction(self, limit: int, marking: List[int]) -> List[dict]:
        rows = self.repo.task_claim_skip_locked(limit, max(CANDIDATES, 4 * limit))
        if not rows:
            return []
        ids = [r["id"] for r in rows]
        marking.extend(ids)
        changed = self.repo.task_mark_processing_locked(ids, self.task_prefix)
        if changed < len(ids):
            # A row whose named lock another session holds (rare: a lock left by a
            # rescue in progress) stays waiting; keep only the rows marked here.
            mine = set(self.repo.task_list_processing(ids))
            rows = [r for r in rows if r["id"] in mine]
        for row in rows:
            row["status"] = "processando"
        return rows

    def _release_failed_claim(self, ids: List[int]) -> None:
        """After a claim that failed (rolled back): release the named locks its mark may
        have taken.  The rows were waiting, locked by the claim's transaction: none is a
        task running here, and RELEASE_LOCK of a lock not taken (the statement failed
        before its row) or held by another session changes nothing."""
        for task_id in ids:
            try:
                self.locker.unlock(task_lock_key(self.queue_table, task_id))
            except DatabaseUnavailable:
                return  # the session is gone, and its locks with it
            except Exception as exc:  # keep the claim's own error
                logger.warning("Lock nomeado da tarefa %s não liberado após o claim que "
                               "falhou: %s", task_id, exc)
                return

    def _take_next(self) -> Optional[dict]:
        return self._marked.take(lambda tarefa: self._unlock_quietly(tarefa["id"]))

    def begin(self, tarefa: dict) -> bool:
        return True  # the lock is on this very session: nobody else can hold the task

    def finish(self, tarefa: dict, message: str) -> bool:
        task_id = tarefa["id"]
        ahead: List[dict] = []
        if self.claim_ahead and not self._marked.pending() and not self.limits.active:
            ahead = self._claim_ahead()
            self._found_none = not ahead
        if ahead:
            done = self._finish_and_mark(task_id, message, ahead)
        else:
            done = self.repo.task_finish_release(task_id, message, self._name(task_id))
        if done:
            self._released.add(task_id)  # RELEASE_LOCK is not transactional
        return done

    def _claim_ahead(self) -> List[dict]:
        """The next task, locked in the finishing task's transaction: the 'pendente' range
        alone (the cheap statement), or the full claim when an 'agendada' task is due, so
        the claim order is the same as the full claim's."""
        ahead, scheduled = self.repo.task_claim_ahead_pending(1)
        if scheduled:
            ahead = self.repo.task_claim_skip_locked(1, CANDIDATES)
        return ahead

    def _finish_and_mark(self, task_id: int, message: str, ahead: List[dict]) -> bool:
        """The success of `task_id` and the mark of the rows claimed ahead, one UPDATE."""
        ids = [r["id"] for r in ahead]
        try:
            changed = self.repo.task_finish_release_mark(task_id, message, self._name(task_id),
                                                         ids, self.task_prefix)
            if changed == 1 + len(ids):
                marked = set(ids)
            else:  # rare: the task was taken over, or a claimed row's lock is held elsewhere
                marked = set(self.repo.task_list_processing(ids))
        except BaseException:
            # A named lock the statement may have taken: the task's transaction is rolled
            # back after this error, the rows wait again, and nothing else would release it.
            self._release_failed_claim(ids)
            raise
        rows = [r for r in ahead if r["id"] in marked]
        if rows:
            # Used only if this transaction commits; a rollback leaves only the named
            # lock to release (see _take_next).
            rows[0]["status"] = "processando"
            self._marked.keep(self.session, rows[0])
        return changed - len(marked) == 1

    def claimed_ahead(self) -> List[int]:
        return self._marked.ids()

    def release(self, tarefa: dict) -> None:
        task_id = tarefa["id"]
        if self.limited is not None and task_id in self.limited.held:
            try:
                self.limited.release(task_id)  # (its slot: after the commit or rollback)
            except DatabaseUnavailable:
                pass  # the session is gone, and its locks with it
        if task_id in self._released:
            self._released.discard(task_id)
            return
        self._unlock_quietly(task_id)

    def _unlock_quietly(self, task_id: int) -> None:
        try:
            self.locker.unlock(task_lock_key(self.queue_table, task_id))
        except DatabaseUnavailable:
            pass  # the session is gone, and its locks with it

    def close(self) -> None:
        """Put a task claimed ahead but not run back to 'pendente' (a graceful stop)."""
        self._released.clear()
        if self.limited is not None:
            try:
                self.limited.release_all()
            except Exception as exc:  # the session is gone, and its locks with it
                logger.debug("Vagas de limite não liberadas: %s", exc)
            self.limited.held.clear()
        tarefa = self._take_next()
        if tarefa is None:
            return
        try:
            self.repo.task_unclaim(tarefa["id"])
        except DatabaseUnavailable:
            return  # the session is gone: the rescue will re-queue it
        self._unlock_quietly(tarefa["id"])


READ_COMMITTED = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
HALT_CHECK = 0.5  # seconds between two reads of the HALT request (a primary-key read)
# Longest wait of an idle worker for the idle turn (one GET_LOCK): its statements per
# second, and how late a SIGTERM sent to that worker alone is seen.  A HALT, or a SIGTERM
# sent to the whole fleet, passes from one worker to the next as each one that stops
# hands the turn on (the next one reads HALT, or sees its stop request, at once).
TURN_WAIT = 2.0  # (a SIGTERM ends it at once on the main thread: interrupt.py)
_UNREAD = object()


class HaltWatch:
    """A native HALT request newer than the one seen when the worker started.

    Kept by the backend, so a reconnection does not move the baseline (a HALT sent
    while the database was unreachable still stops the worker).  A queue without a
    control table (created before 2.1) cannot be halted this way.
    """

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.baseline: object = _UNREAD
        self.control = False
        self._next = 0.0

    def start(self, control: ControlRow) -> None:
        if self.baseline is _UNREAD:
            self.control = control.exists()
            self.baseline = control.halt_requested_at() if self.control else None

    def due(self) -> bool:
        """Time for a read of the request (at most every HALT_CHECK seconds)."""
        return self.control and self.clock() >= self._next

    def seen(self, at: Any) -> bool:
        """A read of the request (by any statement) gave `at`: True when it is a HALT
        newer than the baseline."""
        self._next = self.clock() + HALT_CHECK
        return at is not None and (self.baseline is None or at > self.baseline)

    def requested(self, control: ControlRow) -> bool:
        if not self.due():
            return False
        return self.seen(control.halt_requested_at())


class ProbeNotifier(Notifier):
    """Wake-ups from polling an index-only probe (implements `Notifier`).

    Polls every `interval` seconds at most, and four times as often (FAST_FRACTION)
    during the first FAST_POLL_FOR seconds after a task was seen, so a burst of tasks is
    picked up quickly.  With `prefix` (native mode), only the idle worker holding
    the queue's idle turn polls; the others wait for it inside the server
    (engine/mysql/idle_turn.py).  `wait(0)` (asked between tasks) only reads the
    HALT request, when due.  There is no broadcast: `notify()` is a no-op, except
    HALT, written to the control table.
    """

    def __init__(self, repo: TaskRepository, control: ControlRow, channel: str,
                 interval: float,
                 clock=time.monotonic, sleep=time.sleep,
                 halt: Optional[HaltWatch] = None, prefix: Optional[str] = None,
                 has_idle: Optional[Callable[[], bool]] = None) -> None:
        self.repo = repo
        self.channel = channel
        self.interval = interval
        self.clock = clock
        self.sleep = sleep
        self.halt = halt or HaltWatch(clock)
        self.control = control
        self._last_seen = clock()
        self.prefix = prefix  # the named locks' prefix; None: every idle worker polls
        self.turn: Optional[IdleTurn] = None
        # QUEUE_CONCURRENCY: the listener waits for the turn only while a task thread of
        # its process is idle (else it would poll for tasks nobody there can take).
        self.compete: Callable[[], bool] = has_idle or (lambda: True)
        # A due task was announced and no claim() has been reported since; the back-off
        # that follows when the next wait() comes first (the claim found nothing).
        self._announced = False
        self._busy = 0.0
        self._hold_until = 0.0
        # The caller's stop request (set by the consumer): a wait ends as soon as it sees it.
        self.stopping: Callable[[], bool] = lambda: False
        # Told the pause flag read by the probe that hands the turn on (the consumer's
        # PauseGate.note), so the claim that follows reads no flag of its own.
        self.pause_seen: Optional[Callable[..., None]] = None

    def attach(self, stopping: Callable[[], bool],
               pause_seen: Optional[Callable[..., None]] = None) -> None:
        self.stopping = stopping
        self.pause_seen = pause_seen

    @property
    def wait_slice(self) -> float:  # type: ignore[override]
        """The longest `wait()` the consumer asks for at once (it checks its stop request
        between two): a waiter for the idle turn blocks up to TURN_WAIT in one statement."""
        return TURN_WAIT if self.prefix is not None else HALT_CHECK

    def listen(self) -> None:
        """Note the HALT request already there (it does not stop this worker)."""
        self.halt.start(self.control)
        if self.prefix is not None and self.turn is None:
            self.turn = IdleTurn.for_queue(self.repo.session, self.control.queue_table,
                                           self.prefix, self.repo.q["task_has_due"],
                                           self.halt.control)

    def _halted(self) -> List[Notification]:
        if self.halt.requested(self.control):
            return [Notification(self.channel, HALT_PAYLOAD)]
        return []

    def _step(self) -> float:
        fast = self.clock() - self._last_seen < FAST_POLL_FOR
        return self.interval * FAST_FRACTION if fast else self.interval

    def wait(self, timeout: float) -> List[Notification]:
        if timeout <= 0:
            return self._halted()
        deadline = self.clock() + timeout
        if self.turn is not None:
            return self._wait_turn(self.turn, deadline)
        while True:
            halted = self._halted()
            if halted:
                return halted
            if self.repo.task_has_due():
                self._last_seen = self.clock()
                return [Notification(self.channel, "")]
            remaining = deadline - self.clock()
            if remaining <= 0:
                return []
            self.sleep(min(self._step(), remaining))

    def _wait_turn(self, turn: IdleTurn, deadline: float) -> List[Notification]:
        """`wait()` with the idle turn: wait for it (reading HALT), then poll while held."""
        halt = [Notification(self.channel, HALT_PAYLOAD)]
        if self._announced:
            # The claim after the last "due" found nothing: the due rows are held by other
            # workers' open transactions (a running batch).  Back off, keeping the turn.
            self._announced = False
            self._busy = min(self._busy * 2, BUSY_MAX) if self._busy else BUSY_FIRST
            self._hold_until = self.clock() + self._busy
        while not self.stopping():
            remaining = deadline - self.clock()
            if not self.compete():
                turn.release()
                if self._halted():
                    return halt
                if remaining <= 0:
                    return []
                self.sleep(min(HALT_CHECK, remaining))
                continue
            if not turn.held:
                try:
                    # A SIGTERM ends this wait at once (the turn is not taken): the
                    # statement is abandoned, so the session is closed, and its lock
                    # with it.
                    with interruptible():
                        granted, at = turn.wait(min(TURN_WAIT, max(0.0, remaining)))
                except WaitInterrupted:
                    turn.held = False
                    self.repo.session.close()
                    return []
                if self.halt.control and self.halt.seen(at):
                    return halt
                if granted:
                    if self.stopping():
                        return []  # hand the turn on at once (the consumer stops)
                    # The holder before may have handed the turn on to claim a task: give
                    # that claim time to commit and more tasks time to arrive (one wake-up
                    # serves them all), then poll fast for a while.
                    self._last_seen = self.clock()
                    self.sleep(min(self.interval * HANDOVER_FRACTION,
                                   max(0.0, deadline - self.clock())))
                elif deadline - self.clock() < MIN_TURN_WAIT:
                    # (read after the wait: it used up the slice; another, near-zero
                    # GET_LOCK would double a waiter's statements)
                    return []
                continue
            hold = self._hold_until - self.clock()
            if hold > 0:  # backing off
                if hold >= remaining:
                    self.sleep(max(0.0, remaining))
                    return []
                self.sleep(hold)
            read_halt = self.halt.due()
            keep = self._busy > 0
            due, at = turn.probe(read_halt, keep=keep)
            if read_halt and self.halt.seen(at):
                return halt
            if due:  # (unless `keep`, the probe handed the turn on)
                self._last_seen = self.clock()
                if turn.pause is not None and self.pause_seen is not None:
                    self.pause_seen(*turn.pause)
                self._announced = True
                return [Notification(self.channel, "")]
            self._busy = self._hold_until = 0.0  # nothing due: nothing held either
            remaining = deadline - self.clock()
            if remaining <= 0:
                return []
            self.sleep(min(self._step(), remaining))
        return []

    def claimed(self) -> None:
        """The consumer claimed a task (announced by the probe or not: its periodic claim,
        a scheduled time): hand the turn on before running it; no back-off."""
        self._announced = False
        self._busy = self._hold_until = 0.0
        if self.turn is not None:
            self.turn.release()

    def notify(self, payload: str = "") -> None:
        if payload == HALT_PAYLOAD:
            self.control.request_halt()

    def close(self) -> None:
        """Hand the turn on (a stop, a reconnection); its lock also dies with the session."""
        if self.turn is not None:
            try:
                self.turn.release()
            except Exception as exc:  # the session is unusable: the lock goes with it
                logger.debug("Vez ociosa não liberada: %s", exc)


class MysqlBackend:
    """SKIP LOCKED + named-lock claim, index-probe wake-ups, named admin locks."""

    name = "mysql"
    capabilities = Capabilities(wakes_on_insert=True, notify_is_transactional=False,
                                batch_claim=True, lock_on_task_session=True,
                                wakes_when_due=True, concurrency_limits=True)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.prefix = lock_prefix(settings)
        self._checked = False
        self._halt = HaltWatch()
        # The server logs statements (binlog_format=STATEMENT): no READ COMMITTED (check())
        self._statement_binlog = False

    def check(self, session: DbSession) -> None:
        """Detect the server version once; refuse what the native claim cannot use."""
        if self._checked:
            return
        version = str(session.fetch_value("SELECT VERSION()") or "")
        singlestore = self.settings.db_driver == "SINGLE_STORE" or is_singlestore(session)
        check_server_version(version, singlestore)
        logger.info("MySQL nativo: servidor %s (SKIP LOCKED + locks nomeados)", version)
        self._statement_binlog = TaskRepository(
            session, self.settings.queue_table).statement_binlog()
        if self._statement_binlog:
            logger.warning("MySQL nativo: o servidor grava o log binário no formato STATEMENT, "
                           "que não aceita escritas em READ COMMITTED (erro 1665): as sessões "
                           "dos workers ficam no nível de isolamento do servidor, e o claim pode "
                           "segurar por instantes a inserção de tarefas (binlog_format=ROW ou "
                           "MIXED evita isso)")
        self._checked = True

    def guard(self, session: DbSession, repo: TaskRepository) -> MysqlGuard:
        # The claim's locking reads of ix_claim lock no index gaps at READ COMMITTED (at
        # REPEATABLE READ a producer's INSERT of an urgent task or a retry would wait for
        # the claiming task's commit); the task's own work runs at that level too, as on
        # PostgreSQL (its default) and in batch mode.  Not on a server that logs statements
        # (binlog_format=STATEMENT): there InnoDB refuses every write at READ COMMITTED.
        if not self._statement_binlog:
            session.execute(READ_COMMITTED)
        guard = MysqlGuard(repo, self.settings.queue_table, self.prefix)
        guard.limits.fair = self.settings.queue_fair_tenants  # (QUEUE_FAIR_TENANTS)
        return guard

    def notifier(self, session: DbSession,
                 has_idle: Optional[Callable[[], bool]] = None) -> ProbeNotifier:
        repo = TaskRepository(session, self.settings.queue_table)
        return ProbeNotifier(repo, self._control(session),
                             self.settings.queue_name, self.settings.queue_poll_interval,
                             halt=self._halt, prefix=self.prefix, has_idle=has_idle)

    def _control(self, session: DbSession) -> ControlRow:
        return ControlRow(session, validate_table_name(self.settings.queue_table, "QUEUE_TABLE",
                                                       session.dialect.name))

    def admin_locker(self, session: DbSession) -> MysqlLocker:
        return MysqlLocker(session, self.prefix)

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        if payload == HALT_PAYLOAD:
            self._control(session).request_halt()
        # Idle workers poll the probe: nothing to send.

    def task_keys(self, task_id: int) -> List[LockKey]:
        return [task_lock_key(self.settings.queue_table, task_id)]

    def classify(self, exc: BaseException) -> Fault:
        return classify(exc)

