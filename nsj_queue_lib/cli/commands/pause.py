"""nsj-queue pause / resume / halt: stop and restart claiming from the queue, or stop
its running workers (all of them)."""

from __future__ import annotations

import argparse
from typing import Any

from nsj_queue_lib.cli.common import (
    EXIT_OK,
    add_parser,
    emit,
    fmt_time,
    guarded,
    open_admin,
    operator,
)

ORDER = 60


def register(subparsers: Any) -> None:
    pause = add_parser(
        subparsers, "pause", _pause, queue=True,
        help="pausa a fila: os workers param de pegar tarefas em até 1 s",
        description="Pausa a fila (gravado na tabela <fila>_controle do banco): todos os "
        "workers param de pegar tarefas em até 1 s, terminando a que estiver em execução, "
        "e dizem isso no status e no health. Produtores continuam enfileirando. "
        "Desfaça com nsj-queue resume.")
    pause.add_argument("--motivo", help="por que a fila foi pausada (aparece no status)")
    add_parser(
        subparsers, "resume", _resume, queue=True, help="retoma uma fila pausada",
        description="Retoma a fila pausada: os workers voltam a pegar tarefas em até 1 s.")
    add_parser(
        subparsers, "halt", _halt, queue=True,
        help="para os workers em execução da fila (HALT)",
        description="Para todos os workers da fila em execução agora: cada um termina a "
        "tarefa em curso e sai com 0; workers iniciados depois não param. No PostgreSQL é "
        "um NOTIFY 'HALT' no canal QUEUE_NAME; no modo cliente/servidor vai pelo servidor "
        "de filas; no MySQL nativo fica gravado na tabela <fila>_controle e os workers o "
        "veem em até 1 s.")


def _report(admin: Any, args: argparse.Namespace) -> int:
    state = admin.pause_state()
    if state["pausada"]:
        text = (f"Fila {admin.queue_table} pausada em {fmt_time(state['alterado_em'])}"
                + (f" ({state['motivo']})" if state["motivo"] else "")
                + ": os workers param de pegar tarefas em até 1 s.")
    else:
        text = f"Fila {admin.queue_table} retomada: os workers voltam a pegar tarefas."
    emit(args, {"fila": admin.queue_table, "pausada": state["pausada"],
                "motivo": state["motivo"], "por": state["alterado_por"],
                "desde": state["alterado_em"]}, text)
    return EXIT_OK


@guarded
def _pause(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.pause(motivo=args.motivo, por=operator())
        return _report(admin, args)


@guarded
def _resume(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.resume(por=operator())
        return _report(admin, args)


@guarded
def _halt(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.halt(por=operator())
        emit(args, {"fila": admin.queue_table, "halt": True},
             f"HALT enviado à fila {admin.queue_table}: os workers em execução terminam a "
             "tarefa em curso e saem.")
        return EXIT_OK
