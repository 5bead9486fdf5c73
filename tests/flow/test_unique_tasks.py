"""Unique tasks (insert_task(unique_key=...)) on PostgreSQL and MariaDB: one unfinished
task per key, enforced by the database's unique index; a concurrent inserter waits for
the first transaction and inserts when it rolls back; the key follows a retry chain and
is freed by success, a dead letter or a cancel."""

from __future__ import annotations

import json
import threading

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.exceptions import FeatureUnavailable
from tests.fixtures.waiting import eventually, holds


def _insert(q, key, payload=None, conn=None, **kwargs):
    own = conn is None
    conn = conn or q.new_conn()
    try:
        task_id = q.client(conn).insert_task("teste", "teste", "teste", None,
                                             json.dumps(payload or {"return": "ok"}),
                                             unique_key=key, **kwargs)
        if own:
            conn.commit()
        return task_id
    finally:
        if own:
            conn.close()


def test_same_key_returns_the_unfinished_task_and_adds_nothing(each_db_queue):
    dbq = each_db_queue
    first = _insert(dbq, "pedido-1")
    assert _insert(dbq, "pedido-1", {"outro": 1}) == first
    other = _insert(dbq, "pedido-2")
    assert other != first
    plain = dbq.insert({"return": "sem chave"})
    assert dbq.count() == 3
    assert dbq.row(first)["chave_unica"] == "pedido-1" and dbq.row(plain)["chave_unica"] is None
    # A finished task (sucesso, cancelada) frees the key: the next insert adds a task.
    dbq.sql(f"UPDATE {dbq.qtable} SET status = 'sucesso' WHERE id = %s", (first,))
    again = _insert(dbq, "pedido-1")
    assert again not in (first, other)
    QueueAdmin(dbq.conn, dbq.table).cancel(again)
    assert _insert(dbq, "pedido-1") not in (first, again)
    assert dbq.count("chave_unica = 'pedido-1'") == 3


def test_insert_tasks_and_publications_take_keys(each_db_queue):
    dbq = each_db_queue
    conn = dbq.new_conn()
    try:
        client = dbq.client(conn)
        ids = client.insert_tasks([
            {"origem": "o", "destino": "d", "processo": "p", "payload": "1", "unique_key": "a"},
            {"origem": "o", "destino": "d", "processo": "p", "payload": "2"},
            {"origem": "o", "destino": "d", "processo": "p", "payload": "3", "unique_key": "a"},
            {"origem": "o", "destino": "d", "processo": "p", "payload": "4", "unique_key": "b"},
        ])
        pub = client.insert_task_pub_sub("o", "d", "proc", None, {"x": 1}, unique_key="pub")
        assert client.insert_task_webhook("o", "d", "proc", None, {"x": 2},
                                          unique_key="pub") == pub
        conn.commit()
    finally:
        conn.close()
    assert ids[0] == ids[2] and len({ids[0], ids[1], ids[3]}) == 3
    assert dbq.count() == 4
    assert dbq.row(pub)["pub_sub"] is True and dbq.row(pub)["chave_unica"] == "pub"
    with pytest.raises(ValueError):
        _insert(dbq, "")
    with pytest.raises(ValueError):
        _insert(dbq, "x" * 251)


@pytest.mark.parametrize("outcome", ["rollback", "commit"])
def test_second_inserter_waits_for_the_first_transaction(each_db_queue, outcome):
    dbq = each_db_queue
    first_conn, second_conn = dbq.new_conn(), dbq.new_conn()
    try:
        held = _insert(dbq, "disputada", conn=first_conn)  # not committed yet
        result = {}

        def second() -> None:
            result["id"] = _insert(dbq, "disputada", {"segundo": True}, conn=second_conn)
            second_conn.commit()

        thread = threading.Thread(target=second, daemon=True)
        thread.start()
        holds(lambda: "id" not in result, 1.0, message="o segundo espera o primeiro")
        getattr(first_conn, outcome)()
        thread.join(15)
        assert not thread.is_alive()
    finally:
        first_conn.close()
        second_conn.close()
    rows = dbq.rows("chave_unica = 'disputada'")
    assert len(rows) == 1
    if outcome == "commit":
        assert result["id"] == held and json.loads(rows[0]["payload"]) == {"return": "ok"}
    else:
        assert result["id"] == rows[0]["id"] and json.loads(rows[0]["payload"]) == {
            "segundo": True}


def test_key_follows_the_retry_chain_and_a_dead_letter_frees_it(each_db_queue):
    dbq = each_db_queue
    # Attempt 1 fails; attempt 2 waits 10 minutes (QUEUE_BASE_INTERVAL_RETRY=10).
    dbq.start_ready_worker(QUEUE_MAX_RETRY="2", QUEUE_BASE_INTERVAL_RETRY="10")
    first = _insert(dbq, "com-retry", {"fail": True})
    chain = eventually(lambda: (lambda c: c if len(c) == 2 else None)(dbq.chain(first)), 30,
                       message="segunda tentativa agendada")
    assert [r["status"] for r in chain] == ["falha", "agendada"]
    assert [r["chave_unica"] for r in chain] == ["com-retry", "com-retry"]
    # The failed attempt waiting for its retry is not finished: same task.
    assert _insert(dbq, "com-retry") == chain[1]["id"]
    # The last attempt fails too: dead letter; the key is free again.
    assert QueueAdmin(dbq.conn, dbq.table).redrive(first).antecipada  # due now
    eventually(lambda: dbq.dead_letters(first), 30, message="fila de mortos")
    assert dbq.dead_letters(first)[0]["chave_unica"] is None
    new = _insert(dbq, "com-retry", {"return": "de novo"})
    assert new not in (first, chain[1]["id"])
    dbq.wait_status(new, "sucesso")


def test_mixed_fleet_mode_refuses_unique_keys(pg_queue):
    # (PostgreSQL only: the mode exists where 1.2.2 ran)
    QueueAdmin(pg_queue.conn, pg_queue.table).compat_on(por="teste")
    with pytest.raises(FeatureUnavailable, match="modo misto"):
        _insert(pg_queue, "k")
    assert pg_queue.count() == 0
    pg_queue.insert({"return": "sem chave vale"})
    assert pg_queue.count() == 1
