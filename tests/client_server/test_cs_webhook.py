"""Client/server mode: the webhook worker against a local HTTP server, on MariaDB and
PostgreSQL (make tests_webhook_server selects this file with -k webhook)."""

from __future__ import annotations

from tests.fixtures.waiting import eventually

WEBHOOK = "nsj_queue_lib.worker_webhook"
SECRET = "token-do-assinante-3f9a"


def _subscriber_rows(csq, pub_id, where="TRUE"):
    return csq.rows(f"publication_id = %s AND ({where})", (pub_id,))


def test_webhook_delivery_with_retry(csq, http_server):
    http_server.script("/instavel", [500, 200])
    csq.add_subscriber("hook", url=http_server.url + "/hook", method="POST",
                       headers={"X-Token": SECRET})
    csq.add_subscriber("instavel", url=http_server.url + "/instavel", method="post")
    csq.start_server()
    worker = csq.start_ready_worker(WEBHOOK)
    pub_id = csq.publish({"pedido": 7, "itens": [1, 2]})

    eventually(lambda: len(_subscriber_rows(csq, pub_id, "status = 'sucesso'")) == 2, 20,
               message="webhooks entregues")
    csq.wait_idle()
    assert csq.row(pub_id)["mensagem"] == "Publicado para 2 assinante(s), com sucesso!"
    rows = _subscriber_rows(csq, pub_id)
    assert [(r["subscriber_id"], r["tentativa"], r["status"]) for r in rows
            if r["subscriber_id"] == "instavel"] == [("instavel", 1, "falha"),
                                                   ("instavel", 2, "sucesso")]
    [hook_row] = [r for r in rows if r["subscriber_id"] == "hook"]
    assert hook_row["status"] == "sucesso" and "200" in hook_row["mensagem"]
    assert not any(r["dead"] for r in rows)

    text = csq.row(pub_id)["payload"]
    [hook] = http_server.received("/hook")
    assert hook.method == "POST" and hook.body == text.encode()
    assert hook.headers["x-token"] == SECRET
    assert hook.headers["content-type"] == "application/json"
    assert [r.method for r in http_server.received("/instavel")] == ["POST", "POST"]
    assert SECRET not in worker.log()
