"""A pub/sub worker driven by the publication, for tests (python -m tests.workers.pubsub_scripted).

Subscribers with code: a, b, c, d, inspecao (one handler for all).  Each call
inserts a row in <schema>.efeitos (chave = subscriber id, tipo = execute/dead)
through bd_conn, in the task's transaction.  Publication keys (JSON object):

  fail: [ids]        those subscribers raise (every attempt)
  fail_until: int    every subscriber raises while tentativa < fail_until
  fail_dead: [ids]   those subscribers' dead handlers raise too
  sleep: float       every handler sleeps this long (after its effect)

For subscriber `inspecao` the efeito's chave is a JSON description of what the
handler received (types of the payload parts and of the subscription fields).
Subscriber `hook` is a webhook (@SubscriberWebhook).  Subscribers a and b have
dead handlers; c and d use WorkerBase.execute_dead.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any, Dict

from nsj_queue_lib.worker_pub_sub_base import (
    DeadSubscriber,
    Subscriber,
    SubscriberWebhook,
    WorkerPubSubBase,
)
from tests.workers.effects import record_effect


def _describe(payload: Dict[str, Any], subscription: Dict[str, Any]) -> str:
    publication = payload["publication"]
    created = subscription["created_at"]
    return json.dumps({
        "keys": sorted(payload),
        "same_subscription": payload["subscription"] is subscription,
        "publication_type": type(publication).__name__,
        "publication": publication,
        "value_types": ({k: type(v).__name__ for k, v in publication.items()}
                        if isinstance(publication, dict) else None),
        "subscription_keys": list(subscription),
        "subscription": {k: v for k, v in subscription.items() if k != "created_at"},
        "created_at_type": type(created).__name__,
        "created_at_aware": isinstance(created, dt.datetime) and created.tzinfo is not None,
        "headers_type": type(subscription["headers"]).__name__,
    }, default=str)


def _publication(payload: Dict[str, Any]) -> Dict[str, Any]:
    pub = payload["publication"]
    return pub if isinstance(pub, dict) else {}


@SubscriberWebhook("hook")
class PubSubScripted(WorkerPubSubBase):
    """Records each handler call as an efeito; failures scripted by the publication."""

    @Subscriber("a")
    @Subscriber("b")
    @Subscriber("c")
    @Subscriber("d")
    @Subscriber("inspecao")
    def handle(self, payload: Dict[str, Any], subscription: Dict[str, Any],
               tarefa: Dict[str, Any], bd_conn: Any) -> str:
        sid = subscription["id"]
        pub = _publication(payload)
        chave = _describe(payload, subscription) if sid == "inspecao" else sid
        record_effect(bd_conn, tarefa, chave, "execute")
        if pub.get("sleep"):
            time.sleep(float(pub["sleep"]))
        if sid in pub.get("fail", ()) or tarefa["tentativa"] < int(pub.get("fail_until", 0)):
            raise RuntimeError(f"falha programada do assinante {sid} "
                               f"na tentativa {tarefa['tentativa']}")
        return f"{sid} ok {tarefa['id']}"

    @DeadSubscriber("a")
    @DeadSubscriber("b")
    def handle_dead(self, payload: Dict[str, Any], subscription: Dict[str, Any],
                    tarefa: Dict[str, Any], bd_conn: Any) -> str:
        sid = subscription["id"]
        record_effect(bd_conn, tarefa, sid, "dead")
        if sid in _publication(payload).get("fail_dead", ()):
            raise RuntimeError(f"falha programada na fila de mortos de {sid}")
        return f"morta {sid} tratada {tarefa['id']} (original {tarefa['live_id']})"


if __name__ == "__main__":
    PubSubScripted().run()
