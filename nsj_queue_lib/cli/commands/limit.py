"""nsj-queue limit set|list|clear: concurrency limits per processo (nsj_queue_lib/db/limits.py)."""

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
    positive_int,
    short,
)

ORDER = 63


def register(subparsers: Any) -> None:
    parser = add_parser(
        subparsers, "limit",
        help="limites de concorrência por processo: set, list, clear",
        description="No máximo N tarefas de um processo em execução ao mesmo tempo em toda a "
        "frota (workers nativos PostgreSQL e MySQL). Um worker barrado pelo limite pega "
        "tarefas de outros processos na hora. Mudanças valem em até 2 s; tarefas já em "
        "execução continuam.")
    sub = parser.add_subparsers(dest="limit_command", metavar="SUBCOMANDO", required=True)
    set_ = add_parser(sub, "set", _set, queue=True,
                      help="define (ou muda) o limite de um processo",
                      description="No máximo N tarefas do PROCESSO em execução ao mesmo "
                      "tempo. Recusado em modo misto (workers 1.2.2 não olham limites).")
    set_.add_argument("processo", metavar="PROCESSO", help="processo das tarefas")
    set_.add_argument("maximo", metavar="N", type=positive_int,
                      help="máximo de tarefas em execução ao mesmo tempo (1 a 10000)")
    add_parser(sub, "list", _list, queue=True, help="lista os limites",
               description="Lista os limites da fila com quantas tarefas de cada processo "
               "estão em execução agora.")
    clear = add_parser(sub, "clear", _clear, queue=True, help="remove o limite de um processo",
                       description="Remove o limite do PROCESSO (sai com 1 se ele não tem "
                       "limite). Sem limites na fila, os workers voltam ao claim de sempre.")
    clear.add_argument("processo", metavar="PROCESSO", help="processo das tarefas")


@guarded
def _set(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        row = admin.set_limit(args.processo, args.maximo, por=operator())
    running = row["em_execucao"]
    extra = (f"; {running} em execução agora, acima do limite: as novas esperam elas terminarem"
             if running > row["maximo"] else "")
    emit(args, row, f"Limite do processo {row['processo']}: {row['maximo']} tarefa(s) ao mesmo "
         f"tempo (vale em até 2 s){extra}")
    return EXIT_OK


@guarded
def _list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        rows = admin.list_limits()
    if args.json:
        emit(args, rows, "")
        return EXIT_OK
    if not rows:
        print(f"Nenhum limite de concorrência na fila {admin.queue_table}.")
        return EXIT_OK
    print(f"{'PROCESSO':<30} {'LIMITE':>7} {'EM EXECUÇÃO':>12}  {'ALTERADO EM':<19} POR")
    for r in rows:
        print(f"{short(r['processo'], 30):<30} {r['maximo']:>7} {r['em_execucao']:>12}  "
              f"{fmt_time(r['alterado_em']):<19} {r['alterado_por'] or '-'}")
    return EXIT_OK


@guarded
def _clear(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.clear_limit(args.processo)
    emit(args, {"processo": args.processo, "removido": True},
         f"Limite do processo {args.processo} removido (vale em até 2 s).")
    return EXIT_OK
