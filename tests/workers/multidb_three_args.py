"""A worker whose `execute` takes 3 arguments, run with MULTI_DATABASE=true in the tests.

python -m tests.workers.multidb_three_args: writes an efeito (chave = payload text)
through bd_conn and returns "tres argumentos <id>".
"""

from __future__ import annotations

import os
from typing import Any, Dict

from nsj_queue_lib.worker_base import WorkerBase


class ThreeArgsWorker(WorkerBase):
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any) -> Any:
        schema = os.environ["QUEUE_TABLE"].split(".")[0]
        with bd_conn.cursor() as cur:
            cur.execute(f'INSERT INTO "{schema}".efeitos (tarefa_id, chave, tipo, pid) '
                        "VALUES (%s, %s, %s, %s)", (tarefa["id"], payload, "execute", os.getpid()))
        return f"tres argumentos {tarefa['id']}"


if __name__ == "__main__":
    ThreeArgsWorker().run()
