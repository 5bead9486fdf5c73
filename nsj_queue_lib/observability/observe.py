"""The one object the runtime reports to: `TaskObserver`.

The consumer calls it at four moments (a claim, an empty claim, a finished
task, a lost connection) and nothing else in the runtime knows about metrics
or log context.  The observer:

* keeps the counters and the duration histogram served by /metrics
  (nsj_queue_lib.observability.metrics);
* sets the task context (queue, task id, attempt, worker id) that the log
  filter adds to every record logged while a task runs (nsj_queue_lib.observability.logging_setup),
  and logs one line per finished task with its duration.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from bisect import bisect_left
from itertools import accumulate
from typing import Any, Dict, List, Optional, Tuple

# The name in every task log line (documented in docs/howto/monitorar.md), kept from
# before the move to observability/: log queries and filters select it.
logger = logging.getLogger("nsj_queue_lib.observe")

SUCESSO = "sucesso"
FALHA = "falha"
DEAD_LETTER = "dead_letter"
OUTCOMES = (SUCESSO, FALHA, DEAD_LETTER)

# Upper bounds (seconds) of the task duration histogram.
BUCKETS: Tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                              30.0, 60.0, 300.0)

_context = threading.local()


def worker_id() -> str:
    """host:pid of this process (the `worker_id` of log records)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def task_context() -> Dict[str, Any]:
    """The fields of the task the current thread is running ({} between tasks)."""
    return getattr(_context, "fields", None) or {}


def _set_context(fields: Optional[Dict[str, Any]]) -> None:
    _context.fields = fields


class Histogram:
    """Cumulative-bucket histogram in the Prometheus sense (not thread-safe by itself)."""

    def __init__(self, buckets: Tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        # Observations by the first bucket whose bound is >= the value (the last slot:
        # above every bound); `counts` adds them up when read (once per /metrics scrape),
        # so an observation (one per task) touches one slot instead of every bucket.
        self._hits = [0] * (len(buckets) + 1)
        self.total = 0
        self.sum = 0.0

    @property
    def counts(self) -> List[int]:
        """Cumulative count of each bucket (observations <= its bound)."""
        return list(accumulate(self._hits[:len(self.buckets)]))

    def observe(self, value: float) -> None:
        self._hits[bisect_left(self.buckets, value)] += 1
        self.total += 1
        self.sum += value


_FINISHED_SITE: Optional[Tuple[str, int, str]] = None  # the task line's (path, line, function)


def _site(frame: Any) -> Tuple[str, int, str]:
    """(pathname, lineno, funcName) of `frame` as findCaller() gives them; kept as the
    source location of the task line (one frame, one line: the same every time)."""
    global _FINISHED_SITE
    code = frame.f_code
    _FINISHED_SITE = (code.co_filename, frame.f_lineno, code.co_name)
    return _FINISHED_SITE


class TaskObserver:
    """Counters of one worker process and the per-task log context (thread-safe)."""

    def __init__(self, queue: str, max_retry: int) -> None:
        self.queue = queue
        self.max_retry = max_retry
        self.worker_id = worker_id()
        self.started = time.time()
        self._lock = threading.Lock()
        self.finished: Dict[str, int] = {o: 0 for o in OUTCOMES}
        self.taken_over = 0
        self.claims = 0
        self.empty_claims = 0
        self.reconnects = 0
        self.last_claim: Optional[float] = None  # unix time
        self.duration = Histogram()
        self._starts: Dict[Tuple[int, Any], float] = {}  # (thread, task id) -> start

    # -- called by the consumer ---------------------------------------------------
    def claimed(self, tarefa: dict) -> None:
        """A task was claimed by this thread and is about to run."""
        now = time.time()
        with self._lock:
            self.claims += 1
            self.last_claim = now
        self._starts[(threading.get_ident(), tarefa.get("id"))] = time.monotonic()
        _set_context({"queue": self.queue, "task_id": tarefa.get("id"),
                      "attempt": tarefa.get("tentativa"), "worker_id": self.worker_id})

    def empty_claim(self) -> None:
        """A claim found nothing to run (a wake-up without work)."""
        with self._lock:
            self.empty_claims += 1

    def finished_task(self, tarefa: dict, ok: Optional[bool],
                      seconds: Optional[float] = None) -> None:
        """The task's outcome is final: True success, False recorded failure, None taken
        over by another worker.  `seconds` is the run time when the caller measured it
        (batch mode reports after the batch's commit); else the time since `claimed`."""
        start = self._starts.pop((threading.get_ident(), tarefa.get("id")), None)
        if seconds is None:
            seconds = time.monotonic() - start if start is not None else 0.0
        if ok is None:
            outcome = None
        elif ok:
            outcome = SUCESSO
        elif int(tarefa.get("tentativa") or 0) >= self.max_retry:
            outcome = DEAD_LETTER  # sent to the dead-letter queue (or ended a dead chain)
        else:
            outcome = FALHA
        with self._lock:
            if outcome is None:
                self.taken_over += 1
            else:
                self.finished[outcome] += 1
                self.duration.observe(seconds)
        if logger.isEnabledFor(logging.INFO):
            # What logger.info() does, without its findCaller() (a walk of the stack, and
            # the frame's line number found by a scan of the code's line table: ~20k
            # instructions per task): the record's source location is this very line,
            # read from the frame once (the same every time).
            site = _FINISHED_SITE or _site(sys._getframe())
            task_id = tarefa.get("id")
            logger.handle(logger.makeRecord(
                logger.name, logging.INFO, site[0], site[1],
                "Tarefa %s terminou: %s em %.3f s",
                (task_id, outcome or "assumida por outro worker", seconds), None,
                site[2], {"duration": round(seconds, 6), "outcome": outcome,
                          "task_id": task_id, "attempt": tarefa.get("tentativa")}))
        _set_context(None)

    def given_up(self, tarefa: dict) -> None:
        """A claimed task goes back to the queue without an outcome here (batch mode: its
        batch was rolled back and runs again): counted as taken over, so every claim still
        ends in one outcome, and its start time is dropped."""
        self._starts.pop((threading.get_ident(), tarefa.get("id")), None)
        with self._lock:
            self.taken_over += 1
        logger.info("Tarefa %s devolvida à fila (lote desfeito)", tarefa.get("id"),
                    extra={"outcome": None, "task_id": tarefa.get("id"),
                           "attempt": tarefa.get("tentativa")})
        _set_context(None)

    def connection_lost(self) -> None:
        """The consumer lost its connection and will reconnect."""
        with self._lock:
            self.reconnects += 1
            mine = [k for k in list(self._starts) if k[0] == threading.get_ident()]
            for key in mine:  # tasks of this thread that will not finish here
                self._starts.pop(key, None)
        _set_context(None)

    # -- read by /metrics -----------------------------------------------------------
    def snapshot(self) -> Dict[str, Any]:
        with self._lock:
            h = self.duration
            return {
                "finished": dict(self.finished), "taken_over": self.taken_over,
                "claims": self.claims, "empty_claims": self.empty_claims,
                "reconnects": self.reconnects, "last_claim": self.last_claim,
                "started": self.started,
                "histogram": (h.buckets, list(h.counts), h.total, h.sum),
            }
