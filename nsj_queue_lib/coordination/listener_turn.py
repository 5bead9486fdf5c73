"""PostgreSQL: one idle worker per queue waits for notifications; the others queue up.

Without this, every NOTIFY wakes every idle worker of the queue, and each of them
runs a claim and a next-due probe: about 2N statements per task with N idle
workers.  With it, the idle workers take turns through one advisory lock of the
queue (the "listener turn"):

* the holder of the turn probes the next due time once, then waits on its socket
  for a notification, the next due time or the periodic poll;
* every other idle worker waits for the turn in ONE blocking statement
  (`pg_advisory_lock`), costing nothing while it waits; if its turn does not
  come within its QUEUE_WAIT_NOTIFY_INTERVAL it cancels the wait and claims once
  by itself (the periodic poll every worker has always done), then queues again;
* when the holder is woken it hands the turn to the next idle worker (the
  database grants the lock in request order) and claims.

So a wake-up costs a fixed handful of statements, whatever the number of idle
workers.  Every worker stays LISTENing (so HALT reaches busy workers, and each
idle worker sees it when its turn comes: HALT then spreads from turn to turn);
the notifications that queue up while a worker waits for its turn are old news
once it holds the turn and has probed, and are dropped (except HALT).

The blocking statement runs in a helper thread, so the main thread keeps
handling signals: a stop request cancels the statement (`connection.cancel()`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, List, Optional

from nsj_queue_lib.coordination.base import HALT_PAYLOAD, Notification, admin_lock_key
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import DatabaseUnavailable

logger = logging.getLogger(__name__)

# Admin lock object id of the listener turn (beside ADMIN_RETRY/PURGE/NOTIFY = 1..3).
ADMIN_LISTENER = 4
STOP_CHECK = 0.5  # seconds between checks of the stop request while waiting for the turn
HELD, STOPPED, TIMEOUT = "held", "stopped", "timeout"
WAITED = 0.005  # seconds: longer than an uncontended lock round trip


class ListenerTurn:
    """The listener-turn lock of one queue, on the consumer's own session."""

    def __init__(self, session: DbSession, queue_table: str) -> None:
        self.session = session
        self.key = admin_lock_key(queue_table, ADMIN_LISTENER)
        self.held = False
        self.waited = False  # the last acquire() had to wait for another holder

    def acquire(self, stop: threading.Event, timeout: float) -> str:
        """Block until this session holds the turn ("held"), `stop` is set ("stopped")
        or `timeout` seconds passed ("timeout": the caller then polls once by itself,
        so a worker whose turn does not come still honours its own poll interval).

        Raises DatabaseUnavailable when the connection is lost meanwhile.
        """
        if self.held:
            return HELD
        outcome: List[Any] = []
        done = threading.Event()

        def wait_turn() -> None:
            try:
                self.session.execute("SELECT pg_advisory_lock(%(a)s, %(b)s)",
                                     {"a": self.key[0], "b": self.key[1]})
                outcome.append(True)
            except BaseException as exc:  # handed to the waiting thread
                outcome.append(exc)
            finally:
                done.set()

        helper = threading.Thread(target=wait_turn, name="listener_turn", daemon=True)
        started = time.monotonic()
        helper.start()
        deadline = time.monotonic() + timeout
        reason = ""
        while not done.wait(min(STOP_CHECK, max(0.0, deadline - time.monotonic()))):
            if reason:
                continue
            if stop.is_set():
                reason = STOPPED
            elif time.monotonic() >= deadline:
                reason = TIMEOUT
            if reason:
                self._cancel()
        helper.join()
        result = outcome[0] if outcome else DatabaseUnavailable("espera da vez interrompida")
        if result is True:
            self.held = True
            self.waited = time.monotonic() - started > WAITED
            if reason == STOPPED:
                self.release()
                return STOPPED
            return HELD  # granted before the cancel arrived
        if isinstance(result, DatabaseUnavailable):
            raise result
        if reason and _is_cancel(result):
            return reason
        raise result

    def _cancel(self) -> None:
        try:
            self.session.conn.cancel()
        except Exception as exc:  # the statement ends with the connection anyway
            logger.debug("cancelamento da espera da vez falhou: %s", exc)

    def release(self) -> None:
        """Hand the turn to the next idle worker (no-op when not held)."""
        if self.held:
            self.held = False
            self.session.execute("SELECT pg_advisory_unlock(%(a)s, %(b)s)",
                                 {"a": self.key[0], "b": self.key[1]})

    def forget(self) -> None:
        """The session is gone (and the lock with it)."""
        self.held = False


def _is_cancel(exc: BaseException) -> bool:
    import psycopg2.extensions

    return isinstance(exc, psycopg2.extensions.QueryCanceledError)


def take_stale(conn: Any) -> List[Notification]:
    """Drop the notifications already received on `conn`, returning only HALTs.

    Called right BEFORE the probe that follows the acquisition of the turn: what was
    received so far is for commits the probe's snapshot will see, so it carries no
    news; only HALT matters.  (Not after the probe: a notification delivered with the
    probe's answer may come from a commit after its snapshot.)
    """
    stale = list(conn.notifies)
    conn.notifies.clear()
    return [Notification(n.channel, n.payload) for n in stale if n.payload == HALT_PAYLOAD]


def turn_for(notifier: Any, session: DbSession, queue_table: str) -> Optional[ListenerTurn]:
    """A ListenerTurn when `notifier` is PostgreSQL LISTEN on `session`, else None."""
    from nsj_queue_lib.coordination.postgres import PgNotifier

    if isinstance(notifier, PgNotifier) and notifier.session is session:
        return ListenerTurn(session, queue_table)
    return None
