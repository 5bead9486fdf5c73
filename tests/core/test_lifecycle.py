"""A task's life with worker subprocesses: commit, success, retries, dead letters,
priorities, scheduling and wake-ups.  The tests taking `dq` run on every dialect
(PostgreSQL, and MariaDB in MySQL native mode); those taking `queue` check what only
PostgreSQL has (its trigger, its clock functions, a producer's transaction on it)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time

import pytest

from tests.client_server.cs_helpers import CsQueue
from tests.helpers import eventually
from tests.mysql_server import require_mysql

TAREFA_KEYS = sorted([
    "id", "id_inicial", "data_hora_inicial", "data_hora", "origem", "destino", "processo",
    "chave_externa", "proxima_tentativa", "tentativa", "status", "mensagem", "id_anterior",
    "data_hora_anterior", "status_anterior", "mensagem_anterior", "tenant",
    "grupo_empresarial", "payload", "payload_hash", "pub_sub", "publication_id",
    "subscriber_id", "dead", "live_id", "prioridade",
])


@pytest.fixture(params=["postgres", pytest.param("mariadb-native", marks=pytest.mark.mysql)])
def dq(request, tmp_path):
    """A fresh queue on each dialect, served by workers in the database's own mode."""
    if request.param == "postgres":
        yield request.getfixturevalue("queue")
        return
    q = CsQueue.create("mariadb", require_mysql(), tmp_path)
    q.native = True
    yield q
    q.destroy()


def _seconds(delta: dt.timedelta) -> float:
    return delta.total_seconds()


def test_rolled_back_producer_transaction_never_runs(queue, pg_server):
    queue.start_ready_worker()
    conn = pg_server.connect(autocommit=False)
    try:
        client = queue.client(conn)
        lost_id = client.insert_task("teste", "teste", "teste", "rb", {"efeito": "rolled_back"})
        conn.rollback()
        control_id = client.insert_task("teste", "teste", "teste", "ok", {"efeito": "control"})
        conn.commit()
    finally:
        conn.close()

    queue.wait_status(control_id, "sucesso")
    queue.wait_idle()
    assert queue.count(f"id = {lost_id}") == 0
    assert [r["id"] for r in queue.rows()] == [control_id]
    assert [(e["tarefa_id"], e["chave"]) for e in queue.effects()] == [(control_id, "control")]


def test_success_commits_effect_with_status_and_passes_26_keys(dq):
    payload = json.dumps({"efeito": "s", "report": True})
    task_id = dq.insert(payload, processo="proc", chave_externa="ch-1", tenant=7,
                           grupo_empresarial="GE")
    dq.start_worker()
    row = dq.wait_status(task_id, "sucesso")

    assert row["mensagem"] == f"ok {task_id}"
    assert row["tentativa"] == 1
    assert dq.count() == 1  # no retry row
    effects = dq.effects()
    assert [(e["tarefa_id"], e["tipo"]) for e in effects] == [(task_id, "execute"),
                                                              (task_id, "report")]
    report = json.loads(effects[1]["chave"])
    assert report["keys"] == TAREFA_KEYS
    assert len(report["keys"]) == 26
    assert report["payload_type"] == "str"
    assert report["payload"] == payload


def test_retry_chain_columns(dq):
    # 0.02 min = 1.2 s per tentativa: attempt 2 after 1.2 s, attempt 3 after 2.4 s.
    dq.start_ready_worker(QUEUE_BASE_INTERVAL_RETRY="0.02", QUEUE_MAX_RETRY="5")
    payload = json.dumps({"efeito": "r", "fail_until": 3, "report": True})
    first = dq.insert(payload, prioridade=70)
    eventually(lambda: any(r["status"] == "sucesso" for r in dq.chain(first)), timeout=30,
               message="chain succeeds")
    r1, r2, r3 = dq.chain(first)

    assert [r["tentativa"] for r in (r1, r2, r3)] == [1, 2, 3]
    assert [r["status"] for r in (r1, r2, r3)] == ["falha", "falha", "sucesso"]
    assert r1["id_inicial"] is None
    for prev, cur in ((r1, r2), (r2, r3)):
        assert prev["reenfileirado"] is True
        assert prev["mensagem"].startswith(
            f"RuntimeError: falha programada na tentativa {prev['tentativa']}")
        assert prev["mensagem"].endswith("Tarefa reenfileirada.")
        assert cur["id_inicial"] == first
        assert cur["id_anterior"] == prev["id"]
        assert cur["data_hora_anterior"] == prev["data_hora"]
        assert cur["status_anterior"] == "falha"
        assert cur["mensagem_anterior"] == prev["mensagem"]
        assert cur["data_hora"] == prev["proxima_tentativa"]
        assert cur["data_hora_inicial"] == r1["data_hora_inicial"]
        assert cur["prioridade"] == 70
        assert cur["payload"] is None
        assert cur["payload_hash"] == r1["payload_hash"]
    # proxima_tentativa = failure time + tentativa x 1.2 s (the run starts at data_hora).
    gap1 = _seconds(r1["proxima_tentativa"] - r1["data_hora"])
    gap2 = _seconds(r2["proxima_tentativa"] - r2["data_hora"])
    assert 1.2 <= gap1 < 2.0, gap1
    assert 2.4 <= gap2 < 3.2, gap2
    assert r3["proxima_tentativa"] is None
    assert r3["mensagem"] == f"ok {r3['id']}"

    # Only the successful attempt's writes were committed, and it received the payload
    # of the first attempt although its own row stores none.
    effects = dq.effects()
    assert [(e["tarefa_id"], e["tipo"]) for e in effects] == [(r3["id"], "execute"),
                                                              (r3["id"], "report")]
    report = json.loads(effects[1]["chave"])
    assert report["payload"] == payload
    assert report["tentativa"] == 3
    assert report["id_inicial"] == first


def test_dead_letter_after_max_retry(dq):
    payload = json.dumps({"efeito": "d", "fail": True})
    first = dq.insert(payload, prioridade=80, chave_externa="k-dead", tenant=3)
    dq.start_worker(QUEUE_MAX_RETRY="2")
    dead = eventually(lambda: next((r for r in dq.rows("dead") if r["status"] == "sucesso"),
                                   None), message="dead letter handled")
    dq.wait_idle()

    live = dq.chain(first)
    assert [(r["tentativa"], r["status"]) for r in live] == [(1, "falha"), (2, "falha")]
    assert live[1]["estouro_tentativas"] is True
    assert live[1]["reenfileirado"] is False
    assert "Máximo de tentativas" in live[1]["mensagem"]
    assert dead["live_id"] == first
    assert dead["dead"] is True
    assert dead["tentativa"] == 1
    assert dead["payload"] == payload
    assert dead["prioridade"] == 80
    assert dead["chave_externa"] == "k-dead"
    assert dead["tenant"] == 3
    assert dead["mensagem"] == f"morta tratada {dead['id']} (original {first})"
    assert dq.count() == 3
    assert [(e["tarefa_id"], e["tipo"], e["chave"]) for e in dq.effects()] == [
        (dead["id"], "dead", "d")]


def test_failing_dead_chain_ends_without_second_dead_chain(dq):
    first = dq.insert({"fail": True, "fail_dead": True})
    dq.start_worker(QUEUE_MAX_RETRY="2")
    eventually(lambda: dq.count("dead AND tentativa = 2 AND status = 'falha'") == 1,
               message="dead chain exhausted")
    dq.wait_idle()
    # The last dead attempt is marked 'falha' in the same transaction that would insert
    # another dead row, so the count is final here.
    rows = dq.rows()
    assert [(r["dead"], r["tentativa"], r["status"]) for r in rows] == [
        (False, 1, "falha"), (False, 2, "falha"), (True, 1, "falha"), (True, 2, "falha")]
    assert rows[2]["live_id"] == first
    assert rows[3]["id_inicial"] == rows[2]["id"]
    assert rows[3]["estouro_tentativas"] is True
    assert "fila de mortos" in rows[3]["mensagem"]
    assert dq.count("dead") == 2
    assert dq.effects() == []  # every execute_dead rolled back


def test_priority_then_age_order(dq):
    prios = [10, 90, 50, 90, 30, 50]
    ids = [dq.insert({"efeito": f"p{i}"}, prioridade=p) for i, p in enumerate(prios)]
    dq.start_worker()
    dq.wait_idle()
    expected = [i for _, i in sorted(zip(prios, ids), key=lambda t: (-t[0], t[1]))]
    assert [e["tarefa_id"] for e in dq.effects()] == expected
    assert dq.count("status = 'sucesso'") == len(ids)


def test_tasks_inserted_before_worker_starts_are_run(dq):
    ids = [dq.insert({"efeito": f"pre{i}"}) for i in range(3)]
    dq.start_worker()
    for task_id in ids:
        dq.wait_status(task_id, "sucesso")
    assert sorted(e["tarefa_id"] for e in dq.effects()) == ids


def test_scheduled_task_runs_when_due_not_before(queue):
    queue.start_ready_worker()
    due = queue.value("SELECT clock_timestamp() + interval '2 seconds'")
    task_id = queue.insert({"efeito": "sched"}, data_hora=due)
    row = queue.row(task_id)
    assert row["status"] == "pendente"
    assert row["data_hora"] == due
    queue.wait_status(task_id, "sucesso", timeout=10)
    ran_at = queue.effects()[0]["criado"]
    assert ran_at >= due
    assert _seconds(ran_at - due) <= 1.5, ran_at - due


def test_lost_notification_is_picked_up_by_periodic_poll(queue):
    queue.sql(f'ALTER TABLE "{queue.schema}"."{queue.fila}" DISABLE TRIGGER ALL')
    queue.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="1")
    started = time.monotonic()
    task_id = queue.insert({"efeito": "lost"})
    queue.wait_status(task_id, "sucesso", timeout=5)
    assert time.monotonic() - started < 5
    assert len(queue.effects()) == 1


def test_mixed_case_queue_name_wakes_worker_on_insert(pg_server):
    import uuid

    from tests.helpers import Queue

    q = Queue.create(pg_server, schema=f"t_{uuid.uuid4().hex[:10]}", fila="FilaX")
    try:
        # A 60 s poll: only the trigger's notification can run the task in time.
        # Quoted names keep their case (unquoted ones fold to lower case, as in SQL).
        q.start_ready_worker(QUEUE_WAIT_NOTIFY_INTERVAL="60")
        assert q.worker_env()["QUEUE_TABLE"] == f'{q.schema}."FilaX"'
        task_id = q.insert({"efeito": "case"})
        q.wait_status(task_id, "sucesso", timeout=5)
        assert [e["chave"] for e in q.effects()] == ["case"]
    finally:
        q.destroy()


def test_payload_hash_and_json_of_dict_payload(dq):
    task_id = dq.client().insert_task("o", "d", "p", "c", {"a": 1, "b": "ç"})
    row = dq.row(task_id)
    assert json.loads(row["payload"]) == {"a": 1, "b": "ç"}
    assert row["payload_hash"] == hashlib.sha256(row["payload"].encode()).hexdigest()
