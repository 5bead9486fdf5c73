"""What happens to a failed attempt: retry, dead letter, or end of the dead chain."""

from __future__ import annotations

import logging
from typing import Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import FALHA, MESSAGE_MAX, TaskRepository, truncate_message
from nsj_queue_lib.runtime.schedule import retry_delay_seconds
from nsj_queue_lib.text import describe_exception

logger = logging.getLogger(__name__)

REQUEUED = ". Tarefa reenfileirada."
TO_DEAD = ". Máximo de tentativas atingido. Tarefa enviada para a fila de mortos."
DEAD_EXHAUSTED = ". Máximo de tentativas atingido também na fila de mortos; a tarefa termina aqui."
WORKER_STOPPED = "O worker parou durante a execução da tarefa (processo ou conexão interrompidos)"


def error_text(exc: BaseException) -> str:
    """'Type: message' of an exception for the `mensagem` column: never raises (an
    exception whose str() fails is still named), encodable, without NUL; not cut
    here, so the stored text can note the full length."""
    return describe_exception(exc)


def _compose(base: str, suffix: str) -> str:
    base = (base.strip().rstrip(".") or "Falha desconhecida")
    return truncate_message(base, MESSAGE_MAX - len(suffix)) + suffix


def record_failure(repo: TaskRepository, tarefa: dict, error: str,
                   settings: Settings, delay: Optional[float] = None) -> Optional[str]:
    """Mark the attempt `falha` and insert what comes next, in the caller's transaction.

    `delay`: seconds before the next attempt (None: QUEUE_BASE_INTERVAL_RETRY x tentativa).
    Returns the stored message, or None when the attempt is no longer
    'processando' (another worker already handled it): nothing is written then.
    """
    task_id = tarefa["id"]
    tentativa = int(tarefa["tentativa"])
    if tentativa < settings.queue_max_retry:
        message = _compose(error, REQUEUED)
        if delay is None:
            delay = retry_delay_seconds(tentativa, settings.queue_base_interval_retry)
        if not repo.task_fail(task_id, FALHA, message, True, delay):
            return None
        new_id = repo.task_insert_next_attempt(task_id)
        logger.info("Tarefa %s falhou (tentativa %s); nova tentativa %s em %.0f s",
                    task_id, tentativa, new_id, delay)
        return message
    message = _compose(error, DEAD_EXHAUSTED if tarefa.get("dead") else TO_DEAD)
    if not repo.task_fail(task_id, FALHA, message, False, 0):
        return None
    if tarefa.get("dead"):
        logger.error("Tarefa morta %s esgotou as tentativas; fim da cadeia", task_id)
    else:
        dead_id = repo.task_insert_dead(task_id)
        logger.warning("Tarefa %s esgotou as tentativas; enviada à fila de mortos (id %s)",
                       task_id, dead_id)
    return message
