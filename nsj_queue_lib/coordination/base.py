"""Contracts for the two services a worker needs besides SQL: wake-ups and locks.

PostgreSQL provides both natively (LISTEN/NOTIFY and session advisory locks);
the client/server mode provides them through the socket server.  The runtime
only depends on these protocols.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Protocol, Tuple

# A lock key is a pair of signed 32-bit integers: (namespace, object id).
# This is exactly the two-argument form of pg_try_advisory_lock, so keys of
# different queues (and of other applications using the one-bigint form)
# never collide.
LockKey = Tuple[int, int]

HALT_PAYLOAD = "HALT"

# Admin (maintenance) lock object ids, inside the queue's admin namespace.
ADMIN_RETRY = 1
ADMIN_PURGE = 2
ADMIN_NOTIFY = 3


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value >= 0x80000000 else value


def _canonical(queue_table: str) -> str:
    # "fila" and "public.fila" name the same PostgreSQL table for the usual search_path:
    # workers configured either way must share lock keys.  Case is kept: quoted
    # identifiers "Fila" and "fila" are different tables.
    schema, _, table = queue_table.rpartition(".")
    return table if schema in ("", "public") else queue_table


def _namespace(queue_table: str, kind: str) -> int:
    return _int32(zlib.crc32(f"nsj_queue_lib:{_canonical(queue_table)}:{kind}".encode()))


def task_lock_key(queue_table: str, task_id: int) -> LockKey:
    """Lock key of a task: namespaced by queue table, object id = task id (mod 2**32)."""
    return (_namespace(queue_table, "task"), _int32(task_id))


def admin_lock_key(queue_table: str, admin_id: int) -> LockKey:
    """Lock key of a maintenance job (ADMIN_RETRY, ADMIN_PURGE, ADMIN_NOTIFY) of a queue."""
    return (_namespace(queue_table, "admin"), _int32(admin_id))


@dataclass(frozen=True)
class Notification:
    """One wake-up: the channel it came on and its payload ('' or 'HALT')."""

    channel: str
    payload: str = ""


class Notifier(Protocol):
    """Delivers wake-ups to an idle worker."""

    def listen(self) -> None:
        """Start receiving wake-ups for the queue (idempotent)."""

    def wait(self, timeout: float) -> list[Notification]:
        """Block up to `timeout` seconds; return the wake-ups received (maybe none).

        Returns early, with what has arrived, as soon as one wake-up is there.
        Notifications received while the worker was busy are returned at once.
        """

    def notify(self, payload: str = "") -> None:
        """Tell every worker of the queue that there is work (or HALT)."""

    def close(self) -> None:
        """Release the resources (idempotent)."""


class Locker(Protocol):
    """Session locks with the semantics of PostgreSQL session advisory locks.

    A lock belongs to the connection (session) that took it; only that session
    releases it, and every lock of the session is released when it ends.
    `try_lock` never blocks waiting for another owner.
    """

    def try_lock(self, key: LockKey) -> bool:
        """Take the lock if free; True when this session now holds it."""

    def unlock(self, key: LockKey) -> bool:
        """Release a lock held by this session; False if it did not hold it."""

    def close(self) -> None:
        """End the session, releasing all its locks (idempotent)."""
