"""1.2.2 compatibility of the PostgreSQL engine: the keys of nsj-queue-lib 1.2.2 workers.

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

The guard's side (taking the raw id with the claim, its release deferred to the next
statement after the commit) is PgGuard's, engine/postgres/backend.py; the statements'
_compat variants are in db/sql/postgres.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List

from nsj_queue_lib.engine.fleet_mode import compat_1_2_2
from nsj_queue_lib.engine.keys import LockKey, task_lock_key

if TYPE_CHECKING:
    from nsj_queue_lib.config import Settings

# 1.2.2's own keys (bigint form).
LEGACY_NOTIFY_KEY = 3


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
