"""The claim of the client/server mode: locks on the socket server, a row fence in SQL."""

from __future__ import annotations

import logging
from typing import Callable, Iterable, List, Optional

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.engine.base import LockKey, MarkedAhead, TaskGuard, task_lock_key
from nsj_queue_lib.engine.socket.locker import Served, SocketLocker
from nsj_queue_lib.exceptions import CoordinationError, DatabaseUnavailable

logger = logging.getLogger(__name__)

CANDIDATES = 8  # ids read per claim; a handful of index entries whatever the backlog


class SocketGuard(TaskGuard):
    """Implements `TaskGuard` with a server-side `Locker` (any database).

    Claim: the server hands out due ids already locked for this session (`claim`,
    protocol version 2: one round trip, no candidates query here); each is moved to
    'processando' only if it is still waiting, else unlocked and skipped.  When the
    server hands out nothing usable (none known, all taken meanwhile, a version 1
    server, a server without database), the guard falls back to reading a few
    candidate ids itself and locking one on the server.

    The next claim goes ahead with a task's 'sucesso' mark, inside its transaction:
    without `mark_ahead` its round trip overlaps that UPDATE.  With `mark_ahead` (what
    SocketBackend uses on every database: two statements less per task than a
    separate mark, and on MySQL one durable commit less) the finish waits for the
    server's answer before any SQL, then the served task is read, row-locked and marked
    'processando' with the success in one UPDATE, so one durable COMMIT serves both
    (and, with `chain`, opens the served task's transaction).  Such a task is used only
    if that COMMIT happened (else its row is waiting again: unlocked, skipped); on
    `close()` (a stop) a task marked ahead and not run goes back to 'pendente'.

    The lock lives on the server, not on the task's DB session, so `begin` fences
    the row (SELECT ... FOR UPDATE of a 'processando' row) for the task transaction:
    a rescuer that took the lock after this worker lost its socket skips the row
    (FOR UPDATE SKIP LOCKED) instead of re-queueing a task that is still running,
    and a task whose mark was rolled back is skipped, never run.

    Batch mode uses the default `claim_batch`, the dialect's claim without the server:
    the batch's rows stay row-locked and invisibly 'processando' until its commit, so
    the rescue (which needs a committed 'processando' row) never sees them.
    """

    def __init__(self, repo: TaskRepository, locker: SocketLocker, queue_table: str,
                 unlock: Optional[Callable[[LockKey], object]] = None,
                 mark_ahead: bool = False, chain: bool = False) -> None:
        self.repo = repo
        self.session = repo.session
        self.locker = locker
        self.queue_table = queue_table
        # How a finished task's lock is released: SocketBackend pipelines it (no wait
        # for the answer; the next request on the connection comes after it).
        self._unlock = unlock or locker.unlock
        self._mark_ahead = mark_ahead
        self._ahead: Optional[Callable[[], Optional[Served]]] = None  # claim sent
        # Claimed ahead with the last success, not run yet; with `chain` its COMMIT (AND
        # CHAIN) opens the transaction the task will run in.
        self._marked = MarkedAhead(chain=chain)
        # An empty final answer to the claim sent ahead that the finish already read.
        self._known_empty: Optional[Served] = None
        self._put_back = False  # a task marked ahead was rolled back to waiting

    def claim(self, limit: int = 1) -> List[dict]:
        marked = self._take_next()
        if marked is not None:
            return [marked]
        # (a task marked ahead whose transaction rolled back is waiting again, unknown
        # to the server's list: this claim does not trust an empty answer)
        doubt, self._put_back = self._put_back, False
        served = self._served(limit)
        claimed = self._mark(served or ())
        if claimed or (served is not None and not served and served.final and not doubt):
            # (protocol version 3: an empty answer is a fresh read of the server's;
            # a task due after it wakes this worker once it waits)
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

    def _served(self, limit: int) -> Optional[Served]:
        """The ids the server handed out locked (the answer sent ahead, else a claim now);
        None when the server does not hand out tasks."""
        served = self._take_ahead()
        if served is not None and not served and not served.final:
            # none sent ahead, nothing known then, or a lost answer
            served = self.locker.claim(self.queue_table, limit)
        return served

    def _mark(self, served: Iterable[int]) -> List[dict]:
        claimed: List[dict] = []
        for task_id in served:
            tarefa = self.repo.task_mark_processing(task_id)
            if tarefa is None:  # taken (and maybe finished) since the server read it
                self._unlock(task_lock_key(self.queue_table, task_id))
                continue
            claimed.append(tarefa)
        return claimed

    def _take_ahead(self) -> Optional[Served]:
        """The answer to the claim sent ahead: [] when there was none or it was lost,
        None when the server does not hand out tasks; an empty `final` answer is kept
        for the next claim when the finish used none (`mark_ahead`)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            known, self._known_empty = self._known_empty, None
            return known if known is not None else Served()
        try:
            served = ahead()
        except CoordinationError as exc:  # the session (and its locks) ended
            logger.debug("Resposta do claim adiantado perdida: %s", exc)
            return Served()
        if served is None or isinstance(served, Served):
            return served
        return Served(served)

    def _take_next(self) -> Optional[dict]:
        # (were a committed one rolled back after all, `begin` finds no row)
        return self._marked.take(self._rolled_back)

    def _rolled_back(self, tarefa: dict) -> None:
        self._put_back = True
        self.release(tarefa)
        self.locker.announce()  # (the server's list no longer has it)

    def begin(self, tarefa: dict) -> bool:
        return self.repo.task_lock_row(tarefa["id"])

    def finish(self, tarefa: dict, message: str) -> bool:
        ahead = self._ahead is None and not self._marked.pending()
        if ahead:
            try:
                self._ahead = self.locker.claim_ahead(self.queue_table, 1)
            except CoordinationError as exc:
                logger.debug("Claim adiantado não enviado: %s", exc)
        if ahead and self._mark_ahead:
            served = self._take_ahead()
            if served is not None and not served and served.final:
                self._known_empty = served  # the next claim trusts it (no second ask)
            return self._finish_and_mark(tarefa["id"], message, served or [])
        return self.repo.task_finish(tarefa["id"], message)

    def _finish_and_mark(self, task_id: int, message: str, served: List[int]) -> bool:
        """MySQL: the success of `task_id` and the 'processando' mark of the task the
        server handed out, in two statements (its row read and locked, then one UPDATE)
        instead of three.  Used only if this transaction commits (`MarkedAhead`)."""
        if not served:
            return self.repo.task_finish(task_id, message)
        for extra in served[1:]:  # (claim_ahead asks for one)
            self.release({"id": extra})
        next_id = served[0]
        try:
            rows = self.repo.task_lock_waiting([next_id])
            changed = self.repo.task_finish_mark(task_id, message, [r["id"] for r in rows])
        except BaseException:
            self.release({"id": next_id})
            raise
        if not rows:  # taken (and maybe finished) since the server read it
            self.release({"id": next_id})
            return changed == 1
        rows[0]["status"] = "processando"
        self._marked.keep(self.session, rows[0])
        return changed == 2

    def claimed_ahead(self) -> List[int]:
        return self._marked.ids()

    def release(self, tarefa: dict) -> None:
        try:
            self._unlock(task_lock_key(self.queue_table, tarefa["id"]))
        except (CoordinationError, DatabaseUnavailable) as exc:
            logger.debug("Tarefa %s: lock não liberado (%s); o servidor o libera com a "
                         "sessão", tarefa["id"], exc)

    def close(self) -> None:
        """Put a task marked ahead and not run back to 'pendente' (a graceful stop),
        then end the server session (its locks go with it)."""
        tarefa = self._take_next()
        unused = self._take_ahead() if self._ahead is not None else None
        try:
            if tarefa is not None:
                self.repo.task_unclaim(tarefa["id"])
            if tarefa is not None or unused:
                # Waiting again and gone from the server's list (its lock goes with this
                # session): the server reads again and wakes another worker.
                self.locker.announce()
        except DatabaseUnavailable:
            pass  # the session is gone: the rescue re-queues it
        finally:
            self.locker.close()
