"""QueueClient on a real PostgreSQL: ids, payload storage, equivalence and transactions."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os

import pytest
from psycopg2.extensions import TRANSACTION_STATUS_INTRANS

from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.queue_client import QueueClient
from tests.fixtures.processes import run_python


@pytest.fixture
def tx_conn(pg_server):
    conn = pg_server.connect(autocommit=False)
    yield conn
    conn.close()


def test_insert_task_returns_the_new_id_and_fills_columns(pg_queue, tx_conn):
    client = pg_queue.client(tx_conn)
    task_id = client.insert_task("orig", "dest", "proc", "ch-1", "texto", tenant=5,
                                 grupo_empresarial="GE", prioridade=77)
    tx_conn.commit()
    assert isinstance(task_id, int)
    row = pg_queue.row(task_id)
    assert (row["origem"], row["destino"], row["processo"], row["chave_externa"]) == (
        "orig", "dest", "proc", "ch-1")
    assert (row["tenant"], row["grupo_empresarial"], row["prioridade"]) == (5, "GE", 77)
    assert (row["status"], row["tentativa"], row["pub_sub"], row["dead"]) == (
        "pendente", 1, False, False)
    assert row["payload"] == "texto"
    assert row["payload_hash"] == hashlib.sha256(b"texto").hexdigest()
    assert row["id_inicial"] is None
    assert row["data_hora"] == row["data_hora_inicial"]


def test_default_priority_is_50_and_data_hora_sets_both_columns(pg_queue, tx_conn):
    when = dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    client = pg_queue.client(tx_conn)
    a = client.insert_task("o", "d", "p", None, "a")
    b = client.insert_task("o", "d", "p", None, "b", data_hora=when)
    tx_conn.commit()
    assert pg_queue.row(a)["prioridade"] == 50
    row = pg_queue.row(b)
    assert row["data_hora"] == when
    assert row["data_hora_inicial"] == when
    assert row["status"] == "pendente"


def test_dict_payload_is_stored_as_json_text_with_sha256_hex(pg_queue, tx_conn):
    payload = {"pedido": 10, "nome": "João", "itens": [1, 2]}
    task_id = pg_queue.client(tx_conn).insert_task("o", "d", "p", "c", payload)
    tx_conn.commit()
    row = pg_queue.row(task_id)
    assert isinstance(row["payload"], str)
    assert json.loads(row["payload"]) == payload
    assert row["payload_hash"] == hashlib.sha256(row["payload"].encode("utf-8")).hexdigest()
    assert len(row["payload_hash"]) == 64


def test_list_equivalent_task_with_dict_and_with_str(pg_queue, tx_conn):
    payload = {"pedido": 10, "nome": "João"}
    client = pg_queue.client(tx_conn)
    task_id = client.insert_task("o", "d", "p", "c", payload, tenant=1, grupo_empresarial="G")
    other = client.insert_task("o", "d", "p", "c", {"pedido": 11}, tenant=1,
                               grupo_empresarial="G")
    tx_conn.commit()
    text = pg_queue.row(task_id)["payload"]

    by_dict = client.list_equivalent_task("o", "d", "p", "c", payload, tenant=1,
                                          grupo_empresarial="G")
    by_str = client.list_equivalent_task("o", "d", "p", "c", text, tenant=1,
                                         grupo_empresarial="G")
    assert [t["id"] for t in by_dict] == [task_id]
    assert [t["id"] for t in by_str] == [task_id]
    assert other not in [t["id"] for t in by_dict]
    assert by_dict[0]["payload"] == text

    # Every other identifying field must match too.
    assert client.list_equivalent_task("o", "d", "p", "outra", payload, tenant=1,
                                       grupo_empresarial="G") == []
    assert client.list_equivalent_task("o", "d", "p", "c", payload, tenant=2,
                                       grupo_empresarial="G") == []
    assert client.list_equivalent_task("o", "d", "p", "c", payload) == []
    assert client.list_equivalent_task("x", "d", "p", "c", payload, tenant=1,
                                       grupo_empresarial="G") == []
    assert client.list_equivalent_task("o", "d", "p", "c", payload, tenant=1,
                                       grupo_empresarial="G", status=["falha"]) == []


def test_list_equivalent_task_ignores_finished_with_failure(pg_queue, tx_conn):
    client = pg_queue.client(tx_conn)
    task_id = client.insert_task("o", "d", "p", "c", "x")
    tx_conn.commit()
    pg_queue.sql(f'UPDATE "{pg_queue.schema}"."{pg_queue.fila}" SET status = \'falha\' WHERE id = '
                 f'%s',
              (task_id,))
    assert client.list_equivalent_task("o", "d", "p", "c", "x") == []
    found = client.list_equivalent_task("o", "d", "p", "c", "x", status=["falha"])
    assert [t["id"] for t in found] == [task_id]


def test_client_never_commits(pg_queue, tx_conn):
    client = pg_queue.client(tx_conn)
    task_id = client.insert_task("o", "d", "p", "c", {"a": 1})
    ids = client.insert_tasks([{"payload": "x"}, {"payload": "y"}])
    assert pg_queue.count() == 0  # invisible from another connection
    assert tx_conn.get_transaction_status() == TRANSACTION_STATUS_INTRANS  # caller's tx open
    tx_conn.commit()
    assert [r["id"] for r in pg_queue.rows()] == [task_id, *ids]


def test_insert_tasks_returns_ids_in_order(pg_queue, tx_conn):
    tasks = [{"origem": "o", "destino": "d", "processo": "p", "chave_externa": str(i),
              "payload": {"n": i}, "prioridade": 100 - i} for i in range(25)]
    ids = pg_queue.client(tx_conn).insert_tasks(tasks)
    tx_conn.commit()
    assert len(ids) == 25
    assert len(set(ids)) == 25
    for i, task_id in enumerate(ids):
        row = pg_queue.row(task_id)
        assert row["chave_externa"] == str(i)
        assert json.loads(row["payload"]) == {"n": i}
        assert row["prioridade"] == 100 - i
    assert pg_queue.client(tx_conn).insert_tasks([]) == []


def test_insert_tasks_rejects_unknown_fields(pg_queue, tx_conn):
    with pytest.raises(TypeError, match="campos desconhecidos"):
        pg_queue.client(tx_conn).insert_tasks([{"payload": "x", "stauts": "sucesso"}])


def test_invalid_table_name_is_rejected(pg_server):
    conn = pg_server.connect()
    try:
        with pytest.raises(ConfigError, match="queue_table"):
            QueueClient(conn, "fila; drop table x")
    finally:
        conn.close()


def test_importing_queue_client_needs_no_environment(tmp_path):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    res = run_python(["-c", "from nsj_queue_lib.queue_client import QueueClient; print('ok')"],
                     env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"
