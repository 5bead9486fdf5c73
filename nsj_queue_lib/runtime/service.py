"""BackgroundService: the one thread lifecycle every background job reuses."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

logger = logging.getLogger(__name__)


class BackgroundService:
    """A named thread that runs `run_once()` whenever `next_delay()` says.

    `start()` and `stop()` are idempotent; `stop()` only sets an event, so it
    is safe from signal handlers and before `start()`.  The loop never sleeps
    with time.sleep(): it waits on the stop event, so stopping is immediate.
    An exception in `run_once()` is logged with its traceback and the loop
    goes on (policy: background jobs never take the worker down).
    """

    name = "service"

    def __init__(self, stop_event: Optional[threading.Event] = None) -> None:
        self._stop = stop_event or threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.runs = 0
        self.after_run: Optional[Callable[[Any], None]] = None  # test hook

    def run_once(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def next_delay(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: Optional[float] = None) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _loop(self) -> None:
        logger.info("%s: iniciado", self.name)
        while not self._stop.wait(self.next_delay()):
            try:
                result = self.run_once()
            except Exception:
                logger.exception("%s: falha na execução", self.name)
                result = None
            self.runs += 1
            if self.after_run is not None:
                self.after_run(result)
        logger.info("%s: finalizado", self.name)
