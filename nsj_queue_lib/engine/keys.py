"""Every advisory-lock key the library uses, in one place.

2.x keys are pairs of int32 (the two-argument form of pg_advisory_lock): a
namespace per queue table and kind (task / admin), then the object id.

nsj-queue-lib 1.2.2 used the one-bigint form: the task lock is the raw task id,
and its helper threads lock the constants 1 (retry), 2 (purge) and 3 (notify).
PostgreSQL keeps the two forms in separate key spaces, so a 2.x lock never
excludes a 1.2.2 worker unless 2.x also takes the 1.2.2 key.  While 1.2.2
workers may share a queue (its mixed-fleet mode: engine/fleet_mode.py), 2.x
therefore also holds, on the task's own session:

* the raw task id (bigint) while it runs a task, from the claim until after the
  commit: a 1.2.2 claim (lock id, then check status) and a 1.2.2 rescue (lock id,
  then re-queue) both skip it, and the 2.x rescue skips tasks a 1.2.2 worker runs;
* the 1.2.2 notify key 3 in shared mode (transaction-level) whenever it moves a row
  out of 'agendada': 1.2.2's notify thread lists 'agendada' rows and then sets each
  to 'pendente' without checking the status, so no 2.x claim or promotion may take
  such a row while that thread holds key 3.

Trade-off of the raw keys (the 1.2.2 scheme): they are not namespaced, so equal ids
of two queues in one database, and any other user of one-bigint advisory locks,
exclude each other briefly (a claim skips the row and takes it on the next try; a
rescue waits for the next run).  Correctness is kept; only latency can suffer.
"""

from __future__ import annotations

import functools
import zlib
from typing import TYPE_CHECKING, List, Tuple

from nsj_queue_lib.engine.fleet_mode import compat_1_2_2

if TYPE_CHECKING:
    from nsj_queue_lib.config import Settings

# A lock key: (namespace, id) int32 pair, or (bigint,) for the 1.2.2 one-bigint form.
LockKey = Tuple[int, ...]

ADMIN_RETRY = 1
ADMIN_PURGE = 2
ADMIN_NOTIFY = 3

# 1.2.2's own keys (bigint form).
LEGACY_NOTIFY_KEY = 3


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


def legacy_task_key(task_id: int) -> LockKey:
    """The key 1.2.2 locks while it runs (or rescues) a task: the raw id, bigint form."""
    return (int(task_id),)


def task_keys(settings: Settings, task_id: int) -> List[LockKey]:
    """Every key that says "this task is being run": the 2.x key, plus 1.2.2's in
    mixed-fleet mode.  A rescuer must obtain all of them."""
    keys = [task_lock_key(settings.queue_table, task_id)]
    if compat_1_2_2(settings):
        keys.append(legacy_task_key(task_id))
    return keys
