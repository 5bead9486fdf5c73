"""Client/server mode: pub/sub fan-out and webhook delivery with real workers, on MariaDB
and PostgreSQL (make tests_pubsub_server / tests_webhook_server select these by name)."""

from __future__ import annotations

import json

import pytest

from tests.client_server.cs_helpers import effects_by_key
from tests.helpers import eventually
from tests.pubsub.httpserver import RecordingServer

WEBHOOK = "nsj_queue_lib.worker_webhook"
PUBSUB = "tests.workers.pubsub_scripted"
SECRET = "token-do-assinante-3f9a"


@pytest.fixture
def http_server():
    server = RecordingServer().start()
    yield server
    server.close()


def _subscriber_rows(csq, pub_id, where="TRUE"):
    return csq.rows(f"publication_id = %s AND ({where})", (pub_id,))


def test_pubsub_fanout_retries_and_dead_letters(csq):
    csq.add_subscriber("a")
    csq.add_subscriber("b")
    csq.add_subscriber("c", ativo=False)
    csq.add_subscriber("d", processo="outro")
    csq.start_server()
    csq.start_ready_worker(PUBSUB, QUEUE_MAX_RETRY="2")
    pub_id = csq.publish({"fail": ["b"], "n": 1})

    publication = csq.wait_status(pub_id, "sucesso", timeout=10)
    assert publication["mensagem"] == "Publicado para 2 assinante(s), com sucesso!"
    eventually(lambda: _subscriber_rows(csq, pub_id, "dead AND status = 'sucesso'"), 20,
               message="morta de b tratada")
    csq.wait_idle()

    rows = _subscriber_rows(csq, pub_id)
    live = {(r["subscriber_id"], r["tentativa"]): r["status"] for r in rows if not r["dead"]}
    assert live == {("a", 1): "sucesso", ("b", 1): "falha", ("b", 2): "falha"}
    [dead] = [r for r in rows if r["dead"]]
    assert dead["subscriber_id"] == "b" and dead["status"] == "sucesso"
    assert dead["mensagem"].startswith("morta b tratada")
    for r in rows:
        assert json.loads(r["payload"] or csq.row(pub_id)["payload"]) == {"fail": ["b"], "n": 1}
    # b's failed runs rolled back; a ran once; b's dead letter handler ran once.
    assert effects_by_key(csq) == {"a": 1}
    assert effects_by_key(csq, "dead") == {"b": 1}


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
