"""Example pub/sub worker: python -m nsj_queue_lib.worker_pub_sub_teste.

Subscribers (rows of QUEUE_SUBSCRIBER_TABLE) handled here:

* `teste`: logs the publication; a publication {"falhar": true} raises, to
  show the subscriber's own retries and its dead-letter handler.
* `teste_webhook`: delivered as a webhook (url, http_method and headers of the
  subscription), with no code.

Publish with ``QueueClient(conn, QUEUE_TABLE, QUEUE_SUBSCRIBER_TABLE)
.insert_task_pub_sub("origem", "destino", "processo", None, {"a": 1})``.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from nsj_queue_lib.worker_pub_sub_base import (
    DeadSubscriber,
    Subscriber,
    SubscriberWebhook,
    WorkerPubSubBase,
)

logger = logging.getLogger(__name__)


@SubscriberWebhook("teste_webhook")
class WorkerPubSubTeste(WorkerPubSubBase):
    """Example worker with one code subscriber (`teste`) and one webhook subscriber."""

    @Subscriber("teste")
    def execute_subscriber_teste(self, payload: Dict[str, Any], subscription: Dict[str, Any],
                                 tarefa: Dict[str, Any], bd_conn: Any) -> Optional[str]:
        publication = payload["publication"]
        logger.info("Assinante %s recebeu a publicação %s (tarefa %s, tentativa %s)",
                    subscription["id"], tarefa["publication_id"], tarefa["id"],
                    tarefa["tentativa"])
        if isinstance(publication, dict) and publication.get("falhar"):
            raise RuntimeError("Falha simulada pela publicação")
        return f"Assinante {subscription['id']} processou a publicação {tarefa['publication_id']}"

    @DeadSubscriber("teste")
    def execute_dead_subscriber_teste(self, payload: Dict[str, Any],
                                      subscription: Dict[str, Any], tarefa: Dict[str, Any],
                                      bd_conn: Any) -> Optional[str]:
        logger.warning("Assinante %s: tarefa morta %s (original %s)", subscription["id"],
                       tarefa["id"], tarefa["live_id"])
        return f"Tarefa morta {tarefa['id']} do assinante {subscription['id']} tratada"


if __name__ == "__main__":
    WorkerPubSubTeste().run()

# The 1.2.2 name of this example class.
WorkerPubSubTest = WorkerPubSubTeste
