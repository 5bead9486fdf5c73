"""A worker whose task cancels another task through QueueAdmin on its own bd_conn, then
fails while tentativa < fail_until (python -m tests.workers.admin_in_task).

Payload: {"efeito": str, "cancel": task id, "fail_until": int, "raw": bool (QueueAdmin
on bd_conn.conn, the raw connection, as 1.2.2 task code uses it)}.  The cancel and the
effect belong to the task's transaction: a failed attempt keeps neither."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.worker_base import WorkerBase
from tests.workers.effects import record_effect


class AdminInTaskWorker(WorkerBase):
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any) -> Any:
        data = json.loads(payload)
        record_effect(bd_conn, tarefa, data["efeito"], "execute")
        conn = bd_conn.conn if data.get("raw") else bd_conn
        QueueAdmin(conn, os.environ["QUEUE_TABLE"]).cancel(data["cancel"], por="tarefa")
        if tarefa["tentativa"] < int(data.get("fail_until", 0)):
            raise RuntimeError(f"falha programada na tentativa {tarefa['tentativa']}")
        return "ok"


if __name__ == "__main__":
    AdminInTaskWorker().run()
