"""Fan-out of publications: subscriber matching, priority, publication_id, no subscriber."""

from __future__ import annotations

import json

from tests.fixtures.waiting import eventually
from tests.pubsub.conftest import add_subscriber, publish, run_in_process, settings_for
from tests.workers.pubsub_scripted import PubSubScripted


def fanned(queue, pub_id):
    return queue.rows("publication_id = %s AND tentativa = 1 AND NOT dead", (pub_id,))


def test_tenant_and_grupo_empresarial_filtering(queue):
    add_subscriber(queue, "todos")
    add_subscriber(queue, "t1", tenant=1)
    add_subscriber(queue, "t2", tenant=2)
    add_subscriber(queue, "t1_g1", tenant=1, grupo="G1")
    add_subscriber(queue, "t1_g2", tenant=1, grupo="G2")
    add_subscriber(queue, "g1", grupo="G1")
    add_subscriber(queue, "inativo", ativo=False)
    add_subscriber(queue, "t1_inativo", tenant=1, ativo=False)
    add_subscriber(queue, "outro_processo", processo="outro")
    worker = PubSubScripted(settings_for(queue))

    cases = [
        ({"tenant": 1, "grupo_empresarial": "G1"}, ["g1", "t1", "t1_g1", "todos"]),
        ({"tenant": 1}, ["t1", "todos"]),
        ({"tenant": 2, "grupo_empresarial": "G1"}, ["g1", "t2", "todos"]),
        ({"grupo_empresarial": "G2"}, ["todos"]),
        ({}, ["todos"]),
    ]
    for kwargs, expected in cases:
        pub_id = publish(queue, {"caso": kwargs}, **kwargs)
        message = run_in_process(queue, worker, pub_id)
        rows = fanned(queue, pub_id)
        assert sorted(r["subscriber_id"] for r in rows) == expected, kwargs
        assert message == f"Publicado para {len(expected)} assinante(s), com sucesso!"
        for r in rows:
            assert r["tenant"] == kwargs.get("tenant")
            assert r["grupo_empresarial"] == kwargs.get("grupo_empresarial")
            assert r["status"] == "pendente" and not r["pub_sub"] and r["tentativa"] == 1
            assert json.loads(r["payload"]) == {"caso": kwargs}
            assert r["processo"] == "proc"


def test_fanout_is_one_statement_in_the_task_transaction(queue):
    add_subscriber(queue, "a")
    add_subscriber(queue, "b")
    pub_id = publish(queue, {"x": 1})
    worker = PubSubScripted(settings_for(queue))
    from nsj_queue_lib.db.repository import TaskRepository
    from nsj_queue_lib.db.session import DbSession, TaskConnection

    session = DbSession(queue.server.connect())
    try:
        tarefa = TaskRepository(session, queue.table, queue.sub_table).task_get(pub_id)
        session.begin()
        worker.dispatch(tarefa, TaskConnection(session))
        assert queue.count(f"publication_id = {pub_id}") == 0  # not visible before commit
        session.rollback()
    finally:
        session.close()
    assert queue.count(f"publication_id = {pub_id}") == 0


def test_three_subscribers_one_failing_ends_in_its_dead_handler(queue):
    for sid in ("a", "b", "c"):
        add_subscriber(queue, sid)
    add_subscriber(queue, "d", ativo=False)
    pub_id = publish(queue, {"fail": ["b"]}, prioridade=70)
    queue.start_worker("tests.workers.pubsub_scripted")
    queue.wait_status(pub_id, "sucesso")
    queue.wait_idle()
    pub = queue.row(pub_id)
    assert pub["mensagem"] == "Publicado para 3 assinante(s), com sucesso!"

    effects = [(e["chave"], e["tipo"]) for e in queue.effects()]
    assert effects.count(("a", "execute")) == 1
    assert effects.count(("c", "execute")) == 1
    # b's failing attempts rolled back their writes with the task transaction
    assert effects.count(("b", "execute")) == 0
    assert effects.count(("b", "dead")) == 1
    assert not [e for e in effects if e[0] == "d"]
    assert len(effects) == 3

    rows = queue.rows("publication_id = %s", (pub_id,))
    by_sub = {}
    for r in rows:
        by_sub.setdefault(r["subscriber_id"], []).append(r)
    assert set(by_sub) == {"a", "b", "c"}
    assert [r["status"] for r in by_sub["a"]] == ["sucesso"]
    assert [r["status"] for r in by_sub["c"]] == ["sucesso"]
    chain = by_sub["b"]
    live = [r for r in chain if not r["dead"]]
    dead = [r for r in chain if r["dead"]]
    assert [r["tentativa"] for r in live] == [1, 2, 3]
    assert all(r["status"] == "falha" for r in live)
    assert "falha programada do assinante b" in live[0]["mensagem"]
    assert len(dead) == 1 and dead[0]["status"] == "sucesso"
    assert dead[0]["live_id"] == live[0]["id"]
    assert dead[0]["mensagem"].startswith("morta b tratada")
    assert all(r["prioridade"] == 70 for r in rows)


def test_no_subscriber_marks_the_publication_done(queue):
    add_subscriber(queue, "inativo", ativo=False)
    add_subscriber(queue, "outro", processo="outro")
    add_subscriber(queue, "t9", tenant=9)
    pub_id = publish(queue, {"x": 1})
    queue.start_worker("tests.workers.pubsub_scripted")
    row = queue.wait_status(pub_id, "sucesso")
    assert "Não haviam assinantes" in row["mensagem"]
    assert queue.count() == 1
    assert queue.effects() == []


def test_priority_preserved_through_fanout(queue):
    add_subscriber(queue, "a")
    add_subscriber(queue, "c")
    low = publish(queue, {"p": "baixa"}, prioridade=10)
    high = publish(queue, {"p": "alta"}, prioridade=90)
    queue.start_worker("tests.workers.pubsub_scripted")
    queue.wait_status(low, "sucesso")
    queue.wait_idle()
    assert {r["prioridade"] for r in queue.rows("publication_id = %s", (high,))} == {90}
    assert {r["prioridade"] for r in queue.rows("publication_id = %s", (low,))} == {10}
    # one worker: the high publication and its subscriber tasks run before the low one
    order = [queue.row(e["tarefa_id"])["publication_id"] for e in queue.effects()]
    assert order == [high, high, low, low]


def test_subscriber_without_handler_fails_naming_it(queue):
    add_subscriber(queue, "sem-handler-42")
    pub_id = publish(queue, {"x": 1})
    queue.start_worker("tests.workers.pubsub_scripted", QUEUE_MAX_RETRY="1")
    row = eventually(lambda: next(iter(queue.rows(
        "publication_id = %s AND status = 'falha'", (pub_id,))), None))
    assert "SubscriberNotRegistered" in row["mensagem"]
    assert "'sem-handler-42'" in row["mensagem"]
    # its dead letter has no @DeadSubscriber: WorkerBase.execute_dead logs and succeeds
    dead = eventually(lambda: next(iter(queue.rows(
        "publication_id = %s AND dead AND status = 'sucesso'", (pub_id,))), None))
    assert "excedeu o número de tentativas" in dead["mensagem"]


def test_handler_payload_shape(queue):
    add_subscriber(queue, "inspecao", tenant=5, grupo="G", url="http://x.example/h",
                   method="post", headers={"X-A": "1"})
    publication = {"data": "2024-05-06", "quando": "2024-05-06T10:11:12",
                   "id": "0f8fad5b-d9cb-469f-a165-70867728950e", "n": 1.5, "lista": [1]}
    pub_id = publish(queue, publication, tenant=5, grupo_empresarial="G")
    queue.start_worker("tests.workers.pubsub_scripted")
    queue.wait_status(pub_id, "sucesso")
    queue.wait_idle()
    [effect] = queue.effects()
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


def test_non_json_publication_reaches_handler_as_text(queue):
    add_subscriber(queue, "inspecao")
    pub_id = publish(queue, "texto 2024-01-01 0f8fad5b-d9cb-469f-a165-70867728950e")
    queue.start_worker("tests.workers.pubsub_scripted")
    queue.wait_status(pub_id, "sucesso")
    queue.wait_idle()
    [effect] = queue.effects()
    seen = json.loads(effect["chave"])
    assert seen["publication_type"] == "str"
    assert seen["publication"] == "texto 2024-01-01 0f8fad5b-d9cb-469f-a165-70867728950e"


def test_retried_publication_keeps_the_original_publication_id(queue):
    add_subscriber(queue, "a")
    hidden = f"{queue.fila}_sub_escondida"
    queue.sql(f"ALTER TABLE {queue.sub_table} RENAME TO {hidden}")
    pub_id = publish(queue, {"x": 1})
    queue.start_worker("tests.workers.pubsub_scripted")
    first = queue.wait_status(pub_id, "falha")
    assert "reenfileirada" in first["mensagem"]
    queue.sql(f'ALTER TABLE "{queue.schema}".{hidden} RENAME TO {queue.sub_table.split(".")[1]}')
    retry = eventually(lambda: next(iter(queue.rows(
        "id_inicial = %s AND status = 'sucesso'", (pub_id,))), None))
    assert retry["pub_sub"] and retry["tentativa"] == 2
    queue.wait_idle()
    [task] = queue.rows("subscriber_id IS NOT NULL")
    assert task["publication_id"] == pub_id and task["status"] == "sucesso"
    assert json.loads(task["payload"]) == {"x": 1}  # the retry row has no payload of its own
