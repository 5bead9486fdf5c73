"""Rows the real 1.2.2 wrote are read as 1.2.2 meant them: dict payloads (its JSON),
payload_hash bytea, retry attempts with a NULL payload, falha_processando, and the
fan-out envelope."""

from __future__ import annotations

import datetime as dt
import json
import textwrap

import pytest

from nsj_queue_lib.db import schema
from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.queue_client import QueueClient
from tests.fixtures.waiting import eventually

DICT = {"pedido": 7, "cliente": "João", "quando": dt.datetime(2026, 11, 23, 10, 30, 5, 123)}

PRODUCE_DICT = textwrap.dedent('''
    import datetime as dt, os, psycopg2
    from nsj_queue_lib.queue_client import QueueClient
    conn = psycopg2.connect(host=os.environ["DB_HOST"], port=os.environ["DB_PORT"],
                            dbname=os.environ["DB_BASE"], user=os.environ["DB_USER"])
    QueueClient(conn, os.environ["QUEUE_TABLE"]).insert_task(
        "o", "d", "p", "ch-1", {"pedido": 7, "cliente": "João",
                                "quando": dt.datetime(2026, 11, 23, 10, 30, 5, 123)})
    conn.commit()
''')


@pytest.fixture
def legacy_setup(legacy_queue):
    """A queue made by the real 1.2.2 db_gen (the shared compat fixture)."""
    return legacy_queue


def test_dict_payload_of_a_1_2_2_producer_is_found_by_list_equivalent_task(legacy_setup):
    conn, fleet = legacy_setup
    path = fleet.legacy.script("produce_dict.py", PRODUCE_DICT)
    import subprocess

    res = subprocess.run([fleet.legacy.python, str(path)], env=fleet.legacy_env(),
                         cwd=str(fleet.legacy.workdir), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    table = f"{fleet.schema}.{fleet.fila}"
    for upgraded in (False, True):  # bytea payload_hash before the upgrade, text after
        if upgraded:
            schema.upgrade(conn, POSTGRES, fleet.schema, fleet.fila)
        found = QueueClient(conn, table).list_equivalent_task("o", "d", "p", "ch-1", DICT)
        assert [r["chave_externa"] for r in found] == ["ch-1"], upgraded
    assert QueueClient(conn, table).list_equivalent_task(
        "o", "d", "p", "ch-1", {**DICT, "pedido": 8}) == []


def test_retry_rows_falha_processando_and_envelopes_of_1_2_2_run_on_2x(legacy_setup):
    conn, fleet = legacy_setup
    s, f = fleet.schema, fleet.fila
    with conn.cursor() as cur:
        # A chain as 1.2.2's rescue leaves it: first attempt falha_processando with the
        # payload; the next attempt 'pendente' (promoted) with payload NULL.
        cur.execute(f"INSERT INTO {s}.{f} (payload, payload_hash, status, reenfileirado) "
                    "VALUES ('cadeia-1', 'h', 'falha_processando', true) RETURNING id")
        first = cur.fetchone()[0]
        cur.execute(f"INSERT INTO {s}.{f} (id_inicial, tentativa, status, id_anterior, "
                    "status_anterior, payload_hash) VALUES (%s, 2, 'pendente', %s, "
                    "'processando', 'h')", (first, first))
    schema.upgrade(conn, POSTGRES, s, f)

    def effects():
        with conn.cursor() as cur:
            cur.execute(f"SELECT chave FROM {s}.efeitos ORDER BY chave")
            return [r[0] for r in cur.fetchall()]

    plain = fleet.start_v2("tests.compat.worker_v2", "linhas-plain")
    eventually(lambda: effects() == ["cadeia-1"], 30, message="cadeia 1.2.2")
    plain.stop()
    with conn.cursor() as cur:
        cur.execute(f"SELECT status FROM {s}.{f} ORDER BY id")
        assert [r[0] for r in cur.fetchall()] == ["falha_processando", "sucesso"]
    with conn.cursor() as cur:
        # A subscriber task in 1.2.2's envelope.
        cur.execute(f"INSERT INTO {s}.{f}_subscriber (id, processo) VALUES ('s1', 'proc')")
        envelope = json.dumps({"publication": "pub-1", "subscription": {
            "id": "s1", "tenant": None, "grupo_empresarial": None, "processo": "proc",
            "url": None, "http_method": None, "headers": None, "ativo": True,
            "created_at": "2026-11-23T10:00:00"}})
        cur.execute(f"INSERT INTO {s}.{f} (processo, payload, publication_id, subscriber_id) "
                    "VALUES ('proc', %s, 1, 's1')", (envelope,))
    fleet.start_v2("tests.compat.worker_v2", "linhas-pubsub", TEST_KIND="pubsub")
    eventually(lambda: effects() == ["cadeia-1", "s1:pub-1"], 30, message="envelope 1.2.2")
