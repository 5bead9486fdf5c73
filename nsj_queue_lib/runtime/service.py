"""BackgroundService: the one thread lifecycle every background job reuses."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from nsj_queue_lib.exceptions import CoordinationError, DatabaseUnavailable
from nsj_queue_lib.text import one_line

logger = logging.getLogger(__name__)


class OutageReport:
    """Keeps the log of a recurring failure (a database or server outage) readable.

    The first `burst` failures are logged, one line each; after that at most one
    line every `every` seconds, saying how many attempts failed since the last
    line; the first success after failures logs one line.  No tracebacks: an
    outage is not a bug.
    """

    def __init__(self, what: str, log: logging.Logger, *, burst: int = 1,
                 every: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.log = log
        self.burst = burst
        self.every = every
        self.clock = clock
        self.failures = 0
        self._unreported = 0
        self._last_line = float("-inf")

    def failed(self, detail: str) -> None:
        now = self.clock()
        self.failures += 1
        self._unreported += 1
        if self.failures > self.burst and now - self._last_line < self.every:
            return
        extra = (f" ({self._unreported} tentativas falharam desde a mensagem anterior)"
                 if self._unreported > 1 else "")
        self.log.warning("%s: %s%s", self.what, one_line(detail, 500), extra)
        self._last_line = now
        self._unreported = 0

    def recovered(self) -> None:
        if self.failures:
            self.log.info("%s: restabelecido após %s tentativa(s) com falha", self.what,
                          self.failures)
            self.failures = 0
            self._unreported = 0
            self._last_line = float("-inf")


class BackgroundService:
    """A named thread that runs `run_once()` whenever `next_delay()` says.

    `start()` and `stop()` are idempotent; `stop()` only sets an event, so it
    is safe from signal handlers and before `start()`.  The loop never sleeps
    with time.sleep(): it waits on the stop event, so stopping is immediate.
    An exception in `run_once()` is logged with its traceback and the loop
    goes on (policy: background jobs never take the worker down); a database
    or queue server that is unavailable is an outage, not a bug: one line
    without traceback, repeats rate-limited (OutageReport).

    `wake()` ends the current delay early while `wakeable()` is true (a sender
    whose buffer filled up); with `final_run` the job runs once more after
    `stop()` (a sender flushing what is left).
    """

    name = "service"
    outage_every = 900.0  # seconds between two lines of one outage
    final_run = False
    announce = True  # log start and end (off for the Loki sender: no feedback)

    def __init__(self, stop_event: Optional[threading.Event] = None) -> None:
        self._stop = stop_event or threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.runs = 0
        self.after_run: Optional[Callable[[Any], None]] = None  # test hook
        self._outage: Optional[OutageReport] = None

    def run_once(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def next_delay(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def wakeable(self) -> bool:
        """Whether `wake()` may end the current delay (no by default)."""
        return False

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: Optional[float] = None) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _outage_report(self) -> OutageReport:
        if self._outage is None:
            self._outage = OutageReport(f"{self.name}: banco ou servidor indisponível", logger,
                                        every=self.outage_every)
        return self._outage

    def _sleep(self, delay: float) -> bool:
        """Wait `delay` seconds (less after `wake()` when wakeable); True once stopped."""
        if self.wakeable():
            self._wake.wait(delay)
            self._wake.clear()
            return self._stop.is_set()
        return self._stop.wait(delay)

    def _run_guarded(self) -> None:
        try:
            result = self.run_once()
        except (DatabaseUnavailable, CoordinationError) as exc:
            self._outage_report().failed(str(exc))
            result = None
        except Exception:
            logger.exception("%s: falha na execução", self.name)
            result = None
        else:
            if self._outage is not None:
                self._outage.recovered()
        self.runs += 1
        if self.after_run is not None:
            self.after_run(result)

    def _loop(self) -> None:
        if self.announce:
            logger.info("%s: iniciado", self.name)
        while not self._sleep(self.next_delay()):
            self._run_guarded()
        if self.final_run:
            self._run_guarded()
        if self.announce:
            logger.info("%s: finalizado", self.name)
