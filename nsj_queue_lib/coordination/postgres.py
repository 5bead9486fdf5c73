"""PostgreSQL implementations of Notifier (LISTEN/NOTIFY) and Locker (advisory locks)."""

from __future__ import annotations

import logging
import select
import time
from typing import List

from nsj_queue_lib.coordination.base import LockKey, Notification
from nsj_queue_lib.db.queries import raw_queries
from nsj_queue_lib.db.session import DbSession, is_connection_error
from nsj_queue_lib.exceptions import DatabaseUnavailable

logger = logging.getLogger(__name__)


class PgNotifier:
    """LISTEN on the queue's channel, on the worker's own session.

    The channel is quoted, so it is exactly the name the trigger passes to
    pg_notify(), whatever its case.  Notifications that arrive while the
    session runs a task are queued by psycopg2 and returned by the next wait().
    """

    def __init__(self, session: DbSession, channel: str) -> None:
        self.session = session
        self.channel = channel
        self._listening = False

    def listen(self) -> None:
        if not self._listening:
            self.session.execute(f"LISTEN {self.session.dialect.quote(self.channel)}")
            self._listening = True

    def _drain(self) -> List[Notification]:
        conn = self.session.conn
        out = [Notification(n.channel, n.payload) for n in conn.notifies]
        conn.notifies.clear()
        return out

    def wait(self, timeout: float) -> List[Notification]:
        conn = self.session.conn
        try:
            conn.poll()
            found = self._drain()
            deadline = time.monotonic() + max(0.0, timeout)
            while not found:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                readable, _, _ = select.select([conn], [], [], remaining)
                if readable:
                    conn.poll()
                    found = self._drain()
            return found
        except Exception as exc:
            if isinstance(exc, DatabaseUnavailable):
                raise
            import psycopg2

            if isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError, OSError,
                                ValueError)) or is_connection_error(exc):
                raise DatabaseUnavailable(f"Conexão de LISTEN perdida: {exc}") from exc
            raise

    def notify(self, payload: str = "") -> None:
        sql = raw_queries(self.session.dialect)["notify"]
        self.session.execute(sql, {"channel": self.channel, "payload": payload})

    def close(self) -> None:
        self._listening = False


class PgLocker:
    """Session advisory locks (two-int32 keys) on a given session."""

    def __init__(self, session: DbSession) -> None:
        self.session = session

    def try_lock(self, key: LockKey) -> bool:
        return bool(self.session.fetch_value("SELECT pg_try_advisory_lock(%(a)s, %(b)s)",
                                             {"a": key[0], "b": key[1]}))

    def unlock(self, key: LockKey) -> bool:
        return bool(self.session.fetch_value("SELECT pg_advisory_unlock(%(a)s, %(b)s)",
                                             {"a": key[0], "b": key[1]}))

    def close(self) -> None:
        """Locks end with the session; the session's owner closes it."""
