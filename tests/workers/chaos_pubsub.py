"""Pub/sub worker of the chaos suite (python -m tests.workers.chaos_pubsub).

Subscriber "codigo" inserts one row (chave = the publication's "k", tipo
'execute') into <schema>.efeitos through bd_conn, then sleeps "s" seconds;
its dead letters insert tipo 'dead'.  Subscriber "hook" is a webhook
(@SubscriberWebhook): its url is the suite's flaky HTTP endpoint.
"""

from __future__ import annotations

import time
from typing import Any, Dict

from nsj_queue_lib.worker_pub_sub_base import (
    DeadSubscriber,
    Subscriber,
    SubscriberWebhook,
    WorkerPubSubBase,
)
from tests.workers.effects import record_effect


@SubscriberWebhook("hook")
class ChaosPubSub(WorkerPubSubBase):
    @Subscriber("codigo")
    def codigo(self, payload: Dict[str, Any], subscription: Dict[str, Any],
               tarefa: Dict[str, Any], bd_conn: Any) -> str:
        publication = payload["publication"]
        record_effect(bd_conn, tarefa, publication["k"], "execute")
        if publication.get("s"):
            time.sleep(float(publication["s"]))
        return f"ok {publication['k']}"

    @DeadSubscriber("codigo")
    def codigo_morto(self, payload: Dict[str, Any], subscription: Dict[str, Any],
                     tarefa: Dict[str, Any], bd_conn: Any) -> str:
        record_effect(bd_conn, tarefa, payload["publication"]["k"], "dead")
        return "morta"


if __name__ == "__main__":
    ChaosPubSub().run()
