"""The claim of the client/server mode: locks on the socket server, a row fence in SQL."""

from __future__ import annotations

import logging
from typing import Callable, List, Optional

from nsj_queue_lib.coordination.base import LockKey, task_lock_key
from nsj_queue_lib.coordination.socket.locker import SocketLocker
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.exceptions import CoordinationError, DatabaseUnavailable

logger = logging.getLogger(__name__)

CANDIDATES = 8  # ids read per claim; a handful of index entries whatever the backlog


class SocketGuard:
    """Implements `TaskGuard` with a server-side `Locker` (any database).

    Claim: the server hands out due ids already locked for this session (`claim`,
    protocol version 2: one round trip, no candidates query here); each is moved to
    'processando' only if it is still waiting, else unlocked and skipped.  When the
    server hands out nothing usable (none known, all taken meanwhile, a version 1
    server, a server without database), the guard falls back to reading a few
    candidate ids itself and locking one on the server.  The next claim is sent
    ahead, right after a task's 'sucesso' mark: its round trip overlaps the task's
    COMMIT, and the next `claim()` finds the answer there (a claim ahead that is
    never used holds its lock until the guard closes; nothing else waits on it:
    the row stays 'pendente' and the worker's session owns the lock).  The lock lives on the server,
    not on the task's DB session, so `begin` fences the row (SELECT ... FOR
    UPDATE) for the task transaction: a rescuer that took the lock after this
    worker lost its socket skips the row (FOR UPDATE SKIP LOCKED) instead of
    re-queueing a task that is still running.
    """

    def __init__(self, repo: TaskRepository, locker: SocketLocker, queue_table: str,
                 unlock: Optional[Callable[[LockKey], object]] = None) -> None:
        self.repo = repo
        self.locker = locker
        self.queue_table = queue_table
        # How a finished task's lock is released: SocketBackend pipelines it (no wait
        # for the answer; the next request on the connection comes after it).
        self._unlock = unlock or locker.unlock
        self._ahead: Optional[Callable[[], Optional[List[int]]]] = None

    def claim(self, limit: int = 1) -> List[dict]:
        claimed = self._claim_served(limit)
        if claimed:
            return claimed
        for task_id in self.repo.task_claim_candidates(max(CANDIDATES, limit)):
            key = task_lock_key(self.queue_table, task_id)
            if not self.locker.try_lock(key):
                continue
            tarefa = self.repo.task_mark_processing(task_id)
            if tarefa is None:
                self.locker.unlock(key)  # another worker finished it meanwhile
                continue
            claimed.append(tarefa)
            if len(claimed) >= limit:
                break
        return claimed

    def _claim_served(self, limit: int) -> List[dict]:
        """The tasks among the ids the server handed out locked that are still waiting."""
        served = self._take_ahead()
        if served == []:  # nothing known then (or a lost answer): ask now
            served = self.locker.claim(self.queue_table, limit)
        claimed: List[dict] = []
        for task_id in served or ():
            tarefa = self.repo.task_mark_processing(task_id)
            if tarefa is None:  # taken (and maybe finished) since the server read it
                self._unlock(task_lock_key(self.queue_table, task_id))
                continue
            claimed.append(tarefa)
        return claimed

    def _take_ahead(self) -> Optional[List[int]]:
        """The answer to the claim sent ahead: [] when there was none or it was lost,
        None when the server does not hand out tasks."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return []
        try:
            return ahead()
        except CoordinationError as exc:  # the session (and its locks) ended
            logger.debug("Resposta do claim adiantado perdida: %s", exc)
            return []

    def begin(self, tarefa: dict) -> bool:
        return self.repo.task_lock_row(tarefa["id"])

    def finish(self, tarefa: dict, message: str) -> bool:
        done = self.repo.task_finish(tarefa["id"], message)
        if done and self._ahead is None:
            try:
                self._ahead = self.locker.claim_ahead(self.queue_table, 1)
            except CoordinationError as exc:
                logger.debug("Claim adiantado não enviado: %s", exc)
        return done

    def release(self, tarefa: dict) -> None:
        try:
            self._unlock(task_lock_key(self.queue_table, tarefa["id"]))
        except (CoordinationError, DatabaseUnavailable) as exc:
            logger.debug("Tarefa %s: lock não liberado (%s); o servidor o libera com a "
                         "sessão", tarefa["id"], exc)

    def close(self) -> None:
        self.locker.close()
