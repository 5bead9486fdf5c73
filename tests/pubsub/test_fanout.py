"""Fan-out of publications: subscriber matching, priority, publication_id, no subscriber."""

from __future__ import annotations

import json

from tests.fixtures.waiting import eventually
from tests.pubsub.conftest import run_in_process
from tests.workers.pubsub_scripted import PubSubScripted


def fanned(queue, pub_id):
    return queue.rows("publication_id = %s AND tentativa = 1 AND NOT dead", (pub_id,))


def test_tenant_and_grupo_empresarial_filtering(pg_queue):
    pg_queue.add_subscriber("todos")
    pg_queue.add_subscriber("t1", tenant=1)
    pg_queue.add_subscriber("t2", tenant=2)
    pg_queue.add_subscriber("t1_g1", tenant=1, grupo="G1")
    pg_queue.add_subscriber("t1_g2", tenant=1, grupo="G2")
    pg_queue.add_subscriber("g1", grupo="G1")
    pg_queue.add_subscriber("inativo", ativo=False)
    pg_queue.add_subscriber("t1_inativo", tenant=1, ativo=False)
    pg_queue.add_subscriber("outro_processo", processo="outro")
    worker = PubSubScripted(pg_queue.settings())

    cases = [
        ({"tenant": 1, "grupo_empresarial": "G1"}, ["g1", "t1", "t1_g1", "todos"]),
        ({"tenant": 1}, ["t1", "todos"]),
        ({"tenant": 2, "grupo_empresarial": "G1"}, ["g1", "t2", "todos"]),
        ({"grupo_empresarial": "G2"}, ["todos"]),
        ({}, ["todos"]),
    ]
    for kwargs, expected in cases:
        pub_id = pg_queue.publish({"caso": kwargs}, **kwargs)
        message = run_in_process(pg_queue, worker, pub_id)
        rows = fanned(pg_queue, pub_id)
        assert sorted(r["subscriber_id"] for r in rows) == expected, kwargs
        assert message == f"Publicado para {len(expected)} assinante(s), com sucesso!"
        for r in rows:
            assert r["tenant"] == kwargs.get("tenant")
            assert r["grupo_empresarial"] == kwargs.get("grupo_empresarial")
            assert r["status"] == "pendente" and not r["pub_sub"] and r["tentativa"] == 1
            assert json.loads(r["payload"]) == {"caso": kwargs}
            assert r["processo"] == "proc"


def test_fanout_is_one_statement_in_the_task_transaction(pg_queue):
    pg_queue.add_subscriber("a")
    pg_queue.add_subscriber("b")
    pub_id = pg_queue.publish({"x": 1})
    worker = PubSubScripted(pg_queue.settings())
    from nsj_queue_lib.db.repository import TaskRepository
    from nsj_queue_lib.db.session import DbSession, TaskConnection

    session = DbSession(pg_queue.server.connect())
    try:
        tarefa = TaskRepository(session, pg_queue.table, pg_queue.sub_table).task_get(pub_id)
        session.begin()
        worker.dispatch(tarefa, TaskConnection(session))
        assert pg_queue.count(f"publication_id = {pub_id}") == 0  # not visible before commit
        session.rollback()
    finally:
        session.close()
    assert pg_queue.count(f"publication_id = {pub_id}") == 0


def test_no_subscriber_marks_the_publication_done(pg_queue):
    pg_queue.add_subscriber("inativo", ativo=False)
    pg_queue.add_subscriber("outro", processo="outro")
    pg_queue.add_subscriber("t9", tenant=9)
    pub_id = pg_queue.publish({"x": 1})
    pg_queue.start_worker("tests.workers.pubsub_scripted")
    row = pg_queue.wait_status(pub_id, "sucesso")
    assert "Não haviam assinantes" in row["mensagem"]
    assert pg_queue.count() == 1
    assert pg_queue.effects() == []


def test_priority_preserved_through_fanout(pg_queue):
    pg_queue.add_subscriber("a")
    pg_queue.add_subscriber("c")
    low = pg_queue.publish({"p": "baixa"}, prioridade=10)
    high = pg_queue.publish({"p": "alta"}, prioridade=90)
    pg_queue.start_worker("tests.workers.pubsub_scripted")
    pg_queue.wait_status(low, "sucesso")
    pg_queue.wait_idle()
    assert {r["prioridade"] for r in pg_queue.rows("publication_id = %s", (high,))} == {90}
    assert {r["prioridade"] for r in pg_queue.rows("publication_id = %s", (low,))} == {10}
    # one worker: the high publication and its subscriber tasks run before the low one
    order = [pg_queue.row(e["tarefa_id"])["publication_id"] for e in pg_queue.effects()]
    assert order == [high, high, low, low]


def test_subscriber_without_handler_fails_naming_it(pg_queue):
    pg_queue.add_subscriber("sem-handler-42")
    pub_id = pg_queue.publish({"x": 1})
    pg_queue.start_worker("tests.workers.pubsub_scripted", QUEUE_MAX_RETRY="1")
    row = eventually(lambda: next(iter(pg_queue.rows(
        "publication_id = %s AND status = 'falha'", (pub_id,))), None))
    assert "SubscriberNotRegistered" in row["mensagem"]
    assert "'sem-handler-42'" in row["mensagem"]
    # its dead letter has no @DeadSubscriber: WorkerBase.execute_dead logs and succeeds
    dead = eventually(lambda: next(iter(pg_queue.rows(
        "publication_id = %s AND dead AND status = 'sucesso'", (pub_id,))), None))
    assert "excedeu o número de tentativas" in dead["mensagem"]


def test_handler_payload_shape(pg_queue):
    pg_queue.add_subscriber("inspecao", tenant=5, grupo="G", url="http://x.example/h",
                   method="post", headers={"X-A": "1"})
    publication = {"data": "2024-05-06", "quando": "2024-05-06T10:11:12",
                   "id": "0f8fad5b-d9cb-469f-a165-70867728950e", "n": 1.5, "lista": [1]}
    pub_id = pg_queue.publish(publication, tenant=5, grupo_empresarial="G")
    pg_queue.start_worker("tests.workers.pubsub_scripted")
    pg_queue.wait_status(pub_id, "sucesso")
    pg_queue.wait_idle()
    [effect] = pg_queue.effects()
    seen = json.loads(effect["chave"])
    assert seen["keys"] == ["publication", "subscription"]
    assert seen["same_subscription"] is True
    assert seen["publication_type"] == "dict"
    assert seen["publication"] == publication
    assert seen["value_types"] == {"data": "str", "quando": "str", "id": "str",
                                   "n": "float", "lista": "list"}
    assert seen["subscription_keys"] == ["id", "tenant", "grupo_empresarial", "processo", "url",
                                         "http_method", "headers", "ativo", "created_at"]
    assert seen["subscription"] == {"id": "inspecao", "tenant": 5, "grupo_empresarial": "G",
                                    "processo": "proc", "url": "http://x.example/h",
                                    "http_method": "post", "headers": {"X-A": "1"},
                                    "ativo": True}
    assert seen["created_at_type"] == "datetime" and seen["created_at_aware"] is True
    assert seen["headers_type"] == "dict"


def test_non_json_publication_reaches_handler_as_text(pg_queue):
    pg_queue.add_subscriber("inspecao")
    pub_id = pg_queue.publish("texto 2024-01-01 0f8fad5b-d9cb-469f-a165-70867728950e")
    pg_queue.start_worker("tests.workers.pubsub_scripted")
    pg_queue.wait_status(pub_id, "sucesso")
    pg_queue.wait_idle()
    [effect] = pg_queue.effects()
    seen = json.loads(effect["chave"])
    assert seen["publication_type"] == "str"
    assert seen["publication"] == "texto 2024-01-01 0f8fad5b-d9cb-469f-a165-70867728950e"


def test_retried_publication_keeps_the_original_publication_id(pg_queue):
    pg_queue.add_subscriber("a")
    # (the worker checks the subscriber table at start: hidden once it runs)
    pg_queue.start_ready_worker("tests.workers.pubsub_scripted")
    hidden = f"{pg_queue.fila}_sub_escondida"
    pg_queue.sql(f"ALTER TABLE {pg_queue.sub_table} RENAME TO {hidden}")
    pub_id = pg_queue.publish({"x": 1})
    first = pg_queue.wait_status(pub_id, "falha")
    assert "reenfileirada" in first["mensagem"]
    pg_queue.sql(f'ALTER TABLE "{pg_queue.schema}".{hidden} RENAME TO '
                 f'{pg_queue.sub_table.split(".")[1]}')
    retry = eventually(lambda: next(iter(pg_queue.rows(
        "id_inicial = %s AND status = 'sucesso'", (pub_id,))), None))
    assert retry["pub_sub"] and retry["tentativa"] == 2
    pg_queue.wait_idle()
    [task] = pg_queue.rows("subscriber_id IS NOT NULL")
    assert task["publication_id"] == pub_id and task["status"] == "sucesso"
    assert json.loads(task["payload"]) == {"x": 1}  # the retry row has no payload of its own
