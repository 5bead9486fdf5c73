"""PgLocker: session advisory locks on one PostgreSQL session.

Its own module because both the backend (engine/postgres/backend.py) and the listener
turn (engine/postgres/listener_turn.py, which backend.py builds on) take these locks.
"""

from __future__ import annotations

from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.keys import LockKey


class PgLocker:
    """Session advisory locks on a given session: two-int32 keys, or one-bigint keys
    (1.2.2's form, see engine/keys.py)."""

    def __init__(self, session: DbSession) -> None:
        self.session = session

    def try_lock(self, key: LockKey) -> bool:
        if len(key) == 1:
            return bool(self.session.fetch_value("SELECT pg_try_advisory_lock(%(a)s::int8)",
                                                 {"a": key[0]}))
        return bool(self.session.fetch_value("SELECT pg_try_advisory_lock(%(a)s, %(b)s)",
                                             {"a": key[0], "b": key[1]}))

    def unlock(self, key: LockKey) -> bool:
        if len(key) == 1:
            return bool(self.session.fetch_value("SELECT pg_advisory_unlock(%(a)s::int8)",
                                                 {"a": key[0]}))
        return bool(self.session.fetch_value("SELECT pg_advisory_unlock(%(a)s, %(b)s)",
                                             {"a": key[0], "b": key[1]}))

    def close(self) -> None:
        """Locks end with the session; the session's owner closes it."""

    def holds(self, key: LockKey) -> bool:
        """Whether this session holds `key` now (pg_locks: no unlock attempt, so no
        server WARNING when it does not)."""
        if len(key) == 1:
            k = int(key[0]) & 0xFFFFFFFFFFFFFFFF
            ids = {"c": k >> 32, "o": k & 0xFFFFFFFF, "s": 1}
        else:
            ids = {"c": int(key[0]) & 0xFFFFFFFF, "o": int(key[1]) & 0xFFFFFFFF, "s": 2}
        return bool(self.session.fetch_value(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
            "AND pid = pg_backend_pid() AND granted AND classid::int8 = %(c)s "
            "AND objid::int8 = %(o)s AND objsubid = %(s)s)", ids))
