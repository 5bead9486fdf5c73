"""nsj-queue retry ID / cancel ID: redrive a chain that ended, cancel a waiting task."""

from __future__ import annotations

import argparse
from typing import Any

from nsj_queue_lib.cli.common import (
    EXIT_OK,
    add_parser,
    emit,
    guarded,
    open_admin,
    operator,
)

ORDER = 50


def register(subparsers: Any) -> None:
    add_parser(
        subparsers, "retry", _retry, task_id=True, queue=True,
        help="reenfileira uma tarefa em falha, morta ou cancelada, ou antecipa a próxima "
        "tentativa de uma que falhou",
        description="Reenfileira a cadeia da tarefa ID (qualquer tentativa dela), que terminou "
        "em falha (esgotou as tentativas) ou cancelada: insere uma nova tentativa, pendente "
        "agora, ligada à anterior (id_inicial, id_anterior). Para uma tarefa da fila de "
        "mortos, reenfileira a tarefa original (live_id), que roda execute de novo. Se a "
        "cadeia falhou e aguarda a próxima tentativa (intervalo entre tentativas), essa "
        "tentativa passa a valer agora. Sai com 1 se a tarefa não existe, está pendente ou "
        "agendada sem ter falhado, em execução ou concluída com sucesso.")
    cancel = add_parser(
        subparsers, "cancel", _cancel, task_id=True, queue=True,
        help="cancela uma tarefa pendente ou agendada",
        description="Cancela a tentativa pendente ou agendada da tarefa ID: ela fica "
        "'cancelada' e nenhum worker a executa (retry a reenfileira). Uma tarefa em "
        "execução não pode ser cancelada (sai com 1).")
    cancel.add_argument("--motivo", help="texto gravado na mensagem da tarefa")


@guarded
def _retry(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        new_id, early = admin.redrive(args.id, por=operator())
        chain = admin.show(new_id)
    emit(args, {"id_inicial": chain["id_inicial"], "nova_tentativa": new_id,
                "status": chain["status"], "antecipada": early},
         f"Tarefa {chain['id_inicial']}: " + (
             f"tentativa #{new_id} antecipada para agora ({chain['status']})" if early else
             f"reenfileirada: nova tentativa #{new_id} ({chain['status']})"))
    return EXIT_OK


@guarded
def _cancel(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        attempt = admin.cancel(args.id, motivo=args.motivo, por=operator())
        root = admin.show(attempt)["id_inicial"]
    emit(args, {"id_inicial": root, "tentativa_cancelada": attempt, "status": "cancelada"},
         f"Tarefa {root} cancelada (tentativa #{attempt})")
    return EXIT_OK
