"""Contract, pub/sub fan-out and webhook delivery, with worker processes on every backend
(`each_backend_queue`), a real local HTTP server for the webhooks."""

from __future__ import annotations

import json

from tests.fixtures.queue import Queue, effects_by_key
from tests.fixtures.waiting import eventually


def _subscriber_rows(q: Queue, pub_id: int, where: str = "TRUE") -> list:
    return q.rows(f"publication_id = %s AND ({where})", (pub_id,))


def test_fanout_one_failing_subscriber_ends_in_its_dead_handler(each_backend_queue):
    for sid in ("a", "b", "c"):
        each_backend_queue.add_subscriber(sid)
    each_backend_queue.add_subscriber("d", ativo=False)
    each_backend_queue.add_subscriber("e", processo="outro")
    each_backend_queue.start_ready_worker("tests.workers.pubsub_scripted")
    payload = {"fail": ["b"], "n": 1}
    pub_id = each_backend_queue.publish(payload, prioridade=70)

    publication = each_backend_queue.wait_status(pub_id, "sucesso", timeout=10)
    assert publication["mensagem"] == "Publicado para 3 assinante(s), com sucesso!"
    eventually(lambda: _subscriber_rows(each_backend_queue, pub_id, "dead AND status = 'sucesso'"),
               20,
               message="morta de b tratada")
    each_backend_queue.wait_idle()

    # b's failing attempts rolled back their writes with the task transaction.
    assert effects_by_key(each_backend_queue) == {"a": 1, "c": 1}
    assert effects_by_key(each_backend_queue, "dead") == {"b": 1}
    rows = _subscriber_rows(each_backend_queue, pub_id)
    live = {(r["subscriber_id"], r["tentativa"]): r["status"] for r in rows if not r["dead"]}
    assert live == {("a", 1): "sucesso", ("c", 1): "sucesso", ("b", 1): "falha",
                    ("b", 2): "falha", ("b", 3): "falha"}
    b_first = next(r for r in rows if (r["subscriber_id"], r["tentativa"]) == ("b", 1)
                   and not r["dead"])
    assert "falha programada do assinante b" in b_first["mensagem"]
    [dead] = [r for r in rows if r["dead"]]
    assert (dead["subscriber_id"], dead["status"], dead["live_id"]) == ("b", "sucesso",
                                                                        b_first["id"])
    assert dead["mensagem"].startswith("morta b tratada")
    assert all(r["prioridade"] == 70 for r in rows)
    for r in rows:
        assert json.loads(r["payload"] or publication["payload"]) == payload


WEBHOOK = "nsj_queue_lib.worker_webhook"


SECRET = "token-do-assinante-3f9a"


def test_webhook_delivery_with_retry(each_backend_queue, http_endpoint):
    http_endpoint.script("/instavel", [500, 200], body=None)
    each_backend_queue.add_subscriber("hook", url=http_endpoint.url + "/hook", method="POST",
                                      headers={"X-Token": SECRET})
    each_backend_queue.add_subscriber("instavel", url=http_endpoint.url + "/instavel",
                                      method="post")
    worker = each_backend_queue.start_ready_worker(WEBHOOK)
    pub_id = each_backend_queue.publish({"pedido": 7, "itens": [1, 2]})

    eventually(lambda: len(_subscriber_rows(each_backend_queue, pub_id, "status = 'sucesso'")) == 2,
               20,
               message="webhooks entregues")
    each_backend_queue.wait_idle()
    assert (each_backend_queue.row(pub_id)["mensagem"]
            == "Publicado para 2 assinante(s), com sucesso!")
    rows = _subscriber_rows(each_backend_queue, pub_id)
    unstable = [r for r in rows if r["subscriber_id"] == "instavel"]
    assert [(r["tentativa"], r["status"]) for r in unstable] == [(1, "falha"), (2, "sucesso")]
    assert "HTTP 500" in unstable[0]["mensagem"]
    assert "resposta 500 de /instavel" in unstable[0]["mensagem"]
    assert "reenfileirada" in unstable[0]["mensagem"]
    assert "Status Resposta: 200" in unstable[1]["mensagem"]
    [hook_row] = [r for r in rows if r["subscriber_id"] == "hook"]
    assert hook_row["status"] == "sucesso" and "200" in hook_row["mensagem"]
    assert not any(r["dead"] for r in rows)

    text = each_backend_queue.row(pub_id)["payload"]
    [hook] = http_endpoint.received("/hook")
    assert hook.method == "POST" and hook.body == text.encode()
    assert hook.headers["x-token"] == SECRET
    assert hook.headers["content-type"] == "application/json"
    assert [r.method for r in http_endpoint.received("/instavel")] == ["POST", "POST"]
    assert SECRET not in worker.log()
