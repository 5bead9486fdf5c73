"""Pub/sub tasks go through the one router with the task's typed context (#12 item 1):
the subscription is read through the context's repository (the task's session, with its
`legacy` flag), not through a second repository rebuilt from `bd_conn`."""

from __future__ import annotations

from typing import ClassVar, List

from nsj_queue_lib.db import repository as repository_module
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession, TaskConnection
from nsj_queue_lib.runtime.router import TaskContext, route
from nsj_queue_lib.worker_pub_sub_base import DeadSubscriber, Subscriber, WorkerPubSubBase
from tests.pubsub.conftest import run_in_process


class RecordingRepository(TaskRepository):
    """A real repository that notes which subscriptions it read."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.read: List[str] = []

    def subscriber_get(self, subscriber_id):
        self.read.append(subscriber_id)
        return super().subscriber_get(subscriber_id)


class Worker(WorkerPubSubBase):
    seen: ClassVar[list] = []

    @Subscriber("s")
    def run_s(self, payload, subscription, tarefa, bd_conn):
        self.seen.append(("s", subscription["id"], bd_conn.execute("SELECT 1 AS um")[0]["um"]))
        return "s ok"

    @DeadSubscriber("s")
    def dead_s(self, payload, subscription, tarefa, bd_conn):
        self.seen.append(("dead", subscription["id"], tarefa["dead"]))
        return "dead ok"


def _built_repositories(monkeypatch) -> list:
    """Every TaskRepository created from now on (the runtime path must create none)."""
    built: list = []
    original = TaskRepository.__init__

    def init(self, *args, **kwargs):
        built.append(kwargs.get("legacy", False))
        original(self, *args, **kwargs)

    monkeypatch.setattr(repository_module.TaskRepository, "__init__", init)
    return built


def test_subscriber_and_dead_tasks_read_the_subscription_through_the_context(pg_queue,
                                                                              monkeypatch):
    pg_queue.add_subscriber("s")
    settings = pg_queue.settings(QUEUE_COMPAT_1_2_2="true")
    worker = Worker(settings)
    pub_id = pg_queue.publish({"k": "v"})
    run_in_process(pg_queue, worker, pub_id)
    [task_id] = [r["id"] for r in pg_queue.rows("publication_id = %s", (pub_id,))]
    session = DbSession(pg_queue.server.connect())
    try:
        repo = RecordingRepository(session, pg_queue.table, pg_queue.sub_table, legacy=True)
        assert repo.legacy  # (PostgreSQL with 1.2.2 workers beside)
        tarefa = repo.task_get(task_id)
        built = _built_repositories(monkeypatch)
        Worker.seen = []
        with session.transaction():
            ctx = TaskContext.for_session(tarefa, settings, repo)
            assert route(worker, ctx) == "s ok"
            dead = dict(tarefa, dead=True)
            assert route(worker, TaskContext.for_session(dead, settings, repo)) == "dead ok"
        assert Worker.seen == [("s", "s", 1), ("dead", "s", True)]
        assert repo.read == ["s", "s"]  # the context's own repository
        assert built == []  # none rebuilt from bd_conn (which would drop `legacy`)
    finally:
        session.close()


class Wrapping(WorkerPubSubBase):
    """Code written for 1.2.2 that wraps `execute` / `execute_dead` of its pub/sub worker."""

    calls: ClassVar[list] = []

    @Subscriber("s")
    def run_s(self, payload, subscription, tarefa, bd_conn):
        self.calls.append(("handler", subscription["id"]))
        return "s ok"

    @DeadSubscriber("s")
    def dead_s(self, payload, subscription, tarefa, bd_conn):
        self.calls.append(("dead handler", subscription["id"]))
        return "dead ok"

    def execute(self, payload, tarefa, bd_conn, multi_db_conn=None):
        self.calls.append(("execute", tarefa["subscriber_id"]))
        return "embrulhado: " + super().execute(payload, tarefa, bd_conn, multi_db_conn)

    def execute_dead(self, payload, tarefa, bd_conn, multi_db_conn=None):
        self.calls.append(("execute_dead", tarefa["subscriber_id"]))
        return "embrulhado: " + super().execute_dead(payload, tarefa, bd_conn, multi_db_conn)


def test_an_overridden_execute_still_runs_for_subscriber_and_dead_tasks(pg_queue):
    # Fails before the fix: the router's typed path went straight to the handlers, so an
    # override of execute / execute_dead (called for every task by 1.2.2 and before the
    # router) was silently skipped.
    pg_queue.add_subscriber("s")
    settings = pg_queue.settings()
    worker = Wrapping(settings)
    pub_id = pg_queue.publish({"k": "v"})
    run_in_process(pg_queue, worker, pub_id)
    [task_id] = [r["id"] for r in pg_queue.rows("publication_id = %s", (pub_id,))]
    session = DbSession(pg_queue.server.connect())
    try:
        repo = TaskRepository(session, pg_queue.table, pg_queue.sub_table)
        tarefa = repo.task_get(task_id)
        Wrapping.calls = []
        with session.transaction():
            assert route(worker, TaskContext.for_session(tarefa, settings, repo)) == (
                "embrulhado: s ok")
            dead = dict(tarefa, dead=True)
            assert route(worker, TaskContext.for_session(dead, settings, repo)) == (
                "embrulhado: dead ok")
        assert Wrapping.calls == [("execute", "s"), ("handler", "s"),
                                  ("execute_dead", "s"), ("dead handler", "s")]
    finally:
        session.close()


def test_a_direct_call_with_the_workers_bd_conn_runs_on_its_own_session(pg_queue):
    """A direct call (`dispatch`, a pub/sub `execute` that overriding code calls) with the
    worker's `bd_conn` builds its context on the session that `bd_conn` belongs to, with
    that session's transaction state, not on a second session wrapped around its raw
    `.conn` (before: `getattr(bd_conn, "conn", bd_conn)`).  A caller's DB-API connection,
    given as is or as the `.conn` of a 1.2.2-style wrapper, gets a session on it."""
    pg_queue.add_subscriber("s")
    settings = pg_queue.settings()
    worker = Worker(settings)
    pub_id = pg_queue.publish({"k": "v"})
    session = DbSession(pg_queue.server.connect())
    try:
        tarefa = TaskRepository(session, pg_queue.table, pg_queue.sub_table).task_get(pub_id)
        bd_conn = TaskConnection(session)
        with session.transaction():
            ctx = TaskContext.for_connection(tarefa, settings, bd_conn)
            assert ctx.session is session and ctx.bd_conn is bd_conn
            assert ctx.session.in_transaction
            worker.dispatch(tarefa, bd_conn)  # the fan-out, in the caller's transaction
            assert pg_queue.count("publication_id = %s", (pub_id,)) == 0  # not committed yet
        assert pg_queue.count("publication_id = %s", (pub_id,)) == 1
        raw = session.conn

        class Legacy:  # what 1.2.2 callers pass: an object exposing the connection
            conn = raw

        for given in (raw, Legacy()):
            other = TaskContext.for_connection(tarefa, settings, given)
            assert other.session is not None and other.session.conn is raw
            assert other.repository().subscriber_get("s")["id"] == "s"
        assert TaskContext.for_connection(tarefa, settings, None).session is None
    finally:
        session.close()
