"""Example worker for the `fila_teste` queue: python -m nsj_queue_lib.worker_fila_teste."""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, Optional

from nsj_queue_lib.worker_base import WorkerBase

logger = logging.getLogger(__name__)


class WorkerFilaTeste(WorkerBase):
    """Logs each task; a payload {"falhar": true} raises, to show retries and dead letters."""

    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any,
                multi_db_conn: Any = None) -> Optional[str]:
        logger.info("Executando tarefa %s (tentativa %s)", tarefa["id"], tarefa["tentativa"])
        data = json.loads(payload) if payload and payload.lstrip().startswith("{") else {}
        if data.get("falhar"):
            raise RuntimeError("Falha simulada pelo payload")
        return f"Tarefa {tarefa['id']} executada"

    def execute_dead(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any,
                     multi_db_conn: Any = None) -> Optional[str]:
        logger.warning("Tarefa morta %s (original %s)", tarefa["id"], tarefa["live_id"])
        return f"Tarefa morta {tarefa['id']} tratada"


if __name__ == "__main__":
    WorkerFilaTeste().run()
