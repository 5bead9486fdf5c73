"""Subscriber tasks run in-process against the real database (subscription read per task)."""

from __future__ import annotations

import datetime as dt
from typing import ClassVar

import pytest

from nsj_queue_lib.pubsub.message import SubscriptionNotFound
from nsj_queue_lib.worker_pub_sub_base import Subscriber, WorkerPubSubBase
from tests.pubsub.conftest import run_in_process


class MultiDbWorker(WorkerPubSubBase):
    """Records what its handlers received."""

    seen: ClassVar[list] = []

    @Subscriber("com_mdb")
    def with_mdb(self, payload, subscription, tarefa, bd_conn, multi_db_conn):
        self.seen.append(("com_mdb", payload, multi_db_conn))
        rows = bd_conn.execute("SELECT 1 AS um")
        return f"com_mdb {multi_db_conn} {rows[0]['um']}"

    @Subscriber("sem_mdb")
    def without_mdb(self, payload, subscription, tarefa, bd_conn):
        self.seen.append(("sem_mdb", payload, None))
        return "sem_mdb"


def test_multi_db_conn_and_subscription_read_at_execution_time(pg_queue):
    pg_queue.add_subscriber("com_mdb", tenant=3, headers={"A": "1"})
    pg_queue.add_subscriber("sem_mdb")
    worker = MultiDbWorker(pg_queue.settings())
    MultiDbWorker.seen = []
    pub_id = pg_queue.publish({"k": "v"}, tenant=3)
    run_in_process(pg_queue, worker, pub_id)
    tasks = {r["subscriber_id"]: r["id"] for r in pg_queue.rows("publication_id = %s", (pub_id,))}
    # the subscription is read when the task runs, not copied at fan-out
    pg_queue.sql(f"UPDATE {pg_queue.sub_table} SET url = 'http://depois.example' "
                 "WHERE id = 'com_mdb'")
    assert run_in_process(pg_queue, worker, tasks["com_mdb"], "MDB") == "com_mdb MDB 1"
    assert run_in_process(pg_queue, worker, tasks["sem_mdb"], "MDB") == "sem_mdb"
    _name, payload, mdb = MultiDbWorker.seen[0]
    assert mdb == "MDB"
    assert payload["publication"] == {"k": "v"}
    sub = payload["subscription"]
    assert sub["url"] == "http://depois.example"
    assert sub["tenant"] == 3 and sub["headers"] == {"A": "1"} and sub["ativo"] is True
    assert isinstance(sub["created_at"], dt.datetime) and sub["created_at"].tzinfo is not None


def test_deleted_subscriber_fails_clearly(pg_queue):
    pg_queue.add_subscriber("sem_mdb")
    worker = MultiDbWorker(pg_queue.settings())
    pub_id = pg_queue.publish({"k": "v"})
    run_in_process(pg_queue, worker, pub_id)
    [task] = pg_queue.rows("publication_id = %s", (pub_id,))
    pg_queue.sql(f"DELETE FROM {pg_queue.sub_table}")
    with pytest.raises(SubscriptionNotFound, match="'sem_mdb'"):
        run_in_process(pg_queue, worker, task["id"])


def test_publication_without_subscriber_table_setting_fails(pg_queue):
    pub_id = pg_queue.publish({"k": "v"})
    settings = pg_queue.settings().replace(queue_subscriber_table=None)
    with pytest.raises(Exception, match="QUEUE_SUBSCRIBER_TABLE"):
        run_in_process(pg_queue, MultiDbWorker(settings), pub_id)
