"""Living beside nsj-queue-lib 1.2.2 workers: the start-up check of QUEUE_COMPAT_1_2_2.

While 1.2.2 workers may consume the same queue, 2.x also holds their lock keys
(coordination/keys.py).  Compatibility is on by default and ends when the operator
sets QUEUE_COMPAT_1_2_2=false, once no 1.2.2 worker is left.  A worker configured
that way that still sees signs of 1.2.2 workers on its queue says so loudly.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.keys import compat_1_2_2

logger = logging.getLogger(__name__)


def legacy_signs(settings: Settings, session: Optional[Any] = None) -> List[str]:
    """What suggests that 1.2.2 workers use this queue now (PostgreSQL; [] elsewhere).

    Read on `session` (the worker's own connection) or, without it, on a connection
    opened for the check."""
    if settings.db_driver != "POSTGRES":
        return []
    from nsj_queue_lib.db.repository import TaskRepository
    from nsj_queue_lib.db.session import DbSession

    own = session is None
    if session is None:
        session = DbSession.open(settings, application_name="nsj_queue_lib:compat")
    try:
        found = TaskRepository(session, settings.queue_table).compat_evidence(
            settings.queue_name)
    finally:
        if own:
            session.close()
    signs = []
    if found.get("sessoes"):
        signs.append(f"{found['sessoes']} conexão(ões) de outro programa com comandos da "
                     "1.2.2 (LISTEN do canal, advisory lock de um número ou a consulta da fila "
                     "\"as tarefa\")")
    if found.get("falha_processando"):
        signs.append(f"{found['falha_processando']} tarefa(s) com status falha_processando "
                     "(só a 1.2.2 grava) nas últimas 24 h")
    return signs


def startup_check(settings: Settings, session: Optional[Any] = None) -> None:
    """Log the compatibility mode; shout when it is off (or impossible: client/server
    mode) and 1.2.2 workers seem present.  `session`: the worker's own connection."""
    if settings.db_driver != "POSTGRES":
        return
    try:
        signs = legacy_signs(settings, session)
    except Exception as exc:  # a diagnostic: never stops the worker
        logger.debug("Verificação de workers 1.2.2 não executada: %s", exc)
        return
    if compat_1_2_2(settings):
        if signs:
            logger.info("Modo de compatibilidade com a 1.2.2 ativo (QUEUE_COMPAT_1_2_2=true); "
                        "sinais de workers 1.2.2 nesta fila: %s", "; ".join(signs))
        else:
            logger.info("Modo de compatibilidade com a 1.2.2 ativo (QUEUE_COMPAT_1_2_2=true, o "
                        "padrão). Sem workers 1.2.2 nesta fila, QUEUE_COMPAT_1_2_2=false "
                        "dispensa um advisory lock por tarefa.")
        return
    # In client/server mode only live 1.2.2 sessions count: recent falha_processando rows
    # may be left by a 1.2.2 client/server fleet that was just replaced as a whole.
    live = [sign for sign in signs if "conexão" in sign]
    if live and settings.client_server_mode:
        signs = live
        banner = "!" * 78
        logger.error("%s\nINSEGURO: CLIENT_SERVER_MODE=true, mas há sinais de workers "
                     "nsj-queue-lib 1.2.2 (modo PostgreSQL) na fila %s: %s.\nNo modo "
                     "cliente/servidor o worker 2.x não segura as chaves da 1.2.2, e os dois "
                     "podem executar a mesma tarefa duas vezes. Troque todos os workers da "
                     "fila de modo juntos.\n%s", banner, settings.queue_table, "; ".join(signs),
                     banner)
    elif signs and not settings.client_server_mode:
        banner = "!" * 78
        logger.error("%s\nINSEGURO: QUEUE_COMPAT_1_2_2=false, mas há sinais de workers "
                     "nsj-queue-lib 1.2.2 na fila %s: %s.\nSem o modo de compatibilidade, "
                     "workers 1.2.2 e 2.x podem executar a mesma tarefa duas vezes. Use "
                     "QUEUE_COMPAT_1_2_2=true até não restar nenhum worker 1.2.2.\n%s",
                     banner, settings.queue_table, "; ".join(signs), banner)
