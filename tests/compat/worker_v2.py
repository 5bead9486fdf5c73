"""2.x side of the mixed-fleet tests (python -m tests.compat.worker_v2; TEST_KIND=pubsub).

Plain: the payload is a key; one row (tipo 'v2') in TEST_EFFECTS_TABLE through bd_conn.
Pub/sub: subscribers s1..s3 write '<subscriber>:<publication>'.
"""

from __future__ import annotations

import os
import random
import time

from nsj_queue_lib.worker_base import WorkerBase
from nsj_queue_lib.worker_pub_sub_base import Subscriber, WorkerPubSubBase

EFFECTS = os.environ.get("TEST_EFFECTS_TABLE", "efeitos")
SLEEP = float(os.environ.get("TEST_TASK_SLEEP", "0.01"))


def _effect(bd_conn, chave: str) -> None:
    time.sleep(random.uniform(0, SLEEP))
    with bd_conn.conn.cursor() as cur:
        cur.execute(f"INSERT INTO {EFFECTS} (chave, tipo, pid) VALUES (%s, 'v2', %s)",
                    (chave, os.getpid()))


class PlainV2(WorkerBase):
    def execute(self, payload, tarefa, bd_conn):
        _effect(bd_conn, payload)
        return "ok v2"


class PubSubV2(WorkerPubSubBase):
    @Subscriber("s1")
    def s1(self, payload, subscription, tarefa, bd_conn):
        _effect(bd_conn, f"s1:{payload['publication']}")

    @Subscriber("s2")
    def s2(self, payload, subscription, tarefa, bd_conn):
        _effect(bd_conn, f"s2:{payload['publication']}")

    @Subscriber("s3")
    def s3(self, payload, subscription, tarefa, bd_conn):
        _effect(bd_conn, f"s3:{payload['publication']}")


if __name__ == "__main__":
    worker = PubSubV2() if os.environ.get("TEST_KIND") == "pubsub" else PlainV2()
    worker.run([])
