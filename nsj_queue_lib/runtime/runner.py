"""TaskRunner: runs one claimed task in one transaction and records its outcome."""

from __future__ import annotations

import logging
from typing import Any, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.errors import Fault, classify
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import is_connection_error
from nsj_queue_lib.engine.base import TaskGuard, TaskTakenOver
from nsj_queue_lib.exceptions import DatabaseUnavailable, NsjQueueError, TaskDeferred
from nsj_queue_lib.runtime.failure import error_text, record_failure
from nsj_queue_lib.runtime.router import Router, TaskContext
from nsj_queue_lib.text import bounded, to_str

logger = logging.getLogger(__name__)

SUCCESS_MESSAGE = "Concluído com sucesso"
LOG_ERROR_MAX = 2000  # characters of a task error in its log line (the row keeps 500)


def success_message(result: Any, task_id: int) -> str:
    """The text stored for a task's return value: None gives the default message,
    anything else its str() (repr() when str() fails); never raises."""
    if result is None:
        return SUCCESS_MESSAGE
    if isinstance(result, str):
        return result
    logger.warning("Tarefa %s: execute retornou %s em vez de str; gravado como texto",
                   task_id, type(result).__name__)
    return to_str(result)


def _wants_traceback(exc: BaseException) -> bool:
    """Tracebacks help with bugs in task code; the library's own expected failures
    (a webhook answering 500, a credentials API down) are clear from their message."""
    return not isinstance(exc, (SystemExit, NsjQueueError))


def defer_task(repo: TaskRepository, tarefa: dict, exc: TaskDeferred) -> None:
    """Put a running attempt back (same `tentativa`), due in exc.delay seconds, in the
    caller's transaction."""
    done = repo.task_defer(tarefa["id"], error_text(exc), exc.delay)
    logger.info("Tarefa %s adiada %.1f s sem gastar tentativa: %s", tarefa["id"],
                exc.delay, bounded(str(exc), LOG_ERROR_MAX))
    if not done:
        logger.warning("Tarefa %s já não estava 'processando'; adiamento não registrado",
                       tarefa["id"])


def run_followups(repo: TaskRepository, ctx: TaskContext) -> None:
    """Writes a handler asked for once the task is over, whatever its outcome (a
    webhook's breaker state and delivery log), each in a transaction of its own."""
    followups, ctx.followups = ctx.followups, None
    for followup in followups or ():
        try:
            with repo.session.transaction():
                followup(repo)
        except DatabaseUnavailable as exc:  # the consumer reconnects; nothing to add
            logger.warning("Tarefa %s: registro pós-tarefa não gravado: %s",
                           ctx.tarefa["id"], exc)
            return
        except Exception:
            logger.exception("Tarefa %s: falha ao gravar o registro pós-tarefa",
                             ctx.tarefa["id"])


class TaskRunner:
    """Runs claimed tasks on one session, through the backend's `TaskGuard`.

    The user's writes on `bd_conn` and the 'sucesso' mark commit in one
    transaction.  On an exception the writes roll back and the failure, with
    its next attempt or dead letter, is recorded in a second transaction.
    The final UPDATEs only touch a row still 'processando', so a task rescued
    meanwhile by another worker is never completed twice.
    """

    def __init__(self, settings: Settings, repo: TaskRepository, guard: TaskGuard,
                 router: Router) -> None:
        self.settings = settings
        self.repo = repo
        self.session = repo.session
        self.guard = guard
        self.router = router

    def run(self, tarefa: dict) -> Optional[bool]:
        """Run the task; True on success, False on a recorded failure, None if taken over."""
        ctx = TaskContext.for_session(tarefa, self.settings, self.repo)
        outcome: Optional[bool] = None
        try:
            outcome = self._run(ctx)
            return outcome
        finally:
            if ctx.followups:
                self._run_followups(ctx)
            try:
                self.router.after_task(ctx, outcome is True)
            except Exception:
                logger.exception("Tarefa %s: falha ao liberar recursos da tarefa", tarefa["id"])
            self.guard.release(tarefa)

    def _run(self, ctx: TaskContext) -> Optional[bool]:
        tarefa = ctx.tarefa
        task_id = tarefa["id"]
        session = self.session
        session.begin()
        try:
            if not self.guard.begin(tarefa):
                session.rollback()
                return None
            result = self.router.route(ctx)
            # (nothing of the router's own to commit first: the success mark may go with
            # the COMMIT, TaskGuard.finish_at_commit)
            commits_before = getattr(self.router, "commits_before", None)
            at_commit = commits_before is not None and not commits_before(ctx)
            if not self._finish(tarefa, success_message(result, task_id), at_commit):
                self._taken_over(task_id)
                return None
            self.router.before_commit(ctx)
            try:
                session.commit()
            except TaskTakenOver:
                self._taken_over(task_id)
                return None
            logger.debug("Tarefa %s concluída", task_id)
            return True
        except KeyboardInterrupt:
            session.rollback()
            raise
        except BaseException as exc:  # SystemExit from user code is a task failure too
            session.rollback()
            if self._connection_lost(exc):
                raise DatabaseUnavailable(
                    f"Conexão perdida durante a tarefa {task_id}: {exc}") from exc
            if isinstance(exc, TaskDeferred):
                self._defer(tarefa, exc)
                return None
            error = error_text(exc)
            logger.error("Tarefa %s falhou: %s", task_id, bounded(error, LOG_ERROR_MAX),
                         exc_info=_wants_traceback(exc))
            self._record_failure(tarefa, error)
            return False

    def _taken_over(self, task_id: int) -> None:
        self.session.rollback()
        logger.warning("Tarefa %s deixou de estar 'processando' (resgatada por outro "
                       "worker); o trabalho desta execução foi desfeito", task_id)

    def _finish(self, tarefa: dict, message: str, at_commit: bool = False) -> bool:
        """The success UPDATE.  The repository makes any text storable; should the
        database still refuse it (a MySQL column in a narrower charset, in strict
        mode), the UPDATE is repeated with an ASCII-only message: the task's
        committed work is never lost because of its message.  Only such a refusal
        of the value is retried: it fails that one statement and leaves the MySQL
        transaction usable, whereas a deadlock (and a lock wait timeout, with
        innodb_rollback_on_timeout) has rolled the whole transaction back, the
        task's work included; that, like any other error, is a task failure.
        (PostgreSQL is covered by `storable`.)"""
        try:
            if at_commit:
                return self.guard.finish_at_commit(tarefa, message)
            return self.guard.finish(tarefa, message)
        except Exception as exc:
            if classify(exc) is not Fault.VALUE_REFUSED:  # (MySQL only)
                raise
            logger.warning("Tarefa %s: o banco recusou a mensagem de sucesso (%s); gravada "
                           "com os caracteres não ASCII escapados", tarefa["id"],
                           error_text(exc))
            ascii_only = to_str(message).encode("ascii", "backslashreplace").decode("ascii")
            return self.guard.finish(tarefa, ascii_only)

    def _connection_lost(self, exc: BaseException) -> bool:
        # Decided by the queue session itself: an error of the task's own SQL (statement
        # timeout, deadlock) or of its tenant connection is a task failure.
        return is_connection_error(exc, self.session.conn) and not self.session.is_alive()

    def _defer(self, tarefa: dict, exc: TaskDeferred) -> None:
        """Put the attempt back (same `tentativa`), due in exc.delay seconds."""
        with self.session.transaction():
            defer_task(self.repo, tarefa, exc)

    def _run_followups(self, ctx: TaskContext) -> None:
        run_followups(self.repo, ctx)

    def _record_failure(self, tarefa: dict, error: str) -> None:
        with self.session.transaction():
            if record_failure(self.repo, tarefa, error, self.settings) is None:
                logger.warning("Tarefa %s já não estava 'processando'; falha não registrada",
                               tarefa["id"])
