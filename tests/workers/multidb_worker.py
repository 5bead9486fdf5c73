"""A multi-database worker for tests (python -m tests.workers.multidb_worker).

`execute(payload, tarefa, bd_conn, multi_db_conn)`; payload keys (JSON object):
  txt: str         insert "<txt>@<tentativa>" into the tenant database's `item` table
                   (through multi_db_conn, in the tenant transaction)
  efeito: str      insert a row into <schema>.efeitos through bd_conn (the queue transaction)
  unico: str       insert it twice into the tenant's `item_unico`, whose UNIQUE constraint
                   is DEFERRABLE INITIALLY DEFERRED: the error comes only at the tenant COMMIT
  fail: bool       raise RuntimeError after the writes
  fail_until: int  raise while tentativa < fail_until (after the writes)
It returns "db=<current_database()> pid=<pg_backend_pid()> tenant=<tenant>" of
multi_db_conn.  `execute_dead` inserts "morta <live_id>" into the tenant's `item`.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from nsj_queue_lib.worker_base import WorkerBase


def _schema() -> str:
    table = os.environ["QUEUE_TABLE"]
    return table.split(".")[0] if "." in table else "public"


def tenant_info(multi_db_conn: Any, tarefa: Dict[str, Any]) -> str:
    with multi_db_conn.cursor() as cur:
        cur.execute("SELECT current_database(), pg_backend_pid()")
        db, pid = cur.fetchone()
    return f"db={db} pid={pid} tenant={tarefa['tenant']}"


class MultiDbWorker(WorkerBase):
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any,
                multi_db_conn: Any) -> Any:
        if multi_db_conn is None:
            raise RuntimeError("multi_db_conn não recebido")
        data = json.loads(payload) if payload else {}
        with multi_db_conn.cursor() as cur:
            if data.get("txt"):
                cur.execute("INSERT INTO item (txt) VALUES (%s)",
                            (f"{data['txt']}@{tarefa['tentativa']}",))
            if data.get("unico"):
                cur.execute("INSERT INTO item_unico (txt) VALUES (%s), (%s)",
                            (data["unico"], data["unico"]))
        if data.get("efeito"):
            with bd_conn.cursor() as cur:
                cur.execute(f'INSERT INTO "{_schema()}".efeitos (tarefa_id, chave, tipo, pid) '
                            "VALUES (%s, %s, %s, %s)",
                            (tarefa["id"], data["efeito"], "execute", os.getpid()))
        if data.get("fail") or tarefa["tentativa"] < int(data.get("fail_until", 0)):
            raise RuntimeError(f"falha programada na tentativa {tarefa['tentativa']}")
        return tenant_info(multi_db_conn, tarefa)

    def execute_dead(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any,
                     multi_db_conn: Any) -> Any:
        with multi_db_conn.cursor() as cur:
            cur.execute("INSERT INTO item (txt) VALUES (%s)", (f"morta {tarefa['live_id']}",))
        return "morta " + tenant_info(multi_db_conn, tarefa)


if __name__ == "__main__":
    MultiDbWorker().run()
