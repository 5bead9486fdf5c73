"""MySQL native mode on MariaDB, in process: MysqlGuard (SKIP LOCKED + real named locks) +
TaskRunner, for what only MySQL has (a row whose named lock another session holds, SIGNAL
and lock wait timeouts in user code, a killed connection, the microsecond clock).  The
task's life itself (success, priority and age, retries, dead letters, rescue, promotion
of scheduled tasks, purge and its admin lock) runs on every backend in tests/contract;
the SQL in test_mysql_repository.py."""

from __future__ import annotations

import datetime as dt
from typing import Any, List

import pytest

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.engine.base import task_lock_key
from nsj_queue_lib.engine.mysql.backend import MysqlBackend
from nsj_queue_lib.exceptions import DatabaseUnavailable
from nsj_queue_lib.queue_client import QueueClient
from nsj_queue_lib.runtime.runner import TaskRunner
from tests.fixtures.routers import FunctionRouter
from tests.mysql.conftest import make_settings


class RecordingBackend(MysqlBackend):
    """The MySQL native backend (real named locks), recording the wake-ups it sends."""

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.wakes: List[str] = []

    def wake_workers(self, session: DbSession, payload: str = "") -> None:
        self.wakes.append(payload)


class Worker:
    """What the consumer loop wires in MySQL native mode: its own session, MysqlGuard,
    TaskRunner (claim-ahead off: these tests go one task at a time)."""

    def __init__(self, settings, backend: RecordingBackend, handler) -> None:
        self.settings = settings
        self.session = DbSession.open(settings)
        self.repo = TaskRepository(self.session, settings.queue_table,
                                   settings.queue_subscriber_table)
        self.guard = backend.guard(self.session, self.repo)
        self.guard.claim_ahead = False
        self.locker = self.guard.locker
        self.runner = TaskRunner(settings, self.repo, self.guard, FunctionRouter(handler))

    def claim(self):
        claimed = self.guard.claim()
        return claimed[0] if claimed else None

    def run_next(self):
        tarefa = self.claim()
        assert tarefa is not None, "nenhuma tarefa disponível"
        return tarefa, self.runner.run(tarefa)

    def close(self) -> None:
        self.guard.close()
        self.session.close()


@pytest.fixture
def backend(mariadb_queue) -> RecordingBackend:
    return RecordingBackend(make_settings(mariadb_queue))


@pytest.fixture
def workers(mariadb_queue, backend):
    made: List[Worker] = []

    def make(handler, **settings_env: str) -> Worker:
        w = Worker(make_settings(mariadb_queue, **settings_env), backend, handler)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def _enqueue(q, payload: Any = "carga", **kwargs) -> int:
    conn = q.server.connect(q.database, autocommit=False)
    try:
        task_id = QueueClient(conn, q.table, q.sub_table).insert_task(
            "origem", "destino", "proc", kwargs.pop("chave_externa", None), payload, **kwargs)
        conn.commit()
        return task_id
    finally:
        conn.close()


def handler_ok(q):
    def run(tarefa: dict, bd_conn) -> str:
        bd_conn.execute(f"INSERT INTO `{q.database}`.efeitos (tarefa_id, chave) "
                        "VALUES (%(id)s, %(chave)s)", {"id": tarefa["id"], "chave": "ok"})
        return f"ok {tarefa['id']} {tarefa['payload']}"
    return run


def test_claim_skips_a_task_locked_by_another_worker(mariadb_queue, workers):
    first = _enqueue(mariadb_queue, prioridade=90)
    second = _enqueue(mariadb_queue, prioridade=10)
    a, b = workers(handler_ok(mariadb_queue)), workers(handler_ok(mariadb_queue))
    assert a.locker.try_lock(task_lock_key(mariadb_queue.table, first))  # a holds its lock
    # The waiting row whose lock another session holds is left as it is (the claim
    # returns nothing this time; the consumer retries at once with a short back-off).
    assert b.claim() is None and mariadb_queue.row(first)["status"] == "pendente"
    assert a.locker.unlock(task_lock_key(mariadb_queue.table, first))
    assert [b.claim()["id"], b.claim()["id"]] == [first, second]
    assert b.claim() is None


def test_sql_errors_of_the_handler_are_task_failures_not_lost_connections(mariadb_queue, workers):
    task_id = _enqueue(mariadb_queue)

    def signal(tarefa, bd_conn):
        bd_conn.execute("SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'regra de negocio'")

    w = workers(signal)
    assert w.run_next()[1] is False
    assert "regra de negocio" in mariadb_queue.row(task_id)["mensagem"]
    assert w.session.is_alive()


def test_lock_wait_timeout_in_handler_is_a_task_failure(mariadb_queue, workers):
    task_id = _enqueue(mariadb_queue)
    mariadb_queue.sql(f"INSERT INTO `{mariadb_queue.database}`.efeitos (id, chave) VALUES (1, 'x')")
    other = mariadb_queue.server.connect(mariadb_queue.database, autocommit=False)
    try:
        other.cursor().execute("UPDATE efeitos SET chave = 'y' WHERE id = 1")

        def blocked(tarefa, bd_conn):
            bd_conn.execute("SET SESSION innodb_lock_wait_timeout = 1")
            bd_conn.execute(f"UPDATE `{mariadb_queue.database}`.efeitos SET chave = 'z' "
                            "WHERE id = 1")

        w = workers(blocked)
        assert w.run_next()[1] is False
        assert "Lock wait timeout" in mariadb_queue.row(task_id)["mensagem"]
    finally:
        other.rollback()
        other.close()


def test_killed_connection_is_reported_as_unavailable(mariadb_queue, workers):
    w = workers(handler_ok(mariadb_queue))
    conn_id = w.session.fetch_value("SELECT CONNECTION_ID()")
    mariadb_queue.sql(f"KILL CONNECTION {int(conn_id)}")
    with pytest.raises(DatabaseUnavailable):
        w.repo.task_has_due()


def test_task_inserted_now_is_due_immediately(mariadb_queue, workers):
    """Microsecond clock: no wait for the next whole second (defect of 1.2.2 on MySQL)."""
    w = workers(handler_ok(mariadb_queue))
    for _ in range(5):
        now = dt.datetime.now(dt.timezone.utc)
        task_id = _enqueue(mariadb_queue, data_hora=now)
        stored = mariadb_queue.row(task_id)["data_hora"]
        assert stored == now.replace(tzinfo=None)
        assert w.repo.task_has_due() is True
        assert w.repo.task_seconds_to_next_due() <= 0
        tarefa = w.claim()
        assert tarefa is not None and tarefa["id"] == task_id
        w.runner.run(tarefa)
    default_id = _enqueue(mariadb_queue)  # data_hora from UTC_TIMESTAMP(6)
    assert w.claim()["id"] == default_id


# -- admin services on MySQL ---------------------------------------------------------


