"""A pub/sub worker for the multi-database tests (python -m tests.workers.multidb_pubsub).

Subscriber `grava` (handler with `multi_db_conn`): inserts "<publication.txt>@grava"
into the tenant's `item` table and returns the tenant connection's database.
Subscriber `simples` (handler without it): inserts an efeito (chave "simples")
through bd_conn.
"""

from __future__ import annotations

import os
from typing import Any, Dict

from nsj_queue_lib.worker_pub_sub_base import Subscriber, WorkerPubSubBase
from tests.workers.multidb_worker import tenant_info


class MultiDbPubSub(WorkerPubSubBase):
    @Subscriber("grava")
    def grava(self, payload: Dict[str, Any], subscription: Dict[str, Any],
              tarefa: Dict[str, Any], bd_conn: Any, multi_db_conn: Any) -> str:
        with multi_db_conn.cursor() as cur:
            cur.execute("INSERT INTO item (txt) VALUES (%s)",
                        (f"{payload['publication']['txt']}@{subscription['id']}",))
        return tenant_info(multi_db_conn, tarefa)

    @Subscriber("simples")
    def simples(self, payload: Dict[str, Any], subscription: Dict[str, Any],
                tarefa: Dict[str, Any], bd_conn: Any) -> str:
        schema = os.environ["QUEUE_TABLE"].split(".")[0]
        with bd_conn.cursor() as cur:
            cur.execute(f'INSERT INTO "{schema}".efeitos (tarefa_id, chave, tipo, pid) '
                        "VALUES (%s, %s, %s, %s)",
                        (tarefa["id"], subscription["id"], "execute", os.getpid()))
        return "simples ok"


if __name__ == "__main__":
    MultiDbPubSub().run()
