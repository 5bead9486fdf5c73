"""The reconnect loop of a worker's long-lived connections, written once.

Each task thread's consumer and the listener thread (QUEUE_CONCURRENCY) run
`reconnecting()`: open a database session, serve it until it is lost, back off
(nsj_queue_lib/backoff.py) and open a new one, until the stop request.  A lost
database or coordination server is an outage (rate-limited log lines, no
traceback); any other error is a bug, logged with its traceback, and the loop
starts over on a new connection rather than ending the worker; a ConfigError ends
the loop (the caller exits with code 2).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from nsj_queue_lib.backoff import Backoff
from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import (
    ConfigError,
    CoordinationError,
    DatabaseRefused,
    DatabaseUnavailable,
)
from nsj_queue_lib.runtime.service import OutageReport


@dataclass(frozen=True)
class LoopTexts:
    """What the health check and the log say about one loop (Portuguese)."""

    lost: str  # health problem while the connection is lost: "<lost>: <error>"
    restarting: str  # health problem after an unexpected error
    unexpected: str  # log line of an unexpected error ("%.1f": seconds until the retry)
    stopped: Optional[str] = None  # health problem when a ConfigError ends the loop


def reconnecting(settings: Settings, stop: threading.Event,
                 serve: Callable[[DbSession, Backoff], None], *,
                 texts: LoopTexts, outage: OutageReport, log: logging.Logger,
                 report: Callable[[Optional[str]], None],
                 on_lost: Callable[[], None] = lambda: None,
                 refused_at_start: str = "config", **connect: Any) -> None:
    """Run `serve(session, backoff)` on a new session each time the last one is lost,
    until `stop` is set.

    `serve` resets `backoff` and calls `outage.recovered()` once the connection has
    proved itself (the consumer after a claim, the listener after LISTEN), and
    `report(None)` once connected.  `report(problem)` is told why the loop is not
    connected.  `refused_at_start`: what a refused login (DatabaseRefused) before the
    first connection is: "config", a ConfigError (wrong DB_USER / DB_PASS / DB_BASE at
    start, exit 2, not an outage to wait out); "quiet", retried without a log line
    (another thread reports it).  `connect`: DbSession.open's keyword arguments.
    """
    backoff = Backoff()
    connected_once = False
    while not stop.is_set():
        session: Optional[DbSession] = None
        try:
            try:
                session = DbSession.open(settings, **connect)
            except DatabaseRefused as exc:
                if not connected_once and refused_at_start == "config":
                    raise ConfigError(str(exc)) from None
                raise
            connected_once = True
            serve(session, backoff)
        except (DatabaseUnavailable, CoordinationError) as exc:
            report(f"{texts.lost}: {exc}")
            on_lost()
            delay = backoff.next()
            if connected_once or not isinstance(exc, DatabaseRefused):
                outage.failed(f"{exc}; nova tentativa em {delay:.1f} s")
            stop.wait(delay)
        except ConfigError:
            if texts.stopped is not None:
                report(texts.stopped)
            raise
        except Exception:
            report(texts.restarting)
            # Never let an unexpected error end the worker: start over on a new
            # connection (a task left 'processando' is rescued as usual).
            delay = backoff.next()
            log.exception(texts.unexpected, delay)
            stop.wait(delay)
        finally:
            if session is not None:
                session.close()
