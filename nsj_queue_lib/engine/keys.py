"""Every advisory-lock key of 2.x, in one place (1.2.2's keys, the raw task id and
its constants, are the PostgreSQL engine's: engine/postgres/compat_1_2_2.py).

2.x keys are pairs of int32 (the two-argument form of pg_advisory_lock): a
namespace per queue table and kind (task / admin), then the object id.  The MySQL
engine and the socket server name their locks after the same pairs.
"""

from __future__ import annotations

import functools
import zlib
from typing import Tuple

# A lock key: (namespace, id) int32 pair, or (bigint,) for the 1.2.2 one-bigint form.
LockKey = Tuple[int, ...]

ADMIN_RETRY = 1
ADMIN_PURGE = 2
ADMIN_NOTIFY = 3
# The idle workers' turn (PostgreSQL's listener turn, MySQL's idle turn), and the
# hand-over of PostgreSQL's: a claim that hands the turn on holds it until its commit.
ADMIN_LISTENER = 4
ADMIN_HANDOVER = 5


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value >= 0x80000000 else value


def _canonical(queue_table: str) -> str:
    # "fila" and "public.fila" name the same PostgreSQL table for the usual search_path:
    # workers configured either way must share lock keys.  Case is kept: quoted
    # identifiers "Fila" and "fila" are different tables.
    schema, _, table = queue_table.rpartition(".")
    return table if schema in ("", "public") else queue_table


@functools.lru_cache(maxsize=256)
def _namespace(queue_table: str, kind: str) -> int:
    # Cached: asked for every task (its lock key), always for the same few tables.
    return _int32(zlib.crc32(f"nsj_queue_lib:{_canonical(queue_table)}:{kind}".encode()))


def task_lock_key(queue_table: str, task_id: int) -> LockKey:
    """Lock key of a task: namespaced by queue table, object id = task id (mod 2**32)."""
    return (_namespace(queue_table, "task"), _int32(task_id))


def admin_lock_key(queue_table: str, admin_id: int) -> LockKey:
    """Lock key of a maintenance job (ADMIN_RETRY, ADMIN_PURGE, ADMIN_NOTIFY) of a queue."""
    return (_namespace(queue_table, "admin"), _int32(admin_id))
