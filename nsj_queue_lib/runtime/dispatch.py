"""Bridges a claimed task to the worker's code, adding the tenant connection when on.

Multi-database mode (MULTI_DATABASE=true): before a task runs, its tenant's
database connection is taken from a pool (token and credentials cached; one
connection per tenant reused across tasks) and handed to methods that accept
`multi_db_conn`.  Atomicity, exactly: the tenant transaction is committed just
before the queue transaction (which holds the task's success mark and its
`bd_conn` writes).  If the task raises, or the tenant commit fails, both roll
back and the task is retried.  The one window without two-phase commit is a
failure of the queue COMMIT itself after the tenant COMMIT succeeded (the
queue connection lost at that instant): the task then runs again, so tenant
writes should be idempotent (e.g. keyed by the task's id_inicial).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.session import DbSession, TaskConnection

logger = logging.getLogger(__name__)


class Dispatcher:
    """Callable used by the runner: dispatch(tarefa, bd_conn) -> message."""

    def __init__(self, worker: Any, settings: Settings) -> None:
        self.worker = worker
        self.settings = settings
        self.pool: Optional[Any] = None
        self._current: Dict[str, Any] = {}
        if settings.multi_database:
            from nsj_queue_lib.multidb import CredentialsClient, TenantConnections, TokenProvider

            credentials = CredentialsClient(settings, TokenProvider(settings))
            self.pool = TenantConnections(credentials, driver="POSTGRES",
                                          application_name=f"nsj_queue_lib:{settings.queue_name}")

    def __call__(self, tarefa: dict, bd_conn: TaskConnection) -> Any:
        publication = tarefa.get("pub_sub") and not tarefa.get("dead")
        if self.pool is None or publication or not self._wants_tenant_conn(tarefa):
            return self.worker.dispatch(tarefa, bd_conn)
        tenant = tarefa.get("tenant")
        raw = self.pool.acquire(tenant)  # MultiDatabaseError: a recorded task failure
        self._current = {"tenant": tenant, "conn": raw}
        multi_db_conn = TaskConnection(DbSession(raw))
        return self.worker.dispatch(tarefa, bd_conn, multi_db_conn)

    def _wants_tenant_conn(self, tarefa: dict) -> bool:
        """False when the code to run cannot take `multi_db_conn` (a 3-argument
        `execute`, a webhook, a handler without it): then no credentials call and no
        tenant connection are made, so such tasks also run without a tenant."""
        wants = getattr(self.worker, "wants_multi_db_conn", None)
        return True if wants is None else bool(wants(tarefa))

    def before_commit(self, tarefa: dict) -> None:
        """Commit the tenant transaction right before the queue's own commit."""
        conn = self._current.get("conn")
        if conn is not None:
            conn.commit()

    def after_task(self, tarefa: dict, ok: bool) -> None:
        """Return the tenant connection to the pool (rolled back unless committed)."""
        current, self._current = self._current, {}
        if current.get("conn") is not None and self.pool is not None:
            self.pool.release(current["tenant"], current["conn"], ok=ok)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close_all()


def make_dispatch(worker: Any, settings: Settings) -> Dispatcher:
    """The dispatcher of `worker` for the runner."""
    return Dispatcher(worker, settings)
