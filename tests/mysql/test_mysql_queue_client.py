"""QueueClient on MariaDB with pymysql and mysql-connector-python, in the caller's transaction."""

from __future__ import annotations

import datetime as dt

import pytest

from nsj_queue_lib.db.dialect import MYSQL, detect_dialect
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.queue_client import QueueClient

DRIVERS = ["pymysql", "mysql-connector"]


def _connect(q, driver: str):
    """A producer's own connection, not in autocommit and not in UTC."""
    if driver == "pymysql":
        import pymysql

        conn = pymysql.connect(host=q.server.host, port=q.server.port, user=q.server.user,
                               password=q.server.password, database=q.database,
                               autocommit=False)
    else:
        conn = q.server.connect_connector(q.database, autocommit=False)
    cur = conn.cursor()
    cur.execute("SET time_zone = '-03:00'")
    cur.close()
    return conn


@pytest.fixture(params=DRIVERS)
def producer(request, mariadb_queue):
    conn = _connect(mariadb_queue, request.param)
    yield conn
    conn.close()


def test_dialect_is_detected_from_both_drivers(producer):
    assert detect_dialect(producer) is MYSQL


def test_insert_is_part_of_the_callers_transaction(producer, mariadb_queue):
    client = QueueClient(producer, mariadb_queue.table, mariadb_queue.sub_table)
    task_id = client.insert_task("o", "d", "p", "k", {"a": 1})
    assert isinstance(task_id, int)
    cur = producer.cursor()
    cur.execute(f"SELECT status FROM {mariadb_queue.table} WHERE id = %s", (task_id,))
    # visible inside the caller's transaction
    assert [tuple(r) for r in cur.fetchall()] == [("pendente",)]
    cur.close()
    assert mariadb_queue.count() == 0  # not outside it
    producer.rollback()
    assert mariadb_queue.count() == 0
    kept = client.insert_task("o", "d", "p", "k", "texto")
    producer.commit()
    assert [r["id"] for r in mariadb_queue.rows()] == [kept]
    assert mariadb_queue.row(kept)["payload"] == "texto"


def test_task_is_due_at_once_whatever_the_callers_time_zone(producer, mariadb_queue, repo):
    client = QueueClient(producer, mariadb_queue.table, mariadb_queue.sub_table)
    task_id = client.insert_task("o", "d", "p", None, "x")
    producer.commit()
    utc = mariadb_queue.sql("SELECT UTC_TIMESTAMP(6) AS n")[0]["n"]
    assert abs((utc - mariadb_queue.row(task_id)["data_hora"]).total_seconds()) < 5
    assert repo.task_has_due() is True
    assert repo.task_claim_candidates(8) == [task_id]


def test_insert_tasks_returns_ids_in_order(producer, mariadb_queue):
    client = QueueClient(producer, mariadb_queue.table, mariadb_queue.sub_table)
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)
    ids = client.insert_tasks([
        {"origem": "o", "payload": {"n": 0}},
        {"origem": "o", "payload": "um", "prioridade": 90, "data_hora": later},
        {"origem": "o", "payload": None, "tenant": 5},
    ])
    producer.commit()
    rows = {r["id"]: r for r in mariadb_queue.rows()}
    assert [rows[i]["payload"] for i in ids] == ['{"n": 0}', "um", None]
    assert rows[ids[1]]["prioridade"] == 90
    assert rows[ids[1]]["data_hora"] == later.replace(tzinfo=None)
    assert rows[ids[2]]["tenant"] == 5


def test_list_equivalent_task_with_status_list(producer, mariadb_queue):
    client = QueueClient(producer, mariadb_queue.table, mariadb_queue.sub_table)
    a = client.insert_task("o", "d", "p", "k", {"a": 1}, tenant=1)
    client.insert_task("o", "d", "p", "k", {"a": 1}, tenant=2)
    client.insert_task("o", "d", "p", "k", {"a": 2}, tenant=1)
    found = client.list_equivalent_task("o", "d", "p", "k", {"a": 1}, tenant=1)
    assert [r["id"] for r in found] == [a]
    assert found[0]["payload"] == '{"a": 1}'
    assert found[0]["pub_sub"] is False and found[0]["dead"] is False
    assert isinstance(found[0]["data_hora"], dt.datetime)
    assert client.list_equivalent_task("o", "d", "p", "k", {"a": 1}, tenant=1,
                                       status=("sucesso",)) == []
    assert [r["id"] for r in client.list_equivalent_task(
        "o", "d", "p", "k", '{"a": 1}', tenant=1, status=["pendente"])] == [a]
    producer.rollback()


def test_pub_sub_insert_marks_the_publication(producer, mariadb_queue):
    client = QueueClient(producer, mariadb_queue.table, mariadb_queue.sub_table)
    pub = client.insert_task_pub_sub("o", "d", "evento", None, {"x": 1})
    hook = client.insert_task_webhook("o", "d", "evento", None, {"x": 2}, prioridade=10)
    producer.commit()
    assert mariadb_queue.row(pub)["pub_sub"] == 1
    assert (mariadb_queue.row(hook)["pub_sub"], mariadb_queue.row(hook)["prioridade"]) == (1, 10)


def test_repository_works_on_a_mysql_connector_session(mariadb_queue):
    conn = mariadb_queue.server.connect_connector(mariadb_queue.database, autocommit=True)
    try:
        repo = TaskRepository(DbSession(conn, MYSQL), mariadb_queue.table, mariadb_queue.sub_table)
        task_id = QueueClient(conn, mariadb_queue.table).insert_task("o", "d", "p", None, "x")
        tarefa = repo.task_mark_processing(task_id)
        assert tarefa["payload"] == "x" and tarefa["pub_sub"] is False
        assert repo.task_finish(task_id, "ok") is True
        assert repo.task_seconds_to_next_due() is None
    finally:
        conn.close()
