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

For version 3 sessions an empty answer is authoritative: it is given only from a read at
most `max_age` old and taken after the last `invalidate()` (a producer's notify), and
such a worker runs no candidates query of its own; when no such read could be made
(database slow or down) the answer is None, and the worker claims on its own.  A list
that is only empty is not read again before `max_age` (version 2 sessions still cause a
read then, as before: their empty answer sends them to their own query anyway).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, List, Optional

from nsj_queue_lib.engine.keys import task_lock_key
from nsj_queue_lib.server.locks import LockLimitExceeded, LockTable, Owner

logger = logging.getLogger(__name__)

POOL_SIZE = 32  # ids read per query: a few index entries whatever the backlog
MAX_AGE = 0.05  # seconds a read is trusted for a claim (bounds priority staleness)
RETRY_AFTER = 1.0  # seconds claims do not read after a failed read (the probe still does)
READ_WAIT = 0.2  # seconds a claim waits for a read in progress (bounded: never near the
# client's TIMEOUT_SOCKET_MESSAGE, whatever the database does)


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
        self._failed_at: Optional[float] = None
        self._news = 0  # invalidate() calls so far
        self._read_news = -1  # the value of _news when the last read started
        self.handed_out = 0  # ids given locked to workers (for stats and tests)
        self.reads = 0  # candidate reads made (probe and claims; for stats and tests)

    def refresh(self) -> bool:
        """Read the due candidates now (the probe); True when some task is due."""
        with self._read_mutex:
            return self._read()

    def invalidate(self) -> None:
        """New work was announced (a notify): the next claim reads again."""
        with self._mutex:
            self._news += 1

    def _read(self) -> bool:
        with self._mutex:
            news = self._news
        try:
            self.reads += 1
            ids = list(self._candidates(self._size))
        except Exception:
            self._failed_at = self._clock()
            raise
        with self._mutex:
            self._ids = ids
            self._read_at = self._clock()
            self._read_news = news
            self._failed_at = None
        return bool(ids)

    def _fresh(self) -> bool:
        """The list was read at most `max_age` ago, after the last invalidate() (caller
        holds the mutex)."""
        seen = self._read_at
        return (seen is not None and self._read_news == self._news
                and self._clock() - seen <= self._max_age)

    def free(self) -> int:
        """Ids of the list that no session holds (due tasks nobody is claiming)."""
        return len(self.free_ids())

    def free_ids(self) -> set[int]:
        with self._mutex:
            return {task_id for task_id in self._ids
                    if self._locks.holder(task_lock_key(self.queue_table, task_id)) is None}

    def _refresh_for_claim(self, seen: Optional[float]) -> None:
        """Re-read for a claim whose list (read at `seen`) is stale or empty.  Waits at
        most READ_WAIT for a read in progress and then uses its answer; does not read
        soon after a failed read (the database may be down or slow): a claim answers
        well within the client's TIMEOUT_SOCKET_MESSAGE, with [] at worst."""
        failed = self._failed_at
        if failed is not None and self._clock() - failed < RETRY_AFTER:
            return
        if not self._read_mutex.acquire(timeout=READ_WAIT):
            return
        try:
            with self._mutex:  # nobody read meanwhile, or news came since
                again = self._read_at == seen or not self._fresh()
            if again:
                self._read()
        except Exception as exc:  # the worker falls back to its own claim
            logger.debug("Leitura das tarefas candidatas falhou: %s", exc)
        finally:
            self._read_mutex.release()

    def take(self, owner: Owner, limit: int, max_locks: Optional[int] = None,
             authoritative: bool = False) -> Optional[List[int]]:
        """Up to `limit` due ids, each now locked by `owner`; [] when none is known.

        With `authoritative` (version 3): [] only when the list is fresh (see the module
        docstring), None when it could not be made fresh; an empty fresh list is not read
        again.  Raises LockLimitExceeded when `owner` is at its lock cap before the
        first id."""
        with self._mutex:
            seen = self._read_at
            stale = not self._fresh()
            empty = not self._ids
        if stale or (empty and not authoritative):
            self._refresh_for_claim(seen)
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
            if authoritative and not taken and not self._fresh():
                return None  # not known: the worker claims on its own
        return taken

