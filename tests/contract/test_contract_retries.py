"""Contract, retries and dead letters, with worker processes on every backend
(`each_backend_queue`): the attempt chain and its back-off (attempt count, next run time,
the error stored), the dead letter after the last attempt, a failing dead chain that
ends."""

from __future__ import annotations

import json

from tests.fixtures.waiting import eventually


def test_retry_chain_columns(each_backend_queue):
    # 0.02 min = 1.2 s per tentativa: attempt 2 after 1.2 s, attempt 3 after 2.4 s.
    each_backend_queue.start_ready_worker(QUEUE_BASE_INTERVAL_RETRY="0.02", QUEUE_MAX_RETRY="5")
    payload = json.dumps({"efeito": "r", "fail_until": 3, "report": True})
    first = each_backend_queue.insert(payload, prioridade=70)
    eventually(lambda: any(r["status"] == "sucesso" for r in each_backend_queue.chain(first)),
               timeout=30,
               message="chain succeeds")
    r1, r2, r3 = each_backend_queue.chain(first)

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
    gap1 = (r1["proxima_tentativa"] - r1["data_hora"]).total_seconds()
    gap2 = (r2["proxima_tentativa"] - r2["data_hora"]).total_seconds()
    assert 1.2 <= gap1 < 2.0, gap1
    assert 2.4 <= gap2 < 3.2, gap2
    assert r3["proxima_tentativa"] is None
    assert r3["mensagem"] == f"ok {r3['id']}"

    # Only the successful attempt's writes were committed, and it received the payload
    # of the first attempt although its own row stores none.
    effects = each_backend_queue.effects()
    assert [(e["tarefa_id"], e["tipo"]) for e in effects] == [(r3["id"], "execute"),
                                                              (r3["id"], "report")]
    report = json.loads(effects[1]["chave"])
    assert report["payload"] == payload
    assert report["tentativa"] == 3
    assert report["id_inicial"] == first


def test_dead_letter_after_max_retry(each_backend_queue):
    payload = json.dumps({"efeito": "d", "fail": True})
    first = each_backend_queue.insert(payload, prioridade=80, chave_externa="k-dead", tenant=3)
    each_backend_queue.start_worker(QUEUE_MAX_RETRY="2")
    dead = eventually(lambda: next((r for r in each_backend_queue.rows("dead")
                                    if r["status"] == "sucesso"), None),
                      message="dead letter handled")
    each_backend_queue.wait_idle()

    live = each_backend_queue.chain(first)
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
    assert each_backend_queue.count() == 3
    assert [(e["tarefa_id"], e["tipo"], e["chave"]) for e in each_backend_queue.effects()] == [
        (dead["id"], "dead", "d")]


def test_failing_dead_chain_ends_without_second_dead_chain(each_backend_queue):
    first = each_backend_queue.insert({"fail": True, "fail_dead": True})
    each_backend_queue.start_worker(QUEUE_MAX_RETRY="2")
    eventually(lambda: each_backend_queue.count("dead AND tentativa = 2 AND status = 'falha'") == 1,
               message="dead chain exhausted")
    each_backend_queue.wait_idle()
    # The last dead attempt is marked 'falha' in the same transaction that would insert
    # another dead row, so the count is final here.
    rows = each_backend_queue.rows()
    assert [(r["dead"], r["tentativa"], r["status"]) for r in rows] == [
        (False, 1, "falha"), (False, 2, "falha"), (True, 1, "falha"), (True, 2, "falha")]
    assert rows[2]["live_id"] == first
    assert rows[3]["id_inicial"] == rows[2]["id"]
    assert rows[3]["estouro_tentativas"] is True
    assert "fila de mortos" in rows[3]["mensagem"]
    assert each_backend_queue.count("dead") == 2
    assert each_backend_queue.effects() == []  # every execute_dead rolled back
