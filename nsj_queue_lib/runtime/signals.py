"""SIGTERM/SIGINT handling: the first signal stops gracefully, the second exits at once."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any, Callable, Dict

from nsj_queue_lib.interrupt import interrupt_wait

logger = logging.getLogger(__name__)

EXIT_FORCED = 1


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signals(callback: Callable[[int], None]) -> Callable[[], None]:
    """Call `callback(signum)` on SIGTERM and SIGINT (main thread only: elsewhere nothing
    is installed); return a function restoring the previous handlers.

    The one place that installs signal handlers: the worker (`install`), the queue
    server and the dashboard.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: Dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        callback(signum)

    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def install(stop: threading.Event, grace_seconds: float,
            on_first: Callable[[], None] = lambda: None) -> Callable[[], None]:
    """The worker's handlers: the first signal sets `stop` (and gives the running task
    `grace_seconds`), the second exits at once; return a function restoring the old ones."""

    def first_then_force(signum: int) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            logger.warning("%s recebido novamente: saindo imediatamente", name)
            os._exit(EXIT_FORCED)
        logger.info("%s recebido: terminando a tarefa em curso e parando (segundo sinal "
                    "força a saída)", name)
        stop.set()
        # A task that ignores the stop request past the grace period is abandoned:
        # its transaction is rolled back by the database and the task is rescued later.
        timer = threading.Timer(grace_seconds, _force_exit, args=(grace_seconds,))
        timer.daemon = True
        timer.start()
        on_first()
        interrupt_wait()  # (last: it may raise into the main thread's idle wait)

    return on_stop_signals(first_then_force)


def _force_exit(grace: float) -> None:
    logger.error("A tarefa em curso não terminou em %.0f s após o pedido de parada; saindo", grace)
    os._exit(EXIT_FORCED)
