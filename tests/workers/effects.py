"""The side-effect rows the test workers write in the task's own transaction."""

from __future__ import annotations

import os
from typing import Any, Dict


def effects_table() -> str:
    """<schema>.efeitos quoted for the worker's database (backticks on MySQL/MariaDB)."""
    table = os.environ["QUEUE_TABLE"]
    schema = table.split(".")[0] if "." in table else "public"
    driver = (os.environ.get("DB_DRIVER") or os.environ.get("DATABASE_DRIVER")
              or "POSTGRES").strip().upper()
    q = "`" if driver in ("MYSQL", "SINGLE_STORE") else '"'
    return f"{q}{schema.strip(q)}{q}.efeitos"


def record_effect(bd_conn: Any, tarefa: Dict[str, Any], chave: str, tipo: str) -> None:
    """One row (task id, chave, tipo, pid) through the task's connection."""
    with bd_conn.cursor() as cur:
        cur.execute(f"INSERT INTO {effects_table()} (tarefa_id, chave, tipo, pid) "
                    "VALUES (%s, %s, %s, %s)", (tarefa["id"], chave, tipo, os.getpid()))
