"""Batch mode (QUEUE_BATCH_SIZE > 1): several tasks per transaction, one commit per batch.

A batch is claimed in one statement (up to N due tasks, by priority then age; it
never waits for more to fill it) inside a transaction.  Each task then runs in its
own SAVEPOINT: its `bd_conn` writes and its success mark are kept, or, when it
raises, rolled back to the savepoint and replaced by the recorded failure (with
its next attempt or dead letter), as in per-task mode.  One COMMIT ends the batch.

Crash semantics: until that commit nothing of the batch is visible.  A SIGKILL or a
lost connection mid-batch rolls the whole batch back, so every task in it is
'pendente' again and later runs to completion exactly once: committed database
effects stay exactly-once.  Effects outside the database (HTTP calls, e-mails,
another database) of every task of the batch may happen again after such a crash,
not only those of the task that was running.  A stop request (SIGTERM, HALT)
finishes the current batch, then stops.

PostgreSQL claims in one statement; MySQL >= 8.0 / MariaDB >= 10.6 in two (rows
locked with SKIP LOCKED, then marked), native or client/server; SingleStore (no SKIP
LOCKED) refuses batch mode.

Keep N small (10 to 50): a batch holds its row locks and its transaction open for
the sum of its tasks' durations, and PostgreSQL handles at most 64 subtransactions
that wrote (one per task savepoint) per transaction before every snapshot of the
server gets slower.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.base import task_lock_key
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import is_connection_error
from nsj_queue_lib.exceptions import DatabaseUnavailable
from nsj_queue_lib.runtime.failure import error_text, record_failure
from nsj_queue_lib.runtime.router import Router, TaskContext
from nsj_queue_lib.runtime.runner import _wants_traceback, success_message

logger = logging.getLogger(__name__)

SAVEPOINT = "nsjq_tarefa"
SUBTRANSACTION_CACHE = 64  # PGPROC_MAX_CACHED_SUBXIDS


@dataclass
class Batch:
    """The tasks of one claimed batch, in claim order (its transaction is open)."""

    tasks: List[dict] = field(default_factory=list)


class BatchClaimer:
    """`claim()` opens the batch transaction and claims up to N tasks (None: nothing due)."""

    def __init__(self, repo: TaskRepository, queue_table: str, size: int) -> None:
        self.repo = repo
        self.session = repo.session
        self.size = size
        self.lock_ns = task_lock_key(queue_table, 0)[0]
        if size > SUBTRANSACTION_CACHE:
            logger.warning("QUEUE_BATCH_SIZE=%s passa de %s: com mais subtransações por "
                           "transação o PostgreSQL fica mais lento para todas as sessões",
                           size, SUBTRANSACTION_CACHE)

    def claim(self) -> Optional[Batch]:
        self.session.begin()
        try:
            tasks = self.repo.task_claim_batch(self.size, self.lock_ns)
        except BaseException:
            self.session.rollback()
            raise
        if not tasks:
            self.session.rollback()
            return None
        return Batch(tasks)


class BatchRunner:
    """Runs a claimed batch: one savepoint per task, one commit for all."""

    def __init__(self, settings: Settings, repo: TaskRepository, router: Router,
                 observer: Any = None) -> None:
        self.settings = settings
        self.repo = repo
        self.session = repo.session
        self.router = router
        self.observer = observer

    def run(self, batch: Batch) -> int:
        """Run every task of `batch` and commit; return how many tasks ran.

        Raises DatabaseUnavailable when the connection is lost (the server rolls the
        whole batch back; its tasks run again later).
        """
        outcomes: List[Optional[bool]] = []
        seconds: List[float] = []
        try:
            for tarefa in batch.tasks:
                if self.observer is not None:
                    self.observer.claimed(tarefa)
                started = time.monotonic()
                outcomes.append(self._run_one(tarefa))
                seconds.append(time.monotonic() - started)
            self.session.commit()
        except BaseException:
            self.session.rollback()
            raise
        if self.observer is not None:  # counted once committed, each with its own duration
            for tarefa, ok, took in zip(batch.tasks, outcomes, seconds):
                self.observer.finished_task(tarefa, ok, took)
        logger.debug("Lote de %s tarefas gravado", len(batch.tasks))
        return len(batch.tasks)

    def _run_one(self, tarefa: dict) -> Optional[bool]:
        task_id = tarefa["id"]
        session = self.session
        ok: Optional[bool] = None
        ctx = TaskContext.for_session(tarefa, self.settings, self.repo)
        session.execute(f"SAVEPOINT {SAVEPOINT}")
        try:
            result = self.router.route(ctx)
            message = success_message(result, task_id)
            if not self.repo.task_finish(task_id, message):  # never: the row is locked here
                session.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
                return None
            self.router.before_commit(ctx)
            session.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
            ok = True
            return ok
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit from user code is a task failure too
            if is_connection_error(exc, session.conn) and not session.is_alive():
                raise DatabaseUnavailable(
                    f"Conexão perdida durante o lote (tarefa {task_id}): {exc}") from exc
            logger.error("Tarefa %s falhou: %s", task_id, error_text(exc),
                         exc_info=_wants_traceback(exc))
            session.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
            if record_failure(self.repo, tarefa, error_text(exc), self.settings) is None:
                logger.warning("Tarefa %s já não estava 'processando'; falha não registrada",
                               task_id)
            session.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
            ok = False
            return ok
        finally:
            try:
                self.router.after_task(ctx, ok is True)
            except Exception:
                logger.exception("Tarefa %s: falha ao liberar recursos da tarefa", task_id)
