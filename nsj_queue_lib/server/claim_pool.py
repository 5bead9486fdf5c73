"""The server's side of `claim` (protocol version 2): due task ids, locked on request.

The server already probes the queue every QUEUE_POLL_INTERVAL; with a database it
reads the due candidate ids themselves (the workers' own index-only candidates
query, `task_claim_candidates`, highest priority first) and keeps them here.  A
worker's `claim` is answered from this list: each id handed out is first locked in
the `LockTable` for the asking session, so the worker gets the task and its lock in
one round trip and runs no candidates query of its own.

The list is a hint, never the truth: an id may have been taken meanwhile (the worker
then finds the row no longer waiting, unlocks it and falls back to its own
candidates query), and a task inserted after the last read is missing (an empty
answer sends the worker to the same fallback).  Ids locked by another session are
dropped (they are running).  The list is re-read when older than `max_age` or
empty, so the priority order is at most that stale.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, List, Optional

from nsj_queue_lib.coordination.keys import task_lock_key
from nsj_queue_lib.server.locks import LockLimitExceeded, LockTable, Owner

logger = logging.getLogger(__name__)

POOL_SIZE = 32  # ids read per query: a few index entries whatever the backlog
MAX_AGE = 0.05  # seconds a read is trusted for a claim (bounds priority staleness)


class ClaimPool:
    """Due task ids read by the server, handed out locked (see the module docstring)."""

    def __init__(self, candidates: Callable[[int], List[int]], queue_table: str,
                 locks: LockTable, *, size: int = POOL_SIZE, max_age: float = MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.queue_table = queue_table
        # The task-lock namespace of the server's queue table: a worker whose keys
        # differ (another QUEUE_TABLE) is not served, it falls back to its own claim.
        self.namespace = task_lock_key(queue_table, 0)[0]
        self._candidates = candidates
        self._locks = locks
        self._size = size
        self._max_age = max_age
        self._clock = clock
        self._mutex = threading.Lock()  # guards the list
        self._read_mutex = threading.Lock()  # one query at a time (one DB connection)
        self._ids: List[int] = []
        self._read_at: Optional[float] = None
        self.handed_out = 0  # ids given locked to workers (for stats and tests)

    def refresh(self) -> bool:
        """Read the due candidates now (the probe); True when some task is due."""
        with self._read_mutex:
            ids = list(self._candidates(self._size))
            with self._mutex:
                self._ids = ids
                self._read_at = self._clock()
        return bool(ids)

    def take(self, owner: Owner, limit: int, max_locks: Optional[int] = None) -> List[int]:
        """Up to `limit` due ids, each now locked by `owner`; [] when none is known.

        Raises LockLimitExceeded when `owner` is at its lock cap before the first id."""
        with self._mutex:
            stale = self._read_at is None or self._clock() - self._read_at > self._max_age
        if stale or not self._peek():
            try:
                self.refresh()
            except Exception as exc:  # the database may be down: the worker falls back
                logger.debug("Leitura das tarefas candidatas falhou: %s", exc)
                return []
        taken: List[int] = []
        with self._mutex:
            while self._ids and len(taken) < limit:
                task_id = self._ids[0]
                key = task_lock_key(self.queue_table, task_id)
                if self._locks.holder(key) is not None:
                    self._ids.pop(0)  # running (or being claimed) elsewhere
                    continue
                try:
                    locked = self._locks.try_lock(owner, key, max_locks)
                except LockLimitExceeded:
                    if taken:
                        break
                    raise
                self._ids.pop(0)
                if locked:
                    taken.append(task_id)
            self.handed_out += len(taken)
        return taken

    def _peek(self) -> bool:
        with self._mutex:
            return bool(self._ids)
