"""Fan-out of a publication into one task per matching active subscriber."""

from __future__ import annotations

import logging
from typing import Any

from nsj_queue_lib.db.repository import TaskRepository

logger = logging.getLogger(__name__)

PUBLISHED = "Publicado para {n} assinante(s), com sucesso!"
NO_SUBSCRIBER = "Não haviam assinantes configurados! Tarefa descartada sem nenhuma ação."


def publish(worker: Any, tarefa: dict, bd_conn: Any) -> str:
    """Replace the publication by its subscriber tasks, in the task's transaction."""
    settings = worker.settings
    if not settings.queue_subscriber_table:
        raise RuntimeError(
            "Tabela de assinaturas não informada (QUEUE_SUBSCRIBER_TABLE) para a fila "
            f"{settings.queue_table}: a publicação não pode ser distribuída."
        )
    repo = TaskRepository(bd_conn._session, settings.queue_table, settings.queue_subscriber_table)
    count = repo.subscriber_fanout(tarefa["id"])
    if count <= 0:
        return NO_SUBSCRIBER
    logger.info("Publicação %s distribuída para %s assinante(s)", tarefa["id"], count)
    return PUBLISHED.format(n=count)
