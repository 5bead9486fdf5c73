"""Log records pushed to Grafana Loki in batches, never slowing the code that logs.

`install_loki_handler(settings)` (called by `log.configure_logging` when
GRAFANA_URL is set) adds a `LokiHandler` to the root logger.  `emit()` only
formats the record and appends it to a bounded in-memory buffer; a daemon
thread (`LokiSender`, on the shared BackgroundService lifecycle) sends the
buffer to Loki's push API (GRAFANA_URL is the full push URL, e.g.
http://loki:3100/loki/api/v1/push) every `flush_interval` seconds or as soon as
`batch_size` records are waiting, with an HTTP timeout.  So a slow,
hanging or dead Loki never blocks a task:

* when the buffer is full, new records are dropped and counted;
* a batch that Loki does not accept (error, timeout) is dropped and counted,
  and the thread waits (exponential back-off up to `backoff_max`) before the
  next try, while the buffer keeps absorbing (and dropping) records;
* the count of dropped records goes to Loki in the next accepted batch, as a
  warning line, and to the local log when Loki comes back.

Labels are stable and few: env (ENV), queue (QUEUE_NAME) and level.  The
host and pid are in the line, not in labels, so restarts do not create new
streams.  Credentials may be given in the URL (https://user:token@host/...):
they are sent as HTTP basic auth and never logged; a query string (a tenant
or a token some gateways take there) stays in the push URL, alone or with
credentials, but log lines show the URL without credentials and query.
Records logged by the sending thread itself are not sent (no feedback loop).
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Deque, Dict, List, Optional, Tuple

from nsj_queue_lib.backoff import Backoff
from nsj_queue_lib.config import Settings
from nsj_queue_lib.observability.logfields import ContextFilter, JsonFormatter, loki_metadata
from nsj_queue_lib.observability.logsafe import protect_handler
from nsj_queue_lib.runtime.service import BackgroundService
from nsj_queue_lib.text import redact_url, without_credentials

logger = logging.getLogger(__name__)

# (timestamp ns, level, line, structured metadata)
Entry = Tuple[int, str, str, Dict[str, str]]

LINE_FORMAT = "{host} pid=%(process)d [%(threadName)s] %(name)s %(levelname)s: %(message)s"

_installed: Optional[LokiHandler] = None


def _split_credentials(url: str) -> Tuple[str, Optional[str]]:
    """(push URL without credentials but with its query string, Authorization header
    value or None)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return without_credentials(url), f"Basic {token}"


class LokiHandler(logging.Handler):
    """Buffers formatted records and pushes them to Loki from a background thread."""

    def __init__(self, url: str, labels: Dict[str, str], *, batch_size: int = 500,
                 flush_interval: float = 1.0, capacity: int = 10000, timeout: float = 5.0,
                 backoff_max: float = 30.0, close_timeout: float = 2.0) -> None:
        super().__init__()
        self.url, self._auth = _split_credentials(url)  # the push URL keeps its query
        self.shown_url = redact_url(url)  # for log lines: no credentials, no query
        self.labels = dict(labels)
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.capacity = capacity
        self.timeout = timeout
        self.backoff_max = backoff_max
        self.close_timeout = close_timeout
        self.setFormatter(logging.Formatter(LINE_FORMAT.format(host=socket.gethostname())))
        self._buf: Deque[Entry] = collections.deque()
        self._mutex = threading.Lock()
        self._dropped = 0  # not yet reported to Loki
        self.dropped_total = 0
        self.sent_batches = 0
        self.sent_records = 0
        self.failed_batches = 0
        self._failing = False
        self.structured_metadata = True
        self._sender = LokiSender(self)
        self._sender.start()

    # -- producer side (any thread; never blocks on the network) ----------------
    def emit(self, record: logging.LogRecord) -> None:
        if threading.current_thread() is self._sender.thread:
            return
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        entry = (int(record.created * 1e9), record.levelname.lower(), line,
                 loki_metadata(record))
        with self._mutex:
            if len(self._buf) >= self.capacity:
                self._dropped += 1
                self.dropped_total += 1
                return
            self._buf.append(entry)
            full = len(self._buf) >= self.batch_size
        if full:
            self._sender.wake()

    def flush(self) -> None:
        """Ask the thread to send now (does not wait)."""
        self._sender.wake()

    def close(self) -> None:
        """Send what is buffered, waiting at most `close_timeout` seconds."""
        if not self._sender.stopped:
            self._sender.stop()
            self._sender.join(self.close_timeout)
        super().close()

    # -- sender thread ------------------------------------------------------------
    def _take(self) -> Tuple[List[Entry], int]:
        with self._mutex:
            n = min(len(self._buf), self.batch_size)
            batch = [self._buf.popleft() for _ in range(n)]
            dropped, self._dropped = self._dropped, 0
        return batch, dropped

    def _payload(self, batch: List[Entry], dropped: int) -> bytes:
        streams: Dict[str, List[List[Any]]] = {}
        for ts, level, line, meta in batch:
            # Structured metadata (task id, attempt, worker id, ...): Loki >= 2.9; turned
            # off by itself if this Loki refuses it.
            value: List[Any] = [str(ts), line, meta] if meta and self.structured_metadata \
                else [str(ts), line]
            streams.setdefault(level, []).append(value)
        if dropped:
            notice = (f"nsj_queue_lib: {dropped} registros de log descartados antes de chegar "
                      "ao Loki (buffer cheio ou Loki indisponível)")
            streams.setdefault("warning", []).append([str(time.time_ns()), notice])
        body = {"streams": [
            {"stream": dict(self.labels, level=level),
             "values": sorted(values, key=lambda v: int(v[0]))}
            for level, values in streams.items()]}
        return json.dumps(body, ensure_ascii=False).encode("utf-8")

    def _send(self, batch: List[Entry], dropped: int) -> bool:
        request = urllib.request.Request(self.url, data=self._payload(batch, dropped),
                                         method="POST")
        request.add_header("Content-Type", "application/json")
        if self._auth:
            request.add_header("Authorization", self._auth)
        retry = True
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            # 4xx other than 429: Loki refuses these records (too old, too big, ...) and
            # would refuse them again; anything else is worth another try.
            retry = exc.code == 429 or exc.code >= 500
            reason = f"HTTP {exc.code}"
            if exc.code == 400 and self.structured_metadata and any(e[3] for e in batch):
                # An older Loki (or structured metadata disabled): send plain lines.
                self.structured_metadata = False
                retry = True
                logger.warning("Loki (%s) recusou metadados estruturados; enviando só as "
                               "linhas", self.shown_url)
        except Exception as exc:  # timeout, refused, DNS, reset ...
            reason = f"{type(exc).__name__}: {exc}"
        else:
            self.sent_batches += 1
            self.sent_records += len(batch)
            if self._failing:
                self._failing = False
                logger.warning("Loki voltou a responder (%s); %s registros de log tinham sido "
                               "descartados", self.shown_url, dropped)
            return True
        self.failed_batches += 1
        with self._mutex:
            # Put the batch back in front (as much as fits) for the next try.
            keep = batch[:max(0, self.capacity - len(self._buf))] if retry else []
            self._buf.extendleft(reversed(keep))
            lost = len(batch) - len(keep)
            self._dropped += dropped + lost
            self.dropped_total += lost
        if not self._failing:
            self._failing = True
            logger.warning("Falha ao enviar logs ao Loki (%s): %s; os registros ficam no buffer "
                           "(até %s) e os excedentes são descartados e contados",
                           self.shown_url, reason, self.capacity)
        return False


class LokiSender(BackgroundService):
    """Sends the handler's buffer every `flush_interval` seconds, or at once when woken
    (buffer full, flush); while Loki fails it waits the whole back-off (a full buffer
    must not make it hammer Loki); after stop it sends what is left once more."""

    name = "loki_push"
    final_run = True
    announce = False  # its own records are not sent; keep the local log quiet too

    def __init__(self, handler: LokiHandler) -> None:
        super().__init__()
        self.handler = handler
        self.fail_delay = 0.0
        # 1 s doubling up to backoff_max, no jitter (one sender per process).
        self._backoff = Backoff(1.0, handler.backoff_max, jitter=1.0)

    @property
    def thread(self) -> Optional[threading.Thread]:
        return self._thread

    def next_delay(self) -> float:
        return self.fail_delay or self.handler.flush_interval

    def wakeable(self) -> bool:
        return not self.fail_delay

    def run_once(self) -> None:
        while True:
            batch, dropped = self.handler._take()
            if not batch and not dropped:
                return
            if not self.handler._send(batch, dropped):
                self.fail_delay = self._backoff.next()
                return
            self.fail_delay = 0.0
            self._backoff.reset()


def install_loki_handler(settings: Settings, **options: Any) -> Optional[LokiHandler]:
    """Add the Loki handler to the root logger (once); None when GRAFANA_URL is not set."""
    global _installed
    if not settings.grafana_url:
        return None
    if _installed is not None:
        return _installed
    labels = {"env": (settings.env or "DEV").lower(),
              "queue": settings.queue_name or (settings.queue_table or "nsj_queue_lib")}
    handler = LokiHandler(settings.grafana_url, labels, **options)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    protect_handler(handler)
    handler.addFilter(ContextFilter(settings.queue_name))
    logging.getLogger().addHandler(handler)
    _installed = handler
    logger.info("Logs enviados ao Loki em %s (rótulos env=%s, queue=%s)", handler.shown_url,
                labels["env"], labels["queue"])
    return handler


def uninstall_loki_handler() -> None:
    """Remove and close the installed handler (tests)."""
    global _installed
    if _installed is not None:
        logging.getLogger().removeHandler(_installed)
        _installed.close()
        _installed = None
