"""Batch mode (QUEUE_BATCH_SIZE > 1): several tasks per transaction, one commit per batch.

A batch is claimed in one statement (up to N due tasks, by priority then age; it
never waits for more to fill it) inside a transaction.  Each task then runs in its
own SAVEPOINT: its `bd_conn` writes and its success mark are kept, or, when it
raises, rolled back to the savepoint and replaced by the recorded failure (with
its next attempt or dead letter), as in per-task mode.  One COMMIT ends the batch.

The success marks are written together: a task that succeeded has its savepoint kept
(not rolled back) and its ('sucesso', message) written for all such tasks of the batch
in one UPDATE right before the COMMIT, in the same transaction, so what commits is what
per-task marks would have committed.  A failure is still recorded inside its own
savepoint at once.  A task whose transaction the client sees broken when it returns
(PostgreSQL: aborted by an error its code caught; MySQL: ended by the server) is marked
at once as before, so that error fails that task only.  Should the UPDATE of the marks
fail or mark fewer rows than tasks (a trigger refusing a message, task code changing its
own row), the whole batch is rolled back (its tasks run again, their outside effects
too) and this runner marks each task at once for DEFER_PAUSE seconds.  On PostgreSQL
the release of one task's savepoint and the next task's SAVEPOINT go in one round trip
(the library's own SQL only; MySQL, where multi-statement is off, needs no release:
a SAVEPOINT replaces the one of the same name).

Crash semantics: until that commit nothing of the batch is visible.  A SIGKILL or a
lost connection mid-batch rolls the whole batch back, so every task in it is
'pendente' again and later runs to completion exactly once: committed database
effects stay exactly-once.  Effects outside the database (HTTP calls, e-mails,
another database) of every task of the batch may happen again after such a crash,
not only those of the task that was running.  A stop request (SIGTERM, HALT)
finishes the current batch, then stops.

The claim is the backend's (`TaskGuard.claim_batch`): PostgreSQL claims in one
statement; MySQL >= 8.0 / MariaDB >= 10.6 in two (rows locked with SKIP LOCKED, then
marked), native or client/server.  A server without SKIP LOCKED (SingleStore, older
MySQL/MariaDB in client/server mode) refuses batch mode: its backend says so by
`Capabilities.batch_claim`, refused in one place (`refuse_unbatchable`).  On MySQL the
worker's session runs at READ COMMITTED in batch mode (the tasks' `bd_conn` work too),
as PostgreSQL does by default; a server that writes its binary log in STATEMENT format,
where InnoDB refuses writes at READ COMMITTED, refuses batch mode at start
(`refuse_statement_binlog`).

MySQL: a deadlock ends the whole transaction, so the batch is given up and runs again.
The task whose run ended it (the one that raised, or that caught the error, seen at the
next statement) is counted by this runner; once a task has ended BATCH_DEADLOCK_RUNS
batches, the next batch that claims it records its attempt as a failure (the normal
retry or dead-letter path) without running it again, and runs the others.  A bounded
rerun, not a run alone: a lone run of a task that deadlocks every time would fail all the
same, and claiming one given task is no member of the claim protocol of any backend.
The count is this worker's (another worker that claims the task counts anew).

Keep N small (10 to 50): a batch holds its row locks and its transaction open for
the sum of its tasks' durations, and PostgreSQL handles at most 64 subtransactions
that wrote (one per task savepoint) per transaction before every snapshot of the
server gets slower.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import is_connection_error
from nsj_queue_lib.engine.base import Capabilities, TaskGuard
from nsj_queue_lib.exceptions import ConfigError, DatabaseUnavailable, TaskDeferred
from nsj_queue_lib.runtime.failure import error_text, record_failure
from nsj_queue_lib.runtime.router import Router, TaskContext
from nsj_queue_lib.runtime.runner import (
    _wants_traceback,
    defer_task,
    run_followups,
    success_message,
)

logger = logging.getLogger(__name__)

SAVEPOINT = "nsjq_tarefa"
CHECKPOINT = "nsjq_lote"  # MySQL: the savepoint whose answer shows the transaction open
SUBTRANSACTION_CACHE = 64  # PGPROC_MAX_CACHED_SUBXIDS
# Seconds a runner marks each success at once after the batch's joint mark failed.
DEFER_PAUSE = 60.0
# Runs of one task that ended its batch's transaction (MySQL deadlock) before its
# attempt is recorded as a failure without running again; task ids remembered.
BATCH_DEADLOCK_RUNS = 2
_ENDED_MEMORY = 1024


class _BatchEnded(Exception):
    """MySQL: the server ended the batch's transaction (the batch is given up) during
    `culprit`'s run; `error` is the error that task raised, when it raised one."""

    def __init__(self, culprit: Optional[dict], error: Optional[str] = None) -> None:
        super().__init__(culprit.get("id") if culprit else None)
        self.culprit = culprit
        self.error = error


@dataclass
class Batch:
    """The tasks of one claimed batch, in claim order (its transaction is open)."""

    tasks: List[dict] = field(default_factory=list)


def refuse_unbatchable(capabilities: Capabilities) -> None:
    """The one refusal of batch mode: a backend (or its server) that cannot claim a batch
    says so by `capabilities.batch_claim`."""
    if not capabilities.batch_claim:
        raise ConfigError(
            "QUEUE_BATCH_SIZE > 1 exige FOR UPDATE SKIP LOCKED (PostgreSQL, MySQL >= 8.0, "
            "MariaDB >= 10.6), que este servidor não tem (SingleStore, MySQL < 8.0, MariaDB "
            "< 10.6): use QUEUE_BATCH_SIZE=1.")


def refuse_statement_binlog(repo: TaskRepository) -> None:
    """MySQL: refuse batch mode on a server that writes its binary log in STATEMENT
    format.  InnoDB refuses every write at READ COMMITTED there (error 1665), and at the
    server's REPEATABLE READ the batch's claim would hold every producer's INSERT of a
    waiting task until the batch commits (the sum of its tasks' durations, up to a lock
    wait timeout in the producer): a failure of the producers' code far from its cause.
    A server that cannot tell (no such variables) is not refused."""
    if repo.statement_binlog():
        raise ConfigError(
            "QUEUE_BATCH_SIZE > 1 no MySQL/MariaDB exige a sessão do worker em READ "
            "COMMITTED, e este servidor grava o log binário no formato STATEMENT, que não "
            "aceita escritas em READ COMMITTED (erro 1665); no nível do servidor "
            "(REPEATABLE READ) o claim do lote travaria os INSERTs de novas tarefas dos "
            "produtores até o commit do lote. Use binlog_format=ROW ou MIXED no servidor, "
            "ou QUEUE_BATCH_SIZE=1.")


class BatchClaimer:
    """`claim()` opens the batch transaction and claims up to N tasks (None: nothing due)
    through the backend's guard (`TaskGuard.claim_batch`)."""

    def __init__(self, guard: TaskGuard, capabilities: Capabilities, size: int) -> None:
        refuse_unbatchable(capabilities)
        self.guard = guard
        self.session = guard.repo.session
        self.size = size
        if self.session.dialect.gap_locks:
            # At REPEATABLE READ the claim's range scan leaves next-key locks that block
            # every producer's INSERT of a waiting task until the batch commits; at READ
            # COMMITTED (PostgreSQL's default) only the claimed rows are locked.  A server
            # that logs statements refuses every write at READ COMMITTED: no batch there.
            refuse_statement_binlog(guard.repo)
            self.session.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        if size > SUBTRANSACTION_CACHE:
            logger.warning("QUEUE_BATCH_SIZE=%s passa de %s: com mais subtransações por "
                           "transação o PostgreSQL fica mais lento para todas as sessões",
                           size, SUBTRANSACTION_CACHE)

    def claim(self) -> Optional[Batch]:
        self.session.begin()
        try:
            tasks = self.guard.claim_batch(self.size)
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
        # MySQL: a deadlock may have ended the batch's transaction unseen (_check_open)
        self.silent_rollback = self.session.dialect.silent_rollback
        # PostgreSQL: savepoints of one name stack, the last task's is released
        self.release_savepoint = not self.session.dialect.savepoint_replaces
        self._release = False  # PostgreSQL: the last task's savepoint is still open
        self._defer_after = 0.0  # monotonic time from which success marks are joint again
        # task id -> (runs that ended the batch's transaction, the last error raised)
        self._ended: OrderedDict[int, Tuple[int, Optional[str]]] = OrderedDict()
        # Tasks whose handler asked for writes once the batch is over (ctx.followups)
        self._followups: List[TaskContext] = []

    def run(self, batch: Batch) -> int:
        """Run every task of `batch` and commit; return how many tasks ran (0: the batch
        was rolled back because its joint success mark failed; its tasks run again).

        Raises DatabaseUnavailable when the connection is lost (the server rolls the
        whole batch back; its tasks run again later).
        """
        try:
            return self._run(batch)
        finally:
            if self._followups:  # after the commit or the rollback, as TaskRunner does
                pending, self._followups = self._followups, []
                for ctx in pending:
                    run_followups(self.repo, ctx)

    def _run(self, batch: Batch) -> int:
        outcomes: List[Optional[bool]] = []
        seconds: List[float] = []
        marks: Optional[List[Tuple[int, str]]] = (
            [] if time.monotonic() >= self._defer_after else None)
        self._release = False
        previous: Optional[dict] = None
        try:
            for tarefa in batch.tasks:
                if self.observer is not None:
                    self.observer.claimed(tarefa)
                started = time.monotonic()
                if self._ended_too_often(tarefa):
                    outcomes.append(self._fail_unrun(tarefa, previous))
                else:
                    outcomes.append(self._run_one(tarefa, marks, previous))
                seconds.append(time.monotonic() - started)
                previous = tarefa
            if marks and self.silent_rollback:
                self._check_open(previous)  # (else the UPDATE below could run in autocommit)
            if marks and not self._mark_successes(marks):
                self.session.rollback()
                self._defer_after = time.monotonic() + DEFER_PAUSE
                return self._given_up(batch, len(outcomes))
            self.session.commit()
        except _BatchEnded as ended:
            self.session.rollback()
            self._count_ended(ended, len(batch.tasks))
            # (the task whose savepoint found the transaction ended was claimed too)
            return self._given_up(batch, min(len(outcomes) + 1, len(batch.tasks)))
        except BaseException:
            self.session.rollback()
            raise
        for tarefa in batch.tasks:  # each attempt has its outcome now
            self._ended.pop(tarefa["id"], None)
        if self.observer is not None:  # counted once committed, each with its own duration
            for tarefa, ok, took in zip(batch.tasks, outcomes, seconds):
                self.observer.finished_task(tarefa, ok, took)
        logger.debug("Lote de %s tarefas gravado", len(batch.tasks))
        return len(batch.tasks)

    def _count_ended(self, ended: _BatchEnded, size: int) -> None:
        """Count a run that ended the batch's transaction against its task, and say so."""
        culprit = ended.culprit
        if culprit is None:  # (never: a savepoint before any task finds it open)
            logger.warning("Lote desfeito: o servidor encerrou a transação do lote; as %s "
                           "tarefas rodam de novo", size)
            return
        task_id = culprit["id"]
        runs, error = self._ended.pop(task_id, (0, None))
        runs, error = runs + 1, ended.error or error
        self._ended[task_id] = (runs, error)
        while len(self._ended) > _ENDED_MEMORY:
            self._ended.popitem(last=False)
        if runs < BATCH_DEADLOCK_RUNS:
            logger.warning("Lote desfeito: o servidor encerrou a transação do lote durante a "
                           "tarefa %s (impasse/deadlock?); as %s tarefas rodam de novo "
                           "(%s de %s vezes para essa tarefa)", task_id, size, runs,
                           BATCH_DEADLOCK_RUNS)
        else:
            logger.warning("Lote desfeito: o servidor encerrou a transação do lote durante a "
                           "tarefa %s pela %sª vez (impasse/deadlock?); as %s tarefas rodam "
                           "de novo, exceto essa, que terá a falha registrada sem rodar",
                           task_id, runs, size)

    def _ended_too_often(self, tarefa: dict) -> bool:
        return self._ended.get(tarefa["id"], (0, None))[0] >= BATCH_DEADLOCK_RUNS

    def _fail_unrun(self, tarefa: dict, previous: Optional[dict]) -> bool:
        """Record the attempt of a task whose runs ended the batch's transaction
        BATCH_DEADLOCK_RUNS times as a failure, in its savepoint, without running it."""
        task_id = tarefa["id"]
        runs, error = self._ended[task_id]
        self._savepoint(previous)
        message = (f"Impasse (deadlock) no banco: a tarefa desfez o lote inteiro em {runs} "
                   "execuções (no MySQL um impasse encerra a transação do lote); falha "
                   "registrada sem executar de novo. Último erro: "
                   + (error or "nenhum erro chegou ao worker (capturado pelo código da "
                               "tarefa?)"))
        logger.error("Tarefa %s falhou: desfez o lote em %s execuções (impasse)", task_id,
                     runs)
        if record_failure(self.repo, tarefa, message, self.settings) is None:
            logger.warning("Tarefa %s já não estava 'processando'; falha não registrada",
                           task_id)
        return False

    def _given_up(self, batch: Batch, claimed: int) -> int:
        """The batch was rolled back: its first `claimed` tasks, reported claimed, end
        without an outcome here (they run again).  Returns 0, the tasks that ran."""
        if self.observer is not None:
            for tarefa in batch.tasks[:claimed]:
                self.observer.given_up(tarefa)
        return 0

    def _mark_successes(self, marks: List[Tuple[int, str]]) -> bool:
        """The joint success mark (one UPDATE); False when it failed or marked fewer rows
        than tasks (the caller rolls the batch back)."""
        session = self.session
        try:
            marked = self.repo.task_finish_many([m[0] for m in marks], [m[1] for m in marks])
        except Exception as exc:
            if is_connection_error(exc, session.conn) and not session.is_alive():
                raise DatabaseUnavailable(
                    f"Conexão perdida ao gravar o lote: {exc}") from exc
            logger.warning("Lote desfeito: a marca de sucesso conjunta de %s tarefas falhou "
                           "(%s); as tarefas rodam de novo, cada uma marcada ao terminar, por "
                           "%.0f s", len(marks), error_text(exc), DEFER_PAUSE)
            return False
        if marked != len(marks):
            logger.warning("Lote desfeito: a marca de sucesso conjunta gravou %s de %s "
                           "tarefas; as tarefas rodam de novo, cada uma marcada ao terminar, "
                           "por %.0f s", marked, len(marks), DEFER_PAUSE)
            return False
        return True

    def _savepoint(self, previous: Optional[dict]) -> None:
        """The task's SAVEPOINT; on PostgreSQL with the release of the last task's in the
        same round trip (the library's own statements only).  `previous`: the task that
        ran before in this batch (MySQL: the one that ended the transaction, if ended)."""
        if self._release:
            self.session.execute(f"RELEASE SAVEPOINT {SAVEPOINT}; SAVEPOINT {SAVEPOINT}")
        else:
            # (MySQL: a SAVEPOINT replaces the one of the same name, no release needed)
            self.session.execute(f"SAVEPOINT {SAVEPOINT}")
            if self.silent_rollback and not self.session.transaction_usable():
                # The server ended the batch's transaction (a deadlock the last task's
                # code caught): what follows would run in autocommit.
                raise _BatchEnded(previous)
        self._release = self.release_savepoint

    def _check_open(self, culprit: Optional[dict], error: Optional[str] = None) -> None:
        """MySQL: raise _BatchEnded (blaming `culprit`, which raised `error`) unless the
        server still has the batch's transaction open.  An error answer carries no
        transaction status, so after a deadlock the task's code caught (the server rolled
        the whole transaction back, the claim included, and another worker may have
        claimed the tasks since) the client still believes it open; one SAVEPOINT's
        answer tells (one statement; a name of its own, so the task's savepoint stays
        where the task began)."""
        self.session.execute(f"SAVEPOINT {CHECKPOINT}")
        if not self.session.transaction_usable():
            raise _BatchEnded(culprit, error)

    def _run_one(self, tarefa: dict, marks: Optional[List[Tuple[int, str]]],
                 previous: Optional[dict]) -> Optional[bool]:
        """Run one task in its savepoint.  A success is appended to `marks` (its mark is
        written with the others at the end of the batch) or, when `marks` is None or the
        task left its transaction broken, marked at once."""
        task_id = tarefa["id"]
        session = self.session
        ok: Optional[bool] = None
        ctx = TaskContext.for_session(tarefa, self.settings, self.repo)
        self._savepoint(previous)
        try:
            result = self.router.route(ctx)
            message = success_message(result, task_id)
            if marks is not None and session.transaction_usable():
                self.router.before_commit(ctx)
                marks.append((task_id, message))
                ok = True
                return ok
            # At once: a broken transaction makes this UPDATE fail, a failure of this task.
            if self.silent_rollback:
                self._check_open(tarefa)
            if not self.repo.task_finish(task_id, message):  # never: the row is locked here
                session.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
                return None
            self.router.before_commit(ctx)
            ok = True
            return ok
        except (KeyboardInterrupt, _BatchEnded):
            raise
        except BaseException as exc:  # SystemExit from user code is a task failure too
            if is_connection_error(exc, session.conn) and not session.is_alive():
                raise DatabaseUnavailable(
                    f"Conexão perdida durante o lote (tarefa {task_id}): {exc}") from exc
            if not isinstance(exc, TaskDeferred):
                logger.error("Tarefa %s falhou: %s", task_id, error_text(exc),
                             exc_info=_wants_traceback(exc))
            if self.silent_rollback:
                # A deadlock (raised by the task, or caught before it raised) ended the
                # whole transaction and its savepoints: give the batch up.
                self._check_open(tarefa, error_text(exc))
            session.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
            if isinstance(exc, TaskDeferred):  # back to waiting, same attempt (as TaskRunner does)
                defer_task(self.repo, tarefa, exc)
                return None
            if record_failure(self.repo, tarefa, error_text(exc), self.settings) is None:
                logger.warning("Tarefa %s já não estava 'processando'; falha não registrada",
                               task_id)
            ok = False
            return ok
        finally:
            if ctx.followups:
                self._followups.append(ctx)
            try:
                self.router.after_task(ctx, ok is True)
            except Exception:
                logger.exception("Tarefa %s: falha ao liberar recursos da tarefa", task_id)
