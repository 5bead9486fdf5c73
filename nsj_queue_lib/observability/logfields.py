"""Structured log fields: the task context on every record, and LOG_FORMAT=json.

`ContextFilter` (attached to the handlers by `log.configure_logging` and to the
Loki handler) adds to each record the fields of the task its thread is running
(set by the runtime's TaskObserver, nsj_queue_lib.observability.observe): ``queue``,
``task_id``, ``attempt`` and ``worker_id`` (host:pid); ``duration`` comes with
the line that ends a task.  `JsonFormatter` writes a record as one JSON object
per line:

    {"time": "2026-11-23T14:05:01.123Z", "level": "INFO", "logger": "...",
     "message": "...", "queue": "fila", "task_id": 42, "attempt": 1,
     "duration": 0.012, "worker_id": "host:1234", "thread": "MainThread"}

(plus ``exception`` when there is a traceback; fields without a value are
null).  The Loki handler sends the same fields as structured metadata.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
from typing import Any, Dict, Optional, Tuple

from nsj_queue_lib.observability.observe import task_context, worker_id

FIELDS = ("queue", "task_id", "attempt", "duration", "worker_id")

FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """logging.Formatter(FORMAT) whose asctime text is made once per second: the same
    text, without localtime() and strftime() for every record (a line per task)."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._stamp: Tuple[int, str] = (-1, "")  # (second, its strftime text), swapped whole

    def formatTime(self, record: logging.LogRecord, datefmt: Optional[str] = None) -> str:
        if datefmt or self.converter is not time.localtime or not self.default_msec_format:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        stamp = self._stamp
        if stamp[0] != second:
            stamp = (second, time.strftime(self.default_time_format, time.localtime(second)))
            self._stamp = stamp
        return self.default_msec_format % (stamp[1], record.msecs)


class ContextFilter(logging.Filter):
    """Adds the task context fields to each record (never drops a record)."""

    def __init__(self, queue: Optional[str] = None) -> None:
        super().__init__()
        self.queue = queue
        self.worker_id = worker_id()

    def filter(self, record: logging.LogRecord) -> bool:
        context = task_context()
        for name in FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, context.get(name))
        if record.queue is None:  # type: ignore[attr-defined]
            record.queue = self.queue
        if record.worker_id is None:  # type: ignore[attr-defined]
            record.worker_id = self.worker_id
        return True


def record_fields(record: logging.LogRecord) -> Dict[str, Any]:
    """The structured fields of a record (after ContextFilter), None where absent."""
    return {name: getattr(record, name, None) for name in FIELDS}


def _time(record: logging.LogRecord) -> str:
    moment = _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        data: Dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **record_fields(record),
            "thread": record.threadName,
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exception"] = record.exc_text
        if record.stack_info:
            data["stack"] = record.stack_info
        return json.dumps(data, ensure_ascii=False, default=str)


def loki_metadata(record: logging.LogRecord) -> Dict[str, str]:
    """Loki structured metadata of a record: the fields that have a value, as strings
    (queue and level are stream labels already)."""
    out = {"logger": record.name}
    for name, value in record_fields(record).items():
        if value is not None and name != "queue":
            out[name] = str(value)
    return out
