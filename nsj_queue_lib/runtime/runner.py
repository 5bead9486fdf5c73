"""TaskRunner: runs one claimed task in one transaction and records its outcome."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.base import Locker, task_lock_key
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import TaskConnection, is_connection_error
from nsj_queue_lib.exceptions import DatabaseUnavailable
from nsj_queue_lib.runtime.failure import error_text, record_failure
from nsj_queue_lib.text import bounded, to_str

logger = logging.getLogger(__name__)

SUCCESS_MESSAGE = "Concluído com sucesso"
LOG_ERROR_MAX = 2000  # characters of a task error in its log line (the row keeps 500)

# dispatch(tarefa, bd_conn) -> message returned by user code
Dispatch = Callable[[dict, TaskConnection], Any]


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
    from nsj_queue_lib.exceptions import NsjQueueError

    return not isinstance(exc, (SystemExit, NsjQueueError))


class TaskRunner:
    """Runs claimed tasks on the worker's session.

    The user's writes on `bd_conn` and the 'sucesso' mark commit in one
    transaction.  On an exception the writes roll back and the failure, with
    its next attempt or dead letter, is recorded in a second transaction.
    The final UPDATEs only touch a row still 'processando', so a task rescued
    meanwhile by another worker is never completed twice.
    """

    def __init__(self, settings: Settings, repo: TaskRepository, locker: Locker,
                 dispatch: Dispatch, task_locks_in_sql: bool, fence_row: bool = False) -> None:
        self.settings = settings
        self.repo = repo
        self.session = repo.session
        self.locker = locker
        self.dispatch = dispatch
        self.task_locks_in_sql = task_locks_in_sql
        self.fence_row = fence_row

    def run(self, tarefa: dict) -> Optional[bool]:
        """Run the task; True on success, False on a recorded failure, None if taken over."""
        task_id = tarefa["id"]
        key = task_lock_key(self.settings.queue_table, task_id)
        released = False
        outcome: Optional[bool] = None
        try:
            outcome, released = self._run_locked(tarefa, key)
            return outcome
        finally:
            after_task = getattr(self.dispatch, "after_task", None)
            if after_task is not None:
                try:
                    after_task(tarefa, outcome is True)
                except Exception:
                    logger.exception("Tarefa %s: falha ao liberar recursos da tarefa", task_id)
            if not released:
                try:
                    self.locker.unlock(key)
                except DatabaseUnavailable:
                    pass  # the session is gone, and its locks with it

    def _run_locked(self, tarefa: dict, key: Any) -> tuple:
        task_id = tarefa["id"]
        session = self.session
        session.begin()
        try:
            if self.fence_row and not self.repo.task_lock_row(task_id):
                session.rollback()
                return None, False
            result = self.dispatch(tarefa, TaskConnection(session))
            done = self._finish(task_id, success_message(result, task_id), key)
            if not done:
                session.rollback()
                logger.warning("Tarefa %s deixou de estar 'processando' (resgatada por outro "
                               "worker); o trabalho desta execução foi desfeito", task_id)
                return None, False
            before_commit = getattr(self.dispatch, "before_commit", None)
            if before_commit is not None:
                before_commit(tarefa)
            session.commit()
            logger.debug("Tarefa %s concluída", task_id)
            return True, self.task_locks_in_sql
        except KeyboardInterrupt:
            session.rollback()
            raise
        except BaseException as exc:  # SystemExit from user code is a task failure too
            session.rollback()
            if self._connection_lost(exc):
                raise DatabaseUnavailable(
                    f"Conexão perdida durante a tarefa {task_id}: {exc}") from exc
            error = error_text(exc)
            logger.error("Tarefa %s falhou: %s", task_id, bounded(error, LOG_ERROR_MAX),
                         exc_info=_wants_traceback(exc))
            self._record_failure(tarefa, error)
            return False, False

    def _finish(self, task_id: int, message: str, key: Any) -> bool:
        """The success UPDATE.  The repository makes any text storable; should the
        database still refuse it (a MySQL column in a narrower charset, in strict
        mode), the UPDATE is repeated with an ASCII-only message: the task's
        committed work is never lost because of its message.  (A refused statement
        leaves a MySQL transaction usable; PostgreSQL is covered by `storable`.)"""
        try:
            return self._finish_once(task_id, message, key)
        except Exception as exc:
            if self.session.dialect.name == "postgres" or is_connection_error(
                    exc, self.session.conn):
                raise
            logger.warning("Tarefa %s: o banco recusou a mensagem de sucesso (%s); gravada "
                           "com os caracteres não ASCII escapados", task_id, error_text(exc))
            ascii_only = to_str(message).encode("ascii", "backslashreplace").decode("ascii")
            return self._finish_once(task_id, ascii_only, key)

    def _finish_once(self, task_id: int, message: str, key: Any) -> bool:
        if self.task_locks_in_sql:
            return self.repo.task_finish_unlock(task_id, message, key)
        return self.repo.task_finish(task_id, message)

    def _connection_lost(self, exc: BaseException) -> bool:
        # Decided by the queue session itself: an error of the task's own SQL (statement
        # timeout, deadlock) or of its tenant connection is a task failure.
        return is_connection_error(exc, self.session.conn) and not self.session.is_alive()

    def _record_failure(self, tarefa: dict, error: str) -> None:
        with self.session.transaction():
            if record_failure(self.repo, tarefa, error, self.settings) is None:
                logger.warning("Tarefa %s já não estava 'processando'; falha não registrada",
                               tarefa["id"])
