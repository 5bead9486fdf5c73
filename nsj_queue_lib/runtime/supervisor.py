"""WorkerRuntime: wiring, start-up checks, shutdown order and exit codes."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, List, Optional

from nsj_queue_lib.compat.coexistence import CompatWatch
from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.dialect import dialect_for_driver
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.select import make_backend
from nsj_queue_lib.exceptions import ConfigError, CoordinationError, DatabaseUnavailable
from nsj_queue_lib.observability.health import HeartbeatService
from nsj_queue_lib.observability.metrics import worker_endpoint
from nsj_queue_lib.observability.observe import TaskObserver
from nsj_queue_lib.runtime import signals
from nsj_queue_lib.runtime.capacity import check_connection_capacity
from nsj_queue_lib.runtime.concurrency import Listener, SharedBackend, WakeHub, run_threads
from nsj_queue_lib.runtime.consumer import Consumer
from nsj_queue_lib.runtime.maintenance import AdminJobs, RetryService, admin_services
from nsj_queue_lib.runtime.router import Router
from nsj_queue_lib.scheduling.job import ScheduleJob

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2

JOIN_TIMEOUT = 10.0


class WorkerRuntime:
    """Everything behind `WorkerBase.run()`."""

    def __init__(self, settings: Settings, router: Router,
                 extra_services: Optional[List[Any]] = None) -> None:
        self.settings = settings
        self.router = router
        self.stop = threading.Event()
        self.backend = make_backend(settings)
        # The admin jobs (rescue, purge, notify) run on a connection the worker holds
        # anyway (see runtime/maintenance.py): one connection per task thread.
        self.slots = AdminJobs(admin_services(settings, self.backend, self.stop))
        # Periodic tasks (nsj-queue schedule): nothing while the queue has none.
        if settings.queue_schedules:
            self.slots.add(ScheduleJob(settings.queue_table))
        # The look for 1.2.2 workers (and the mode of the queue), at start and every minute.
        self.compat_watch: Optional[CompatWatch] = None
        if dialect_for_driver(settings.db_driver).mixed_fleet:
            self.compat_watch = CompatWatch(settings)
            self.slots.add(self.compat_watch)
        self.services: List[Any] = list(extra_services or [])
        # Heartbeat file for container probes (python -m nsj_queue_lib.health).
        # The database check is the consumer's own connection state (one connection per
        # worker process): a lost connection fails a statement or, idle, its keepalives.
        self.heartbeat = HeartbeatService(settings, self.stop, tasks_done=self.tasks_done,
                                          db_check=self.db_problem,
                                          pause_check=lambda: self.consumer.pause_state)
        self.services.append(self.heartbeat)
        self.observer = TaskObserver(settings.queue_name, settings.queue_max_retry)
        self.listener: Optional[Listener] = None
        if settings.queue_concurrency > 1:
            # N task threads (a connection each) fed by one listener thread.
            hub = WakeHub(settings.queue_concurrency)
            shared = SharedBackend(self.backend, hub)
            # The listener thread only listens; the admin jobs run on the task threads'
            # connections between their tasks (whichever thread is free first).
            # A listener that ends ends the worker; the health state says why at once.
            self.listener = Listener(settings, self.backend, hub, self.stop,
                                     on_failure=self.heartbeat.run_once)
            self.consumers = [
                Consumer(settings, shared, router, self.stop,
                         on_connect=(self._on_connect if i == 0
                                     else lambda _s: self.heartbeat.mark_connected()),
                         observer=self.observer, slots=self.slots)
                for i in range(settings.queue_concurrency)]
        else:
            self.consumers = [Consumer(settings, self.backend, router, self.stop,
                                       on_connect=self._on_connect, observer=self.observer,
                                       slots=self.slots)]
        self.consumer = self.consumers[0]
        self.on_stop: List[Callable[[], None]] = [self.heartbeat.close, router.close]
        self._connected_once = False
        self._threads_started = False
        # Opt-in /metrics and /healthz (METRICS_PORT); bound in run().
        self.metrics = (worker_endpoint(settings, self.observer, self.heartbeat)
                        if settings.metrics_port else None)
        if self.metrics is not None:  # its queue gauges are read on the worker's connection
            self.slots.add(self.metrics.gauges.worker_job())  # type: ignore[attr-defined]

    def tasks_done(self) -> int:
        return sum(c.tasks_done for c in self.consumers)

    def db_problem(self) -> Optional[str]:
        """None when every task thread (and the listener) has a working connection."""
        problems = [c.db_problem for c in self.consumers if c.db_problem]
        if self.listener is not None:
            if self.listener.problem:
                problems.append(self.listener.problem)
            if self._threads_started and not self.listener.alive() and not self.stop.is_set():
                problems.append("a thread do listener parou")
        if len(self.consumers) > 1 and problems:
            return f"{len(problems)} de {len(self.consumers)} threads: " + "; ".join(
                sorted(set(problems)))
        return problems[0] if problems else None

    def _on_connect(self, session: DbSession) -> None:
        """The (first) consumer is connected: its `session` serves the start-up checks."""
        self.heartbeat.mark_connected()
        if not self._connected_once:
            self._connected_once = True
            self._warn_channel_name()
            if self.compat_watch is not None:
                # (before the rescue: it takes 1.2.2's keys only in mixed-fleet mode)
                self.slots.run_now(self.compat_watch, session)
        self._rescue_once(session)

    def _warn_channel_name(self) -> None:
        # Only once the table is known to exist: on a missing table the clear error
        # comes first, not this (then misleading) hint.
        settings = self.settings
        if settings.queue_table.split(".")[-1] != settings.queue_name:
            logger.warning("QUEUE_NAME (%s) difere do nome da tabela (%s): a trigger gerada "
                           "pelo db_gen notifica o canal com o nome da tabela",
                           settings.queue_name, settings.queue_table)

    def _rescue_once(self, session: DbSession) -> None:
        # At start and after each reconnect: rescue tasks whose worker died (maybe
        # this very process before a crash) instead of waiting for the next slot; on
        # the consumer's connection, before its first claim (it holds no task yet).
        rescue = next(j for j in self.slots.jobs if isinstance(j, RetryService))
        try:
            rescue.run_on(session)
        except (DatabaseUnavailable, CoordinationError) as exc:
            logger.warning("Resgate inicial não executado: %s", exc)

    def run(self) -> int:
        restore = signals.install(self.stop, self.settings.shutdown_timeout)
        try:
            if self.metrics is not None:
                self.metrics.start()
                self.on_stop.insert(0, self.metrics.stop)
            for service in self.services:
                service.start()
            # Shutdown order: the consumer returns only after its current task has
            # committed (its lock and connection stay alive until then, so no other
            # worker rescues a task that is still running); then the background
            # threads (heartbeat, extra services) stop; then connections close.
            if self.listener is not None:
                check_connection_capacity(self.settings)
                self._threads_started = True
                run_threads(self.consumers, self.listener, self.stop)
            else:
                self.consumer.run()
        finally:
            self.stop.set()
            for service in self.services:
                service.join(JOIN_TIMEOUT)
            for callback in self.on_stop:
                callback()
            restore()
        logger.info("Worker finalizado (%s tarefas executadas)", self.tasks_done())
        return EXIT_OK


def run_worker(build: Callable[[Settings], WorkerRuntime],
               settings: Optional[Settings] = None) -> int:
    """Read settings, build the runtime and run it; return the process exit code."""
    from nsj_queue_lib.observability.logging_setup import configure_logging

    try:
        settings = settings or Settings.from_env()
    except ConfigError as exc:
        configure_logging(None)
        logger.error("%s", exc)
        return EXIT_CONFIG
    configure_logging(settings)
    try:
        runtime = build(settings)
    except ConfigError as exc:
        logger.error("%s", exc)
        return EXIT_CONFIG
    try:
        return runtime.run()
    except ConfigError as exc:
        logger.error("%s", exc)
        return EXIT_CONFIG
