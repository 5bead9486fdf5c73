"""Concurrency per process (QUEUE_CONCURRENCY > 1): N task threads, one listener.

Each task thread is a `Consumer` with its own database connection (claims, runs and
commits its tasks as a single-threaded worker does).  One listener thread, with
one more connection, receives the queue's wake-ups (LISTEN, or the socket server)
and hands each one to ONE idle task thread; HALT stops them all.  The listener thread
does nothing else: the admin jobs (rescue, purge, notify) run on the task threads'
connections between two tasks (runtime/maintenance.py AdminJobs), so a long purge
delays neither a wake-up nor HALT.  The heartbeat is shared.  So a process holds
N + 1 connections, and a wake-up makes one claim in a process, not N.

The listener thread restarts itself after a lost connection or an unexpected error
(runtime/reconnect.py).  What ends it (a ConfigError: a socket server that now requires
TLS, say) ends the worker: the failure is logged, the health state says so at once
(`on_failure`), the task threads finish their tasks as on SIGTERM, and `run_threads`
raises it, so the process exits with code 2 (1 for anything else) and its supervisor
restarts it.  A worker without its listener would go on deaf to wake-ups and HALT.

The worker's code runs on several threads at once: `execute` (and the handlers of
pub/sub and webhook workers) must not keep per-task state on `self`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, List, Optional

from nsj_queue_lib.backoff import Backoff
from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import (
    HALT_PAYLOAD,
    Backend,
    Capabilities,
    Fault,
    Locker,
    LockKey,
    Notification,
    Notifier,
    TaskGuard,
)
from nsj_queue_lib.engine.postgres.listener_turn import HELD, LATE_TASK, ListenerTurn, take_stale
from nsj_queue_lib.exceptions import ConfigError, DatabaseUnavailable
from nsj_queue_lib.runtime.reconnect import LoopTexts, reconnecting
from nsj_queue_lib.runtime.service import OutageReport

logger = logging.getLogger(__name__)

LISTENER_TEXTS = LoopTexts(lost="listener sem conexão",
                           restarting="listener reiniciando após erro inesperado",
                           unexpected="Listener: erro inesperado; reiniciando em %.1f s",
                           stopped="listener parado por erro de configuração")

LISTEN_SLICE = 0.5  # seconds; bounds how long a stop request waits for the listener
IDLE_GRACE = 0.1  # seconds an idle thread between two waits still counts as idle


class WakeHub:
    """In-process wake-ups: each posted wake-up releases one waiting task thread."""

    def __init__(self, threads: int) -> None:
        self._cond = threading.Condition()
        self._tokens = 0
        self._limit = max(1, threads)
        self._halt = False
        self._waiting = 0
        self._idle_at = 0.0  # when an idle wait last ended
        self._claimed = False  # a task thread claimed since the listener last asked
        # Told when a task thread starts an idle wait (the listener's `slot_idle`).
        self.on_idle: Optional[Callable[[], None]] = None

    def has_idle(self) -> bool:
        """Some task thread is waiting for work (or was, a moment ago: an idle thread
        re-enters its wait every `Notifier.wait_slice`)."""
        with self._cond:
            return self._waiting > 0 or time.monotonic() - self._idle_at < IDLE_GRACE

    def pass_on(self) -> None:
        """A woken thread found work: wake one more idle thread, if any (one NOTIFY may
        stand for many tasks: PostgreSQL merges equal notifications of a transaction)."""
        with self._cond:
            self._claimed = True
            if self._waiting and self._tokens < self._waiting:
                self._tokens += 1
                self._cond.notify()

    def take_claimed(self) -> bool:
        """Whether a task thread claimed a task since the last call (asked by the listener)."""
        with self._cond:
            claimed, self._claimed = self._claimed, False
            return claimed

    def post(self, notes: List[Notification]) -> None:
        with self._cond:
            for note in notes:
                if note.payload == HALT_PAYLOAD:
                    self._halt = True
                    self._cond.notify_all()
                    return
                # More pending wake-ups than threads are useless: each thread re-claims
                # until it finds nothing anyway.
                self._tokens = min(self._tokens + 1, self._limit)
                self._cond.notify()

    def wait(self, timeout: float) -> List[Notification]:
        with self._cond:
            if not self._halt and self._tokens == 0 and timeout > 0:
                self._waiting += 1
                try:
                    hook = self.on_idle
                    if hook is not None:
                        hook()  # (takes only the notifier's own lock, briefly)
                    self._cond.wait(timeout)
                finally:
                    self._waiting -= 1
                    self._idle_at = time.monotonic()
            if self._halt:
                return [Notification("", HALT_PAYLOAD)]
            if self._tokens:
                self._tokens -= 1
                return [Notification("", "")]
            return []


class SharedNotifier(Notifier):
    """The Notifier a task thread sees: wake-ups come from the process's listener."""

    def __init__(self, hub: WakeHub, make_real: Any) -> None:
        self.hub = hub
        self._make_real = make_real  # the backend's own notifier, made only if needed
        self._real: Any = None

    def listen(self) -> None:
        """The listener thread listens for the whole process."""

    def wait(self, timeout: float) -> List[Notification]:
        return self.hub.wait(timeout)

    def notify(self, payload: str = "") -> None:
        if self._real is None:
            self._real = self._make_real()
        self._real.notify(payload)

    def claimed(self) -> None:
        """A claim found work: wake one more idle thread (the listener holds any turn, so
        `listener_turn` is the default None)."""
        self.hub.pass_on()

    def close(self) -> None:
        if self._real is not None:
            self._real.close()
            self._real = None


class SharedBackend:
    """The worker's backend, except that task threads get their wake-ups from the hub.

    Implements `Backend` by delegating every method to the real backend but `notifier`.
    """

    def __init__(self, backend: Backend, hub: WakeHub) -> None:
        self._backend = backend
        self.hub = hub

    @property
    def name(self) -> str:
        return self._backend.name

    @property
    def capabilities(self) -> Capabilities:
        # (read at each use: a socket backend's check() may narrow it)
        return self._backend.capabilities

    def check(self, session: DbSession) -> None:
        self._backend.check(session)

    def guard(self, session: DbSession, repo: TaskRepository) -> TaskGuard:
        return self._backend.guard(session, repo)

    def notifier(self, session: DbSession,
                 has_idle: Optional[Callable[[], bool]] = None) -> SharedNotifier:
        # (task threads read the hub; the Listener's own notifier competes for any turn)
        return SharedNotifier(self.hub, lambda: self._backend.notifier(session))

    def admin_locker(self, session: DbSession) -> Locker:
        return self._backend.admin_locker(session)

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        self._backend.wake_workers(session, payload)

    def task_keys(self, task_id: int) -> List[LockKey]:
        return self._backend.task_keys(task_id)

    def classify(self, exc: BaseException) -> Fault:
        return self._backend.classify(exc)


class Listener:
    """The thread that listens for the whole process and feeds the hub."""

    name = "listener_thread"

    def __init__(self, settings: Settings, backend: Any, hub: WakeHub,
                 stop: threading.Event,
                 on_failure: Callable[[], object] = lambda: None) -> None:
        self.settings = settings
        self.backend = backend
        self.hub = hub
        self.stop = stop
        self.on_failure = on_failure  # told once `problem` says why the thread ends
        self.problem: Optional[str] = "o listener ainda não se conectou"
        self.halted = False
        self.error: Optional[BaseException] = None  # what ended the thread (run_threads)
        self._outage = OutageReport("Listener: conexão indisponível", logger, burst=5,
                                    every=60.0)
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _deliver(self, notes: List[Notification]) -> None:
        if any(n.payload == HALT_PAYLOAD for n in notes):
            logger.info("HALT recebido no canal %s: parando todas as threads",
                        self.settings.queue_name)
            self.halted = True
            self.stop.set()
        if notes:
            self.hub.post(notes)

    def _listen_turn(self, turn: ListenerTurn, notifier: Any, session: DbSession) -> None:
        """PostgreSQL, while some task thread is idle: hold the queue's listener turn (as
        an idle single-threaded worker does), so a wake-up reaches one process of the
        fleet, not every process.  Hands the turn on after each wake-up, or when no task
        thread is idle any more.  While waiting for the turn it makes the waiters' late
        check (engine/postgres/listener_turn.py): a task due for more than LATE seconds while
        the holder runs a task it kept the turn through wakes one idle task thread."""
        got = turn.acquire(self.stop, self.settings.queue_wait_notify_interval)
        if got == LATE_TASK:
            self.hub.post([Notification("", "")])
        if got != HELD:
            self._deliver(turn.halts)  # (a HALT that came while waiting for the turn)
            return
        try:
            if turn.marked:
                self._deliver(turn.halts)  # the grant dropped the old news itself
            else:
                if turn.waited:
                    session.execute("SELECT 1")  # bring in what was queued while waiting
                self._deliver(take_stale(session.conn))
            # What arrived between the previous holder's hand-over and now was dropped
            # above: one idle thread claims once to cover it.
            self.hub.post([Notification("", "")])
            while not self.stop.is_set():
                notes = notifier.wait(LISTEN_SLICE)
                if notes:
                    self._deliver(notes)
                    return
                if not self.hub.has_idle():
                    return
        finally:
            try:
                turn.release()
            except DatabaseUnavailable:
                turn.forget()

    def _loop(self) -> None:
        try:
            reconnecting(
                self.settings, self.stop, self._serve, texts=LISTENER_TEXTS,
                outage=self._outage, log=logger, report=self._report,
                # (a refusal at start is the task threads' configuration error)
                refused_at_start="quiet",
                application_name=f"nsj_queue_lib:{self.settings.queue_name}")
        except BaseException as exc:  # the loop retries the rest: this ends the worker
            self.error = exc
            if isinstance(exc, ConfigError):
                logger.error("Listener parado por erro de configuração: %s. O worker termina "
                             "as tarefas em curso e sai com código 2, para ser reiniciado "
                             "pelo seu supervisor", exc)
            else:
                self.problem = "listener parado por erro inesperado"
                logger.error("Listener parado por erro inesperado; o worker termina as "
                             "tarefas em curso e sai com erro, para ser reiniciado pelo seu "
                             "supervisor", exc_info=True)
            try:
                self.on_failure()
            except Exception:
                logger.exception("Listener: falha ao registrar o estado de saúde")
            self.stop.set()

    def _report(self, problem: Optional[str]) -> None:
        self.problem = problem

    def _serve(self, session: DbSession, backoff: Backoff) -> None:
        notifier = self.backend.notifier(session, has_idle=self.hub.has_idle)
        notifier.attach(self.stop.is_set)  # (MySQL native: a stop ends a turn wait)
        self.hub.on_idle = notifier.slot_idle
        try:
            notifier.listen()
            self.problem = None
            backoff.reset()
            self._outage.recovered()
            # Task threads may have gone idle while this was reconnecting.
            self.hub.post([Notification("", "")])
            turn = notifier.listener_turn(self.settings.queue_table)
            if turn is not None:
                # (the late check reads the next due time from the index start: this
                # session claims nothing, so it has no claim position of its own)
                queries = TaskRepository(session, self.settings.queue_table).q
                turn.late_sql = queries["task_seconds_to_next_due_from"].replace(
                    "%(due_from)s", "NULL")
            while not self.stop.is_set():
                if turn is not None and self.hub.has_idle():
                    self._listen_turn(turn, notifier, session)
                    continue
                if self.hub.take_claimed():
                    # Told as a single-threaded worker's notifier is after its claim (MySQL
                    # native: the idle turn is handed on and the back-off for announced rows
                    # nobody could claim ends; else it grew at every announced task).
                    notifier.claimed()
                notes = notifier.wait(LISTEN_SLICE)
                if turn is not None:
                    # Not holding the turn: another process's listener is woken for
                    # new tasks; only HALT matters here.
                    notes = [n for n in notes if n.payload == HALT_PAYLOAD]
                self._deliver(notes)
        finally:
            self.hub.on_idle = None
            notifier.close()


def run_threads(consumers: List[Any], listener: Listener, stop: threading.Event) -> None:
    """Run every consumer on its own thread until all return; the calling (main) thread
    only waits, so signal handlers run at once.  What ends any thread (a ConfigError of a
    task thread or of the listener) stops all and is raised here."""
    errors: List[BaseException] = []

    def target(consumer: Any) -> None:
        try:
            consumer.run()
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=target, args=(c,), name=f"task_thread_{i}", daemon=True)
               for i, c in enumerate(consumers)]
    listener.start()
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(LISTEN_SLICE)
    stop.set()
    listener.join(LISTEN_SLICE * 4)
    if errors:
        raise errors[0]
    if listener.error is not None:
        raise listener.error
