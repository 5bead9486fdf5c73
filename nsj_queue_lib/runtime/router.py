"""The typed context of one running task and the router that picks its handler.

The runner builds a `TaskContext` (the task, its repository and session, the
`bd_conn` given to user code and, in multi-database mode, the tenant
connection) and hands it to `TaskRouter.route`, which sends each kind of task
to its handler:

* dead letter     -> the worker's `run_dead` (`execute_dead` or a `@DeadSubscriber`)
* publication     -> `pubsub.fanout.publish` (one task per subscriber)
* subscriber task -> the worker's `run_subscriber` (`@Subscriber` handler or webhook)
* plain task      -> the worker's `run_task` (`execute`)

Multi-database mode (MULTI_DATABASE=true): before a task runs, its tenant's
database connection is taken from a pool (token and credentials cached; one
connection per tenant reused across tasks) and handed to handlers that accept
`multi_db_conn`.  Atomicity, exactly: the tenant transaction is committed just
before the queue transaction (which holds the task's success mark and its
`bd_conn` writes).  If the task raises, or the tenant commit fails, both roll
back and the task is retried.  The one window without two-phase commit is a
failure of the queue COMMIT itself after the tenant COMMIT succeeded (the
queue connection lost at that instant): the task then runs again, so tenant
writes should be idempotent (e.g. keyed by the task's id_inicial).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession, TaskConnection, session_of
from nsj_queue_lib.engine.fleet_mode import fleet_mode

if TYPE_CHECKING:
    from nsj_queue_lib.worker_base import WorkerBase

logger = logging.getLogger(__name__)


class TaskKind(enum.Enum):
    """Which handler a task goes to (checked in this order)."""

    DEAD = "dead"
    PUBLICATION = "publication"
    SUBSCRIBER = "subscriber"
    PLAIN = "plain"


def task_kind(tarefa: dict) -> TaskKind:
    """The kind of a `tarefa` row: a dead letter first, whatever else it is."""
    if tarefa.get("dead"):
        return TaskKind.DEAD
    if tarefa.get("pub_sub"):
        return TaskKind.PUBLICATION
    if tarefa.get("subscriber_id"):
        return TaskKind.SUBSCRIBER
    return TaskKind.PLAIN


@dataclass
class TaskContext:
    """Everything one task's handlers may use, built by the runner for each task."""

    tarefa: dict
    settings: Optional[Settings]
    session: Optional[DbSession]  # the queue session, inside the task transaction
    bd_conn: Any  # what user code receives (a TaskConnection in the runtime)
    repo: Optional[TaskRepository] = None
    multi_db_conn: Any = None
    kind: TaskKind = field(init=False)
    tenant_raw: Any = None  # the pooled tenant connection behind multi_db_conn
    # Callables(repo) run by the runner after the task's outcome is recorded, each in its
    # own transaction (what must survive the task's rollback: a webhook's breaker state).
    followups: Optional[list] = None

    def after(self, followup: Any) -> None:
        """Run `followup(repo)` once the task is over (see `followups`)."""
        if self.followups is None:
            self.followups = []
        self.followups.append(followup)

    def __post_init__(self) -> None:
        self.kind = task_kind(self.tarefa)

    @classmethod
    def for_session(cls, tarefa: dict, settings: Settings, repo: TaskRepository) -> TaskContext:
        """Context of a claimed task on the worker's own session (what the runner uses)."""
        return cls(tarefa, settings, repo.session, TaskConnection(repo.session), repo)

    @classmethod
    def for_connection(cls, tarefa: dict, settings: Optional[Settings], bd_conn: Any,
                       multi_db_conn: Any = None) -> TaskContext:
        """Context for a direct call with a connection (`WorkerBase.dispatch`, a pub/sub
        worker's `execute` called by code that overrides it): the worker's `bd_conn`
        brings its own session (db/session.session_of); None, no database."""
        session = session_of(bd_conn) if bd_conn is not None else None
        return cls(tarefa, settings, session, bd_conn, multi_db_conn=multi_db_conn)

    def repository(self) -> TaskRepository:
        """The queue repository on the task's session (created on first use)."""
        if self.repo is None:
            if self.session is None or self.settings is None:
                raise RuntimeError("tarefa sem sessão de banco ou sem configuração da fila")
            self.repo = TaskRepository(self.session, self.settings.queue_table,
                                       self.settings.queue_subscriber_table,
                                       legacy=fleet_mode(self.settings))
        return self.repo


def route(worker: WorkerBase, ctx: TaskContext) -> Any:
    """Send the task to the handler of its kind; return what the handler returned."""
    if ctx.kind is TaskKind.DEAD:
        return worker.run_dead(ctx)
    if ctx.kind is TaskKind.PUBLICATION:
        from nsj_queue_lib.pubsub.fanout import publish

        return publish(ctx)
    if ctx.kind is TaskKind.SUBSCRIBER:
        return worker.run_subscriber(ctx)
    return worker.run_task(ctx)


class Router(Protocol):
    """What the runner needs around the user code of one task."""

    def route(self, ctx: TaskContext) -> Any:
        """Run the task's handler (inside the task transaction)."""

    def before_commit(self, ctx: TaskContext) -> None:
        """Called right before the queue transaction commits a success."""

    def commits_before(self, ctx: TaskContext) -> bool:
        """Whether `before_commit` commits something of its own for this task (a tenant
        transaction): the task's success mark must then be known before it (the runner
        does not send the mark with the COMMIT).  A router without this method: True."""

    def after_task(self, ctx: TaskContext, ok: bool) -> None:
        """Called once the task is over (committed, rolled back or failed)."""

    def close(self) -> None:
        """Release what the router holds (tenant connections)."""


class TaskRouter:
    """The runtime's router for a worker: tenant connection, then `route`."""

    def __init__(self, worker: WorkerBase, settings: Settings) -> None:
        self.worker = worker
        self.settings = settings
        self.pool: Optional[Any] = None
        if settings.multi_database:
            from nsj_queue_lib.multidb import CredentialsClient, TenantConnections, TokenProvider

            credentials = CredentialsClient(settings, TokenProvider(settings))
            self.pool = TenantConnections(credentials, driver="POSTGRES",
                                          application_name=f"nsj_queue_lib:{settings.queue_name}")

    def route(self, ctx: TaskContext) -> Any:
        if self.pool is not None and ctx.kind is not TaskKind.PUBLICATION \
                and self.worker.wants_multi_db_conn(ctx.tarefa):
            # False for code that cannot take `multi_db_conn` (a 3-argument execute, a
            # webhook): no credentials call and no tenant connection then, so such tasks
            # also run without a tenant.
            tenant = ctx.tarefa.get("tenant")
            ctx.tenant_raw = self.pool.acquire(tenant)  # MultiDatabaseError: a task failure
            ctx.multi_db_conn = TaskConnection(DbSession(ctx.tenant_raw))
        return route(self.worker, ctx)

    def before_commit(self, ctx: TaskContext) -> None:
        """Commit the tenant transaction right before the queue's own commit."""
        if ctx.tenant_raw is not None:
            ctx.tenant_raw.commit()

    def commits_before(self, ctx: TaskContext) -> bool:
        return ctx.tenant_raw is not None

    def after_task(self, ctx: TaskContext, ok: bool) -> None:
        """Return the tenant connection to the pool (rolled back unless committed)."""
        raw, ctx.tenant_raw = ctx.tenant_raw, None
        if raw is not None and self.pool is not None:
            self.pool.release(ctx.tarefa.get("tenant"), raw, ok=ok)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close_all()
