"""Fan-out of a publication into one task per matching active subscriber.

One INSERT ... SELECT (`subscriber_fanout`) runs in the publication's own
transaction: the subscriber tasks exist exactly when the publication is
marked `sucesso`.  Each subscriber task copies the publication's origem,
destino, processo, chave_externa, tenant, grupo_empresarial, payload (text,
unchanged), payload_hash and prioridade, and carries `publication_id` (the id
returned by `QueueClient.insert_task_pub_sub`) and `subscriber_id`.

Matching: same `processo`, `ativo`, and for tenant and grupo_empresarial
either a NULL on the subscriber (receives all) or equality with the
publication (a publication with NULL there reaches only subscribers with NULL).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nsj_queue_lib.exceptions import ConfigError

if TYPE_CHECKING:
    from nsj_queue_lib.runtime.router import TaskContext

logger = logging.getLogger(__name__)

PUBLISHED = "Publicado para {n} assinante(s), com sucesso!"
NO_SUBSCRIBER = "Não haviam assinantes configurados! Tarefa descartada sem nenhuma ação."


def publish(ctx: TaskContext) -> str:
    """Replace the publication by its subscriber tasks, in the task's transaction."""
    settings = ctx.settings
    if not getattr(settings, "queue_subscriber_table", None):
        raise ConfigError(
            "Tabela de assinaturas não informada (QUEUE_SUBSCRIBER_TABLE) para a fila "
            f"{getattr(settings, 'queue_table', '?')}: a publicação não pode ser distribuída."
        )
    task_id = ctx.tarefa["id"]
    count = ctx.repository().subscriber_fanout(task_id)
    if count <= 0:
        logger.info("Publicação %s sem assinantes ativos para o processo", task_id)
        return NO_SUBSCRIBER
    logger.info("Publicação %s distribuída para %s assinante(s)", task_id, count)
    return PUBLISHED.format(n=count)
