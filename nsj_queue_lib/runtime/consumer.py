"""The consumer loop: wait for work, claim, run, repeat; reconnect when the DB is lost."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from nsj_queue_lib.backoff import Backoff
from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.errors import SCHEMA_MISMATCH, Fault
from nsj_queue_lib.db.identifiers import display
from nsj_queue_lib.db.limits import NOT_IN_TRANSACTION_POOL, NOT_ON_SOCKET
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import (
    BUSY_FIRST,
    BUSY_MAX,
    HALT_PAYLOAD,
    Backend,
    Notifier,
    PauseView,
    TaskGuard,
    until_due,
)
from nsj_queue_lib.engine.fleet_mode import fleet_mode
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.observability.observe import TaskObserver
from nsj_queue_lib.runtime.batch import Batch, BatchClaimer, BatchRunner
from nsj_queue_lib.runtime.maintenance import AdminJobs
from nsj_queue_lib.runtime.pause import CHECK_INTERVAL, PauseGate
from nsj_queue_lib.runtime.reconnect import LoopTexts, reconnecting
from nsj_queue_lib.runtime.router import Router
from nsj_queue_lib.runtime.runner import TaskRunner
from nsj_queue_lib.runtime.service import OutageReport
from nsj_queue_lib.scheduling.hint import SCHEDULE_ORIGIN
from nsj_queue_lib.text import one_line

logger = logging.getLogger(__name__)


def _claim_one(guard: TaskGuard) -> Optional[dict]:
    claimed = guard.claim(1)
    return claimed[0] if claimed else None


CONSUMER_TEXTS = LoopTexts(lost="conexão com o banco perdida",
                           restarting="worker reiniciando após erro inesperado",
                           unexpected="Erro inesperado no worker; reiniciando em %.1f s")

# (BUSY_FIRST, BUSY_MAX, engine/base.py: the back-off when due rows exist but none could
# be claimed, shared with the idle turns that claim)


class Consumer:
    """Runs tasks one at a time until `stop` is set (signal or HALT)."""

    def __init__(self, settings: Settings, backend: Backend, router: Router,
                 stop: threading.Event,
                 on_connect: Optional[Callable[[DbSession], None]] = None,
                 observer: Optional[TaskObserver] = None,
                 slots: Optional[AdminJobs] = None) -> None:
        self.settings = settings
        # The worker's admin jobs, run on this consumer's connection between two tasks
        # (shared by the task threads of a process; None: no jobs).
        self.slots = slots if slots is not None else AdminJobs([])
        # The one object told about claims, outcomes and reconnects (metrics, log context).
        self.observer = observer or TaskObserver(settings.queue_name, settings.queue_max_retry)
        self.backend = backend
        self.router = router
        self.stop = stop
        self.on_connect = on_connect
        self.tasks_done = 0
        self.halted = False
        # Reconnect attempts: every one logged for a short outage, then one line a minute.
        self._outage = OutageReport("Conexão indisponível", logger, burst=5, every=60.0)
        self.paused = False
        self._gate: Optional[PauseGate] = None
        # None while connected; else why not (the heartbeat reports it: the worker keeps
        # no connection of its own just to check the database).
        self.db_problem: Optional[str] = None
        # After the task running now, the next step is a claim (not the listener turn).
        self._claim_next = False
        self._limits_told = False  # the refusal of the queue's limits was logged

    def run(self) -> None:
        reconnecting(self.settings, self.stop, self._serve, texts=CONSUMER_TEXTS,
                     outage=self._outage, log=logger, report=self._report,
                     on_lost=self.observer.connection_lost)

    def _report(self, problem: Optional[str]) -> None:
        self.db_problem = problem

    def _serve(self, session: DbSession, backoff: Backoff) -> None:
        settings = self.settings
        repo = TaskRepository(session, settings.queue_table, settings.queue_subscriber_table,
                              legacy=fleet_mode(settings))
        self.backend.check(session)
        notifier = self.backend.notifier(session)
        guard: Optional[TaskGuard] = None
        try:
            guard = self.backend.guard(session, repo)
            self._check_table(repo)
            notifier.listen()
            self.db_problem = None
            # Idle workers that take turns, the holder claiming (PostgreSQL: one is woken
            # per wake-up); None: this loop waits and claims itself.
            turn = notifier.claiming_turn(settings.queue_table, guard, repo)
            # (with the turn, only claims made while holding it read the empty-claim probe)
            repo.empty_claim_probe = turn is None
            woke = False  # the last claim followed a wake-up of the listener turn
            runner = TaskRunner(settings, repo, guard, self.router)
            claim: Callable[[], Any] = lambda: _claim_one(guard)  # noqa: E731
            batch_runner = None
            if settings.queue_batch_size > 1:  # batch mode: claim() returns a Batch
                claim = BatchClaimer(guard, self.backend.capabilities,
                                     settings.queue_batch_size).claim
                batch_runner = BatchRunner(settings, repo, self.router, self.observer)
            if (settings.queue_fair_tenants
                    and not self.backend.capabilities.concurrency_limits):
                logger.warning("QUEUE_FAIR_TENANTS não vale neste modo (cliente/servidor ou "
                               "DB_POOL_MODE=transaction): o claim segue a ordem de sempre")
            if self.on_connect is not None:
                self.on_connect(session)
            # (after the start checks of on_connect: 'connected' means ready to claim)
            logger.info("Worker conectado; aguardando tarefas da fila %s", settings.queue_table)
            busy = BUSY_FIRST
            gate = self._gate = PauseGate(session, settings.queue_table, fleet=repo.fleet,
                                          limits=getattr(guard, "limits", None))
            host = _Host(self, notifier, claim, gate)
            if batch_runner is None:
                guard.claim_next = self._claims_next
            # (MySQL native: a stop ends a wait for the idle turn; the turn's probe reads
            # the pause flag)
            notifier.attach(self.stop.is_set, gate.note)
            pending = None  # a task the listener turn already claimed
            # (a task already claimed runs even when a stop came meanwhile)
            while pending is not None or not self.stop.is_set():
                if pending is not None:
                    tarefa, pending = pending, None
                else:
                    if self.slots.due():
                        # Between two tasks (or batches), outside any transaction.
                        self.slots.run_due(session, guard.claimed_ahead())
                        # A stop or HALT that came during the job: no further claim.
                        self._handle(notifier.wait(0))
                        if self.stop.is_set():
                            continue
                    self.paused = gate.is_paused() or self._limits_refused(gate)
                    if self.paused:  # nsj-queue pause: claim nothing; wake for HALT/resume
                        guard.settle()
                        if self.backend.capabilities.wakes_when_due:
                            # (its wake-ups mean "a task is due": with a backlog every
                            # wait would end at once; only HALT and resume matter here)
                            self.stop.wait(CHECK_INTERVAL)
                            self._handle(notifier.wait(0))
                        else:
                            self._handle(notifier.wait(CHECK_INTERVAL))
                        continue
                    tarefa = claim()
                    if tarefa is not None:
                        # QUEUE_CONCURRENCY: wake one more idle thread; MySQL native: hand
                        # the idle turn on before the task runs.
                        notifier.claimed()
                # Reset only once a claim went through: in client/server mode listen()
                # tolerates a dead server, so reaching this loop proves nothing yet.
                backoff.reset()
                self._outage.recovered()
                if isinstance(tarefa, Batch) and batch_runner is not None:
                    try:
                        self.tasks_done += batch_runner.run(tarefa)
                    finally:
                        # Concurrency limits: the batch's slots, once it committed or not.
                        limited = getattr(guard, "limited", None)
                        if limited is not None and limited.held:
                            limited.release_all()
                elif tarefa is not None:
                    if tarefa["origem"] == SCHEDULE_ORIGIN:  # (the queue has schedules)
                        gate.schedules.poke()
                    # (after it: back to the listener turn, or claim at once; see below)
                    self._claim_next = turn is None or not (turn.kept or woke)
                    self.observer.claimed(tarefa)
                    self.observer.finished_task(tarefa, runner.run(tarefa))
                    self.tasks_done += 1
                if tarefa is not None:
                    busy = BUSY_FIRST
                    if turn is not None and turn.kept:
                        # Its claim kept the listener turn (a short lone task): back to
                        # holding it; what arrived meanwhile is news, read there.
                        if not self.stop.is_set():
                            pending, woke, busy = turn.wait_claim(host, busy)
                            continue
                        turn.release()
                    # Read what arrived meanwhile (without waiting): HALT must stop a
                    # busy worker too, and the backlog of wake-ups must not grow.
                    self._handle(notifier.wait(0))
                    if turn is not None and woke and not self.stop.is_set():
                        # Woken by a notification: meanwhile the next idle worker has
                        # been listening; rather than a claim that would mostly find
                        # nothing, queue for the turn (its probe sees what is due).
                        pending, woke, busy = turn.wait_claim(host, busy)
                    continue
                self.observer.empty_claim()
                if turn is not None:
                    pending, woke, busy = turn.wait_claim(host, busy)
                else:
                    guard.settle()
                    busy = self._idle_wait(repo, notifier, busy)
        finally:
            notifier.close()
            if guard is not None:
                guard.close()

    def _limits_refused(self, gate: PauseGate) -> bool:
        """The queue has concurrency limits and this backend does not honour them (the
        client/server mode, DB_POOL_MODE=transaction): no claim, as if paused, said once per
        change."""
        refused = gate.limits.active and not self.backend.capabilities.concurrency_limits
        if refused and not self._limits_told:
            logger.error(NOT_IN_TRANSACTION_POOL if self.backend.capabilities.leases
                         else NOT_ON_SOCKET)
        self._limits_told = refused
        return refused

    def _claims_next(self) -> bool:
        """Asked by the guard at a task's success (inside its transaction, so nothing is
        read from the database here): whether the loop's next step is a claim."""
        gate = self._gate
        return (self._claim_next and not self.stop.is_set()
                and not (gate is not None and gate.paused) and not self.slots.due())

    @property
    def pause_state(self) -> dict:
        """The last pause flag read before a claim (for the heartbeat file)."""
        gate = self._gate
        if gate is None:
            return {"pausada": None, "motivo": None}
        return {"pausada": gate.paused, "motivo": gate.reason}

    def _check_table(self, repo: TaskRepository) -> None:
        try:
            repo.task_seconds_to_next_due()
        except Exception as exc:
            fault = self.backend.classify(exc)
            if fault not in SCHEMA_MISMATCH:
                raise
            table = display(self.settings.queue_table, repo.dialect.name)
            schema, _, fila = table.rpartition(".")
            gen = (f"python -m nsj_queue_lib.db_gen {schema or 'public'} {fila}"
                   + (" --mysql" if self.settings.is_mysql else ""))
            if fault is Fault.NO_TABLE:
                raise ConfigError(f"QUEUE_TABLE: a tabela '{table}' não existe neste banco "
                                  f"(crie-a com o DDL de: {gen})") from None
            detail = one_line(str(exc), 200)
            raise ConfigError(
                f"QUEUE_TABLE: a tabela '{table}' não tem as colunas de uma fila ({detail}); "
                f"compare com o DDL de: {gen}") from None

    def _idle_wait(self, repo: TaskRepository, notifier: Notifier, busy: float) -> float:
        # Wake at the earliest of: a notification, the next scheduled task or retry
        # becoming due, the periodic poll (QUEUE_WAIT_NOTIFY_INTERVAL), or a stop.
        timeout = self.slots.cap(self.settings.queue_wait_notify_interval)
        probe = repo.take_empty_claim_due()  # (PostgreSQL: the empty claim just made)
        if probe is not None:
            next_due = probe[0]
        elif self.backend.capabilities.wakes_when_due:
            next_due = None  # (MySQL native: one idle worker of the fleet probes, for all)
        else:
            next_due = repo.task_seconds_to_next_due()
        if next_due is not None and next_due <= 0:
            timeout, busy = min(timeout, busy), min(busy * 2, BUSY_MAX)
        else:
            busy = BUSY_FIRST
            timeout = until_due(timeout, next_due, repo)
        self._wait_notes(notifier, timeout)
        return busy

    def _wait_notes(self, notifier: Notifier, timeout: float) -> bool:
        """Wait up to `timeout` for wake-ups (handled here), in slices (the notifier's
        `wait_slice`) so a stop request or a due admin job ends the wait; True when it
        ended early (a wake-up, a stop, an admin job due)."""
        remaining = timeout
        while remaining > 0:
            if self.stop.is_set() or self.slots.due():
                return True
            step = min(notifier.wait_slice, remaining)
            notes = notifier.wait(step)
            remaining -= step
            if notes:
                self._handle(notes)
                return True
        return False

    def _handle(self, notes: list) -> None:
        if any(n.payload == HALT_PAYLOAD for n in notes):
            logger.info("HALT recebido no canal %s: parando o worker", self.settings.queue_name)
            self.halted = True
            self.stop.set()


class _Host:
    """What the consumer lends a claiming idle turn (engine/base.py: `IdleHost`)."""

    def __init__(self, consumer: Consumer, notifier: Notifier, claim: Callable[[], Any],
                 gate: PauseView) -> None:
        self.stop = consumer.stop
        self.poll_interval = consumer.settings.queue_wait_notify_interval
        self.gate = gate
        self.claim = claim
        self.handle = consumer._handle
        self.admin_due = consumer.slots.due
        self.admin_cap = consumer.slots.cap
        self._consumer = consumer
        self._notifier = notifier

    def wait_notes(self, timeout: float) -> bool:
        return self._consumer._wait_notes(self._notifier, timeout)
