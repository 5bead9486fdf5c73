"""Every TaskRepository method on a real MariaDB (the MySQL dialect)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from nsj_queue_lib.db import repository as repo_mod
from nsj_queue_lib.db.payload import payload_hash
from nsj_queue_lib.db.queries import TAREFA_COLUMNS
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.queue_client import QueueClient

UTC = dt.timezone.utc


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC).replace(tzinfo=None)


def _client(repo: TaskRepository, q) -> QueueClient:
    return QueueClient(repo.session.conn, q.table, q.sub_table)


def _insert(repo, q, payload="p", **kwargs) -> int:
    return _client(repo, q).insert_task(kwargs.pop("origem", "o"), kwargs.pop("destino", "d"),
                                        kwargs.pop("processo", "proc"),
                                        kwargs.pop("chave_externa", None), payload, **kwargs)


def _processing(repo, q, payload="p", **kwargs) -> dict:
    tarefa = repo.task_mark_processing(_insert(repo, q, payload, **kwargs))
    assert tarefa is not None
    return tarefa


# -- producer -----------------------------------------------------------------
def test_task_insert_returns_id_and_fills_defaults(repo, mariadb_queue):
    before = utcnow()
    task_id = _insert(repo, mariadb_queue, {"a": 1}, chave_externa="k", tenant=7,
                      grupo_empresarial="g", prioridade=70)
    after = utcnow()
    row = mariadb_queue.row(task_id)
    assert row["status"] == "pendente" and row["tentativa"] == 1
    assert row["payload"] == '{"a": 1}' and row["payload_hash"] == payload_hash('{"a": 1}')
    assert (row["tenant"], row["grupo_empresarial"], row["prioridade"]) == (7, "g", 70)
    assert row["pub_sub"] == 0 and row["dead"] == 0 and row["id_inicial"] is None
    # UTC with microseconds, whatever the server's own time zone.
    assert before - dt.timedelta(seconds=1) <= row["data_hora"] <= after + dt.timedelta(seconds=1)
    assert row["data_hora"] == row["data_hora_inicial"]


def test_task_insert_converts_aware_datetimes_to_utc(repo, mariadb_queue):
    brt = dt.timezone(dt.timedelta(hours=-3))
    when = dt.datetime(2030, 1, 2, 9, 30, 15, 123456, tzinfo=brt)
    task_id = _insert(repo, mariadb_queue, data_hora=when)
    assert mariadb_queue.row(task_id)["data_hora"] == dt.datetime(2030, 1, 2, 12, 30, 15, 123456)
    naive = dt.datetime(2030, 1, 2, 12, 0, 0, 1)  # naive means UTC
    assert mariadb_queue.row(_insert(repo, mariadb_queue, data_hora=naive))["data_hora"] == naive


def test_task_insert_many_returns_ids_in_order_across_chunks(repo, mariadb_queue, monkeypatch):
    monkeypatch.setattr(repo_mod, "MYSQL_INSERT_CHUNK", 4)
    tasks = [{"payload": f"p{i}", "prioridade": i} for i in range(10)]
    ids = _client(repo, mariadb_queue).insert_tasks(tasks)
    assert len(ids) == 10 and len(set(ids)) == 10
    for i, task_id in enumerate(ids):
        row = mariadb_queue.row(task_id)
        assert (row["payload"], row["prioridade"]) == (f"p{i}", i)
    assert _client(repo, mariadb_queue).insert_tasks([]) == []


def test_task_insert_many_honours_auto_increment_increment(repo, mariadb_queue):
    repo.session.execute("SET SESSION auto_increment_increment = 3")
    fresh = TaskRepository(repo.session, mariadb_queue.table, mariadb_queue.sub_table)
    _insert(repo, mariadb_queue)
    ids = fresh.task_insert_many([
        dict(origem="o", destino="d", processo="x", chave_externa=None, payload=f"m{i}",
             payload_hash=None, tenant=None, grupo_empresarial=None, pub_sub=i == 1,
             prioridade=50, data_hora=None) for i in range(3)])
    assert ids[1] - ids[0] == 3
    assert [mariadb_queue.row(i)["payload"] for i in ids] == ["m0", "m1", "m2"]
    assert [mariadb_queue.row(i)["pub_sub"] for i in ids] == [0, 1, 0]


def test_task_list_equivalent_binds_status_list_and_null_safe_columns(repo, mariadb_queue):
    a = _insert(repo, mariadb_queue, {"x": 1}, chave_externa=None)
    b = _insert(repo, mariadb_queue, {"x": 1}, chave_externa=None)
    _insert(repo, mariadb_queue, {"x": 1}, chave_externa="other")
    _insert(repo, mariadb_queue, {"x": 2}, chave_externa=None)
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET status = 'sucesso' WHERE id = %s", (b,))
    params = dict(payload_hash=payload_hash('{"x": 1}'), chave_externa=None, origem="o",
                  destino="d", processo="proc", tenant=None, grupo_empresarial=None)
    found = repo.task_list_equivalent(status=("pendente", "sucesso"), **params)
    assert [r["id"] for r in found] == [a, b]
    assert found[0]["pub_sub"] is False and found[0]["dead"] is False
    assert [r["id"] for r in repo.task_list_equivalent(status=["sucesso"], **params)] == [b]
    assert repo.task_list_equivalent(status=[], **params) == []


# -- claim / finish -------------------------------------------------------------
def test_task_claim_candidates_orders_by_priority_then_age_and_skips_future(repo, mariadb_queue):
    old = utcnow() - dt.timedelta(minutes=5)
    low = _insert(repo, mariadb_queue, prioridade=10, data_hora=old)
    high_new = _insert(repo, mariadb_queue, prioridade=90)
    high_old = _insert(repo, mariadb_queue, prioridade=90, data_hora=old)
    _insert(repo, mariadb_queue, prioridade=99, data_hora=utcnow() + dt.timedelta(hours=1))
    scheduled = _insert(repo, mariadb_queue, prioridade=50)
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET status = 'agendada' WHERE id = %s",
                      (scheduled,))
    running = _insert(repo, mariadb_queue, prioridade=100)
    repo.task_mark_processing(running)
    assert repo.task_claim_candidates(10) == [high_old, high_new, scheduled, low]
    assert repo.task_claim_candidates(2) == [high_old, high_new]


def test_task_mark_processing_returns_the_tarefa_once(repo, mariadb_queue):
    root = _insert(repo, mariadb_queue, "payload da raiz")
    tarefa = repo.task_mark_processing(root)
    assert tarefa["status"] == "processando" and tarefa["payload"] == "payload da raiz"
    assert isinstance(tarefa["data_hora"], dt.datetime) and tarefa["data_hora"].tzinfo is None
    assert tarefa["pub_sub"] is False and tarefa["dead"] is False
    assert repo.task_mark_processing(root) is None
    assert repo.task_mark_processing(999999) is None


def test_task_get_resolves_payload_of_later_attempts(repo, mariadb_queue):
    tarefa = _processing(repo, mariadb_queue, "da raiz")
    repo.task_fail(tarefa["id"], "falha", "erro", True, 0)
    nxt = repo.task_insert_next_attempt(tarefa["id"])
    assert mariadb_queue.row(nxt)["payload"] is None
    got = repo.task_get(nxt)
    assert got["payload"] == "da raiz" and got["id_inicial"] == tarefa["id"]
    assert tuple(got) == TAREFA_COLUMNS
    assert repo.task_get(123456789) is None


def test_task_lock_row_only_for_processing_rows(repo, mariadb_queue):
    pending = _insert(repo, mariadb_queue)
    tarefa = _processing(repo, mariadb_queue)
    with repo.session.transaction():
        assert repo.task_lock_row(tarefa["id"]) is True
        assert repo.task_lock_row(pending) is False


def test_task_finish_only_once_and_only_processing(repo, mariadb_queue):
    pending = _insert(repo, mariadb_queue)
    tarefa = _processing(repo, mariadb_queue)
    assert repo.task_finish(pending, "x") is False
    assert repo.task_finish(tarefa["id"], "m" * 600) is True
    assert repo.task_finish(tarefa["id"], "again") is False
    row = mariadb_queue.row(tarefa["id"])
    assert row["status"] == "sucesso" and len(row["mensagem"]) == 500


def test_task_fail_requeue_sets_fractional_next_attempt(repo, mariadb_queue):
    tarefa = _processing(repo, mariadb_queue)
    before = utcnow()
    assert repo.task_fail(tarefa["id"], "falha", "erro", True, 1.5) is True
    row = mariadb_queue.row(tarefa["id"])
    assert (row["status"], row["reenfileirado"], row["estouro_tentativas"]) == ("falha", 1, 0)
    delta = (row["proxima_tentativa"] - before).total_seconds()
    assert 1.45 <= delta <= 2.5
    assert repo.task_fail(tarefa["id"], "falha", "erro", True, 1.5) is False  # not processando


def test_task_fail_without_requeue(repo, mariadb_queue):
    tarefa = _processing(repo, mariadb_queue)
    assert repo.task_fail(tarefa["id"], "falha", "fim", False, 0) is True
    row = mariadb_queue.row(tarefa["id"])
    assert (row["reenfileirado"], row["estouro_tentativas"], row["proxima_tentativa"]) == \
        (0, 1, None)


def test_task_insert_next_attempt_copies_the_chain(repo, mariadb_queue):
    tarefa = _processing(repo, mariadb_queue, "p", chave_externa="k", tenant=3, prioridade=80)
    repo.task_fail(tarefa["id"], "falha", "erro 1", True, 0.25)
    second = repo.task_insert_next_attempt(tarefa["id"])
    row, first = mariadb_queue.row(second), mariadb_queue.row(tarefa["id"])
    assert row["status"] == "agendada" and row["tentativa"] == 2
    assert row["id_inicial"] == row["id_anterior"] == tarefa["id"]
    assert row["data_hora"] == first["proxima_tentativa"]
    assert row["data_hora_inicial"] == first["data_hora_inicial"]
    assert (row["status_anterior"], row["mensagem_anterior"]) == ("falha", "erro 1")
    assert (row["chave_externa"], row["tenant"], row["prioridade"]) == ("k", 3, 80)
    # third attempt keeps the root as id_inicial
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET status = 'processando' WHERE id = %s",
                      (second,))
    repo.task_fail(second, "falha", "erro 2", True, 0)
    third = repo.task_insert_next_attempt(second)
    assert mariadb_queue.row(third)["id_inicial"] == tarefa["id"]
    assert mariadb_queue.row(third)["tentativa"] == 3


def test_task_insert_dead_copies_payload_from_the_root(repo, mariadb_queue):
    tarefa = _processing(repo, mariadb_queue, "carga", prioridade=20)
    repo.task_fail(tarefa["id"], "falha", "e", True, 0)
    second = repo.task_insert_next_attempt(tarefa["id"])
    dead = repo.task_insert_dead(second)
    row = mariadb_queue.row(dead)
    assert (row["status"], row["tentativa"], row["dead"], row["live_id"]) == \
        ("pendente", 1, 1, tarefa["id"])
    assert (row["payload"], row["prioridade"], row["id_inicial"]) == ("carga", 20, None)
    assert repo.task_get(dead)["dead"] is True


# -- wake-ups and maintenance ---------------------------------------------------------
def test_task_seconds_to_next_due(repo, mariadb_queue):
    assert repo.task_seconds_to_next_due() is None
    _insert(repo, mariadb_queue, data_hora=utcnow() + dt.timedelta(seconds=30))
    value = repo.task_seconds_to_next_due()
    assert isinstance(value, float) and 28 < value <= 30
    _insert(repo, mariadb_queue, data_hora=utcnow() - dt.timedelta(seconds=2, microseconds=500000))
    assert -3.5 < repo.task_seconds_to_next_due() <= -2.5
    raw = repo.session.fetch_value(repo.q["task_seconds_to_next_due"])
    assert isinstance(raw, (Decimal, float, int))


def test_task_has_due(repo, mariadb_queue):
    assert repo.task_has_due() is False
    future = _insert(repo, mariadb_queue, data_hora=utcnow() + dt.timedelta(hours=1))
    assert repo.task_has_due() is False
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET data_hora = UTC_TIMESTAMP(6) WHERE id = "
                      f"%s",
                (future,))
    assert repo.task_has_due() is True


def test_task_list_running_pages_by_id(repo, mariadb_queue):
    ids = [_processing(repo, mariadb_queue)["id"] for _ in range(5)]
    _insert(repo, mariadb_queue)
    assert repo.task_list_running(0, 3) == ids[:3]
    assert repo.task_list_running(ids[2], 3) == ids[3:]
    assert repo.task_list_running(ids[-1], 3) == []


def test_task_promote_scheduled_with_limit(repo, mariadb_queue):
    due = [_insert(repo, mariadb_queue, data_hora=utcnow() - dt.timedelta(seconds=10 - i))
           for i in range(3)]
    future = _insert(repo, mariadb_queue, data_hora=utcnow() + dt.timedelta(hours=1))
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET status = 'agendada'")
    assert repo.task_promote_scheduled(2) == 2
    assert [mariadb_queue.row(i)["status"] for i in due] == ["pendente", "pendente", "agendada"]
    assert repo.task_promote_scheduled(10) == 1
    assert mariadb_queue.row(future)["status"] == "agendada"
    assert repo.task_promote_scheduled(10) == 0


def test_task_has_lost_pending(repo, mariadb_queue):
    _insert(repo, mariadb_queue, data_hora=utcnow() - dt.timedelta(seconds=10))
    assert repo.task_has_lost_pending(5.5) is True
    assert repo.task_has_lost_pending(60) is False


def test_task_purge_limit_and_active_chains(repo, mariadb_queue):
    old = utcnow() - dt.timedelta(days=100)
    done = [_insert(repo, mariadb_queue, data_hora=old + dt.timedelta(minutes=i)) for i in range(3)]
    # chain whose root is old but with a pending retry: kept whole
    root = _insert(repo, mariadb_queue, "carga", data_hora=old)
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET status = 'processando' WHERE id = %s",
                      (root,))
    repo.task_fail(root, "falha", "e", True, 0)
    retry = repo.task_insert_next_attempt(root)
    # chain whose root is old but whose last attempt is recent: kept whole
    root2 = _insert(repo, mariadb_queue, data_hora=old)
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET status = 'processando' WHERE id = %s",
                      (root2,))
    repo.task_fail(root2, "falha", "e", True, 0)
    recent = repo.task_insert_next_attempt(root2)
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET status = 'sucesso', data_hora = "
                      f"UTC_TIMESTAMP(6) "
                "WHERE id = %s", (recent,))
    mariadb_queue.sql(f"UPDATE {mariadb_queue.table} SET status = 'sucesso' WHERE id IN %s",
                      (tuple(done),))
    pending_old = _insert(repo, mariadb_queue, data_hora=old)  # never ran: kept
    assert repo.task_purge(60, 2) == 2
    assert repo.task_purge(60, 2) == 1
    assert repo.task_purge(60, 2) == 0
    left = {r["id"] for r in mariadb_queue.rows()}
    assert left == {root, retry, root2, recent, pending_old}


def test_postgres_claim_queries_do_not_exist_on_mysql(repo):
    for name in ("task_claim_locked", "task_finish_unlock", "notify"):
        with pytest.raises(KeyError):
            repo.q[name]


# -- pub/sub ----------------------------------------------------------------------
def _subscriber(q, sub_id, processo="evento", tenant=None, grupo=None, ativo=True,
                headers=None):
    q.sql(f"INSERT INTO {q.sub_table} (id, tenant, grupo_empresarial, processo, url, "
          "http_method, headers, ativo) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
          (sub_id, tenant, grupo, processo, "http://x", "POST",
           json.dumps(headers) if headers is not None else None, ativo))


def test_subscriber_fanout_and_get(repo, mariadb_queue):
    _subscriber(mariadb_queue, "todos")
    _subscriber(mariadb_queue, "tenant_7", tenant=7)
    _subscriber(mariadb_queue, "tenant_8", tenant=8)
    _subscriber(mariadb_queue, "inativo", ativo=False)
    _subscriber(mariadb_queue, "outro_processo", processo="outro")
    pub = _client(repo, mariadb_queue).insert_task_pub_sub("o", "d", "evento", "k", {"v": 1},
                                                      tenant=7, prioridade=60)
    assert repo.subscriber_fanout(pub) == 2
    rows = mariadb_queue.rows("publication_id = %s", (pub,))
    assert [r["subscriber_id"] for r in rows] == ["tenant_7", "todos"]
    for r in rows:
        assert (r["payload"], r["tenant"], r["prioridade"], r["status"], r["pub_sub"]) == \
            ('{"v": 1}', 7, 60, "pendente", 0)
    _subscriber(mariadb_queue, "com_headers", headers={"X-A": "1"})
    sub = repo.subscriber_get("com_headers")
    assert sub["ativo"] is True and json.loads(sub["headers"]) == {"X-A": "1"}
    assert isinstance(sub["created_at"], dt.datetime)
    assert repo.subscriber_get("inativo")["ativo"] is False
    assert repo.subscriber_get("nenhum") is None
