"""Client/server mode: pub/sub fan-out with real workers, on MariaDB and PostgreSQL
(make tests_pubsub_server selects this file with -k pubsub)."""

from __future__ import annotations

import json

from tests.fixtures.queue import effects_by_key
from tests.fixtures.waiting import eventually

PUBSUB = "tests.workers.pubsub_scripted"


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
