"""Worker of the chaos suite (python -m tests.workers.chaos_worker).

Payload (JSON object): {"k": key, "s": seconds, "f": n}.  Every attempt first
inserts one row (chave = key, tipo = 'execute') into <schema>.efeitos through
bd_conn, so the row commits only with the task's success; then it sleeps `s`
seconds (the window where faults hit) and raises while tentativa <= f.
Dead letters insert a row with tipo 'dead'.  The effects table has no unique
key: the suite counts duplicates instead of preventing them.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict

from nsj_queue_lib.worker_base import WorkerBase
from tests.workers.effects import record_effect


class ChaosWorker(WorkerBase):
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any) -> str:
        data = json.loads(payload)
        record_effect(bd_conn, tarefa, data["k"], "execute")
        if data.get("s"):
            time.sleep(float(data["s"]))
        if tarefa["tentativa"] <= int(data.get("f", 0)):
            raise RuntimeError(f"falha programada na tentativa {tarefa['tentativa']}")
        return f"ok {data['k']}"

    def execute_dead(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any) -> str:
        data = json.loads(payload)
        record_effect(bd_conn, tarefa, data["k"], "dead")
        return f"morta {data['k']}"


if __name__ == "__main__":
    ChaosWorker().run()
