"""QueueAdmin against the databases without workers: concurrency, transactions, a queue
without a control table, and the two dialects' SQL files in step."""

from __future__ import annotations

import re
import threading
import time

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.queries import raw_queries
from nsj_queue_lib.exceptions import (
    ConfigError,
    ControlTableMissing,
    CoordinationError,
    InvalidTaskState,
)
from nsj_queue_lib.observability.status import read_status

PARAM = re.compile(r"%\((\w+)\)s")


def test_admin_sql_has_the_same_names_and_parameters_in_both_dialects():
    pg, my = raw_queries(POSTGRES, "admin.sql"), raw_queries(MYSQL, "admin.sql")
    # HALT in MySQL native mode goes through the control table; PostgreSQL has NOTIFY.
    assert set(my) - set(pg) == {"queue_halt_set", "queue_halt_get"}
    # The mixed-fleet mode with 1.2.2 exists on PostgreSQL only (engine/fleet_mode.py).
    assert set(pg) - set(my) == {"queue_compat_set", "queue_compat_column_exists"}
    for name in set(pg) & set(my):
        assert set(PARAM.findall(pg[name])) == set(PARAM.findall(my[name])), name
    assert "%" not in PARAM.sub("", "\n".join(my.values()))  # pymysql placeholders only




def test_halt_says_when_it_cannot_be_sent(socket_queue):
    with QueueAdmin.from_settings(socket_queue.settings()) as admin:  # no socket server running
        with pytest.raises(CoordinationError):
            admin.halt()
    if not socket_queue.is_mysql:  # PostgreSQL needs QUEUE_NAME (the channel) from the settings
        with pytest.raises(ConfigError, match="from_settings"):
            QueueAdmin(socket_queue.conn, socket_queue.table).halt()


def test_halt_refuses_a_table_whose_channel_it_does_not_know_postgres(pg_queue, pg_server):
    # `nsj-queue halt --tabela outra` must not stop the QUEUE_NAME workers instead.
    listener = pg_server.connect()
    try:
        with listener.cursor() as cur:
            cur.execute(f'LISTEN "{pg_queue.fila}"')
        with QueueAdmin.from_settings(pg_queue.settings(),
                                      queue_table=f"{pg_queue.schema}.outra_fila") as admin:
            with pytest.raises(ConfigError, match="QUEUE_NAME"):
                admin.halt()
        with QueueAdmin.from_settings(pg_queue.settings()) as admin:
            admin.halt()  # the workers' own queue: sent on their channel
        deadline = time.monotonic() + 5
        while not listener.notifies and time.monotonic() < deadline:
            listener.poll()
            time.sleep(0.01)
        assert [n.payload for n in listener.notifies] == ["HALT"]
    finally:
        listener.close()


def test_concurrent_redrives_of_one_chain_make_one_attempt_postgres(pg_queue, pg_server):
    root = pg_queue.insert({"n": 1})
    pg_queue.sql(f'UPDATE "{pg_queue.schema}"."{pg_queue.fila}" SET status = \'falha\', '
                 "estouro_tentativas = true WHERE id = %s", (root,))
    results, errors = [], []
    barrier = threading.Barrier(4)

    def redrive() -> None:
        conn = pg_server.connect()  # autocommit: each call is its own transaction
        try:
            barrier.wait()
            results.append(QueueAdmin(conn, pg_queue.table).retry(root))
        except InvalidTaskState as exc:
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=redrive) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(results) == 1 and len(errors) == 3
    assert [r["id"] for r in pg_queue.chain(root)] == [root, results[0]]


def test_writes_join_the_callers_transaction(pg_queue, pg_server):
    task_id = pg_queue.insert({"n": 1})
    conn = pg_server.connect(autocommit=False)
    try:
        admin = QueueAdmin(conn, pg_queue.table)
        admin.cancel(task_id)
        admin.pause()
        assert pg_queue.row(task_id)["status"] == "pendente"  # not committed yet
        assert QueueAdmin(pg_queue.conn, pg_queue.table).is_paused() is False
        conn.rollback()
        assert pg_queue.row(task_id)["status"] == "pendente"
        admin.cancel(task_id, motivo="x")
        conn.commit()
        assert pg_queue.row(task_id)["status"] == "cancelada"
    finally:
        conn.close()


def test_queue_without_control_table_works_and_pause_says_how_to_upgrade(pg_queue):
    pg_queue.sql(f'DROP TABLE "{pg_queue.schema}"."{pg_queue.fila}_controle"')
    admin = QueueAdmin(pg_queue.conn, pg_queue.table)
    assert admin.pause_state()["controle"] is False and admin.is_paused() is False
    with pytest.raises(ControlTableMissing, match="nsj-queue schema upgrade"):
        admin.pause()
    status = read_status(pg_queue.settings())
    assert status["pausa"]["pausada"] is False
    assert status["pausa"]["tabela_de_controle"] is False
    w = pg_queue.start_ready_worker()
    task_id = pg_queue.insert({"return": "sem controle"})
    pg_queue.wait_status(task_id, "sucesso")
    assert w.proc.poll() is None


def test_mysql_cancel_redrive_pause_and_concurrent_redrive(mariadb_queue, mysql_server):
    conn = mysql_server.connect(database=None)  # autocommit
    try:
        admin = QueueAdmin(conn, mariadb_queue.table)
        from nsj_queue_lib.queue_client import QueueClient

        producer = mysql_server.connect(database=None)
        root = QueueClient(producer, mariadb_queue.table).insert_task("o", "d", "p", "k", {"n": 1})
        producer.commit()
        producer.close()
        assert admin.cancel(root, motivo="teste") == root
        assert mariadb_queue.row(root)["status"] == "cancelada"
        results, errors = [], []
        barrier = threading.Barrier(3)

        def redrive() -> None:
            c = mysql_server.connect(database=None)
            try:
                barrier.wait()
                results.append(QueueAdmin(c, mariadb_queue.table).retry(root))
            except InvalidTaskState as exc:
                errors.append(exc)
            finally:
                c.close()

        threads = [threading.Thread(target=redrive) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert len(results) == 1 and len(errors) == 2
        new = mariadb_queue.row(results[0])
        assert (new["id_inicial"], new["id_anterior"], new["tentativa"], new["status"]) == (
            root, root, 2, "pendente")
        assert [r["id"] for r in admin.list_tasks()] == [results[0]]
        assert admin.show(root)["status"] == "pendente"
        assert admin.is_paused() is False
        admin.pause(motivo="janela", por="dba")
        state = admin.pause_state()
        assert (state["pausada"], state["motivo"], state["alterado_por"]) == (True, "janela", "dba")
        admin.resume()
        assert admin.is_paused() is False
    finally:
        conn.close()
