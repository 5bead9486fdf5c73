"""Benchmark worker: each task inserts one side-effect row through bd_conn."""

from __future__ import annotations

import os
import time
from typing import Any, Dict

if os.environ.get("NSJQ_BENCH_COUNT_DIR"):  # statement counting (bench/counting.py)
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import counting

    counting.install()

from nsj_queue_lib.worker_base import WorkerBase

SCHEMA = os.environ.get("QUEUE_TABLE", "public.x").split(".")[0]
QUOTE = "`" if os.environ.get("DB_DRIVER", "POSTGRES") != "POSTGRES" else '"'
SQL = f"INSERT INTO {QUOTE}{SCHEMA}{QUOTE}.efeitos (tarefa_id, t_inicio) VALUES (%s, %s)"


class NoopWorker(WorkerBase):
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any) -> None:
        started = time.time()
        with bd_conn.cursor() as cur:
            cur.execute(SQL, (tarefa["id"], started))
        return None


if __name__ == "__main__":
    NoopWorker().run()
