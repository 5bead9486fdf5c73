"""nsj-queue compat on|off|status: the queue's mixed-fleet mode with nsj-queue-lib 1.2.2
(engine/fleet_mode.py)."""

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

ORDER = 65


def register(subparsers: Any) -> None:
    parser = add_parser(
        subparsers, "compat",
        help="modo de frota mista com workers 1.2.2: status, on, off",
        description="Enquanto a fila está em modo de frota mista, workers nsj-queue-lib 1.2.2 "
        "podem consumi-la ao lado dos 2.x, que seguram também as chaves da 1.2.2 (um "
        "advisory lock a mais por tarefa). Uma fila criada pela 2.x começa fora dele; uma "
        "fila trazida da 1.2.2 (ou de uma 2.x anterior) por `schema upgrade` começa nele. "
        "Os workers em execução seguem a mudança em até 1 s, sem reiniciar.")
    sub = parser.add_subparsers(dest="compat_command", metavar="SUBCOMANDO", required=True)
    add_parser(sub, "status", _status, queue=True,
               help="mostra o modo e o que se vê de workers 1.2.2",
               description="Mostra o modo gravado na fila e procura sinais de workers 1.2.2 "
               "(conexões com comandos da 1.2.2, tarefas falha_processando recentes).")
    off = add_parser(
        sub, "off", _off, queue=True, help="encerra o modo de frota mista",
        description="Encerra o período de frota mista: recusa (saída 1) enquanto vê "
        "conexões de workers 1.2.2, tarefas falha_processando das últimas 24 h ou conexões "
        "que o usuário do banco não pode ver; --force ignora. Se um worker 2.x vir depois "
        "um worker 1.2.2 na fila, ele a devolve ao modo de frota mista.")
    off.add_argument("--force", action="store_true",
                     help="encerra mesmo com sinais de workers 1.2.2")
    add_parser(sub, "on", _on, queue=True, help="volta ao modo de frota mista",
               description="Põe a fila em modo de frota mista (antes de subir workers 1.2.2 "
               "nela, por exemplo num rollback).")


def _report(admin: Any, args: argparse.Namespace, prefix: str = "") -> int:
    state = admin.compat_state()
    table = admin.queue_table
    data = {"fila": table, "aplica": state["aplica"], "modo_misto": state["misto"],
            "gravado": state["gravado"], "desde": state["alterado_em"],
            "por": state["alterado_por"], "sinais_1_2_2": state["sinais"],
            "conexoes_ocultas": state["ocultas"]}
    if not state["aplica"]:
        emit(args, data, f"Fila {table}: o modo de frota mista com a 1.2.2 não se aplica "
                         "(MySQL).")
        return EXIT_OK
    if state["gravado"] is None:
        mode = ("em modo de frota mista (nenhum valor gravado: fila da 1.2.2 ou de uma 2.x "
                "anterior; `nsj-queue compat off` o encerra)")
    else:
        since = f" desde {fmt_time(state['alterado_em'])}" if state["alterado_em"] else ""
        by = f" por {state['alterado_por']}" if state["alterado_por"] else ""
        mode = ("em modo de frota mista" if state["misto"] else "fora do modo de frota mista"
                ) + since + by
    lines = [f"{prefix}Fila {table}: {mode}."]
    if state["sinais"]:
        lines.append("Sinais de workers 1.2.2: " + "; ".join(state["sinais"]) + ".")
    else:
        lines.append("Nenhum sinal de workers 1.2.2.")
    if state["ocultas"]:
        lines.append(f"{state['ocultas']} conexão(ões) de outros usuários com comandos "
                     "ocultos: não é possível saber se alguma é de um worker 1.2.2.")
    emit(args, data, "\n".join(lines))
    return EXIT_OK


@guarded
def _status(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        return _report(admin, args)


@guarded
def _off(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        seen = admin.compat_off(por=operator(), force=args.force)
        return _report(admin, args, "Forçado. " if seen else "")


@guarded
def _on(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.compat_on(por=operator())
        return _report(admin, args)
