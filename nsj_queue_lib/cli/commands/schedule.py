"""nsj-queue schedule add|list|remove: the queue's periodic tasks (nsj_queue_lib/scheduling)."""

from __future__ import annotations

import argparse
import json
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
from nsj_queue_lib.exceptions import ConfigError

ORDER = 62


def register(subparsers: Any) -> None:
    parser = add_parser(
        subparsers, "schedule",
        help="tarefas periódicas da fila: add, list, remove",
        description="Tarefas periódicas gravadas no banco da fila (tabela <fila>_agenda) e "
        "executadas pelos próprios workers: a cada horário (slot) exatamente uma tarefa "
        "comum é inserida, seja qual for o número de workers. Mudanças valem em até 1 s.")
    sub = parser.add_subparsers(dest="schedule_command", metavar="SUBCOMANDO", required=True)
    add = add_parser(
        sub, "add", _add, queue=True, help="cria ou substitui uma tarefa periódica",
        description="Cria a tarefa periódica NOME (ou substitui a que já tem esse nome): "
        "a cada horário de --cron ou --every, uma tarefa do --processo com o --payload. "
        "Começa no primeiro horário depois de agora. Depois de uma parada (ou pausa), "
        "no máximo --catch-up tarefas pelos horários perdidos (os mais recentes).")
    add.add_argument("nome", metavar="NOME", help="nome do agendamento (até 100 caracteres)")
    rule = add.add_mutually_exclusive_group(required=True)
    rule.add_argument("--cron", metavar="EXPR",
                      help="expressão cron de cinco campos (minuto hora dia mês dia-da-semana; "
                      "listas, faixas e passos); precisa de nsj-queue-lib[cron]")
    rule.add_argument("--every", metavar="INTERVALO",
                      help="intervalo fixo: inteiro seguido de s, m ou h (30s, 5m, 1h), "
                      "alinhado ao relógio UTC")
    add.add_argument("--processo", required=True, help="processo das tarefas inseridas")
    add.add_argument("--payload", metavar="JSON", help="payload das tarefas (JSON)")
    add.add_argument("--tz", default="UTC", metavar="FUSO",
                     help="fuso horário da expressão cron (ex.: America/Sao_Paulo; padrão UTC)")
    add.add_argument("--catch-up", type=positive_int, default=1, metavar="N",
                     help="máximo de tarefas pelos horários perdidos numa parada (padrão 1)")
    add.add_argument("--prioridade", type=int, help="prioridade das tarefas (padrão 50)")
    add_parser(sub, "list", _list, queue=True, help="lista as tarefas periódicas",
               description="Lista as tarefas periódicas da fila com a regra, o próximo "
               "horário (UTC), o último horário executado e a tarefa que ele inseriu.")
    remove = add_parser(sub, "remove", _remove, queue=True,
                        help="remove uma tarefa periódica",
                        description="Remove a tarefa periódica NOME: os workers deixam de "
                        "inseri-la em até 1 s (tarefas já inseridas continuam). Sai com 1 se "
                        "ela não existe.")
    remove.add_argument("nome", metavar="NOME", help="nome do agendamento")


def _public(row: dict) -> dict:
    return {key: row.get(key) for key in (
        "nome", "processo", "regra", "cron", "intervalo_segundos", "fuso", "recuperar",
        "prioridade", "payload", "proximo", "ultimo_slot", "ultima_tarefa", "alterado_por")}


@guarded
def _add(args: argparse.Namespace) -> int:
    payload = None
    if args.payload is not None:
        try:
            payload = json.loads(args.payload)
        except ValueError as exc:
            raise ConfigError(f"--payload não é JSON válido: {exc}") from None
    with open_admin(args) as admin:
        row = admin.add_schedule(args.nome, args.processo, cron=args.cron, every=args.every,
                                 payload=payload, tz=args.tz, catch_up=args.catch_up,
                                 prioridade=args.prioridade, por=operator())
    emit(args, _public(row), f"Agendamento {row['nome']} gravado ({row['regra']}, processo "
         f"{row['processo']}); próximo horário: {fmt_time(row['proximo'])}")
    return EXIT_OK


@guarded
def _list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        rows = admin.list_schedules()
    if args.json:
        emit(args, [_public(r) for r in rows], "")
        return EXIT_OK
    if not rows:
        print(f"Nenhuma tarefa periódica na fila {admin.queue_table}.")
        return EXIT_OK
    print(f"{'NOME':<24} {'REGRA':<34} {'PROCESSO':<20} {'PRÓXIMO':<19} "
          f"{'ÚLTIMO':<19} TAREFA")
    for r in rows:
        print(f"{short(r['nome'], 24):<24} {short(r['regra'], 34):<34} "
              f"{short(r['processo'], 20):<20} {fmt_time(r['proximo']):<19} "
              f"{fmt_time(r['ultimo_slot']) if r['ultimo_slot'] else '-':<19} "
              f"{r['ultima_tarefa'] if r['ultima_tarefa'] is not None else '-'}")
    return EXIT_OK


@guarded
def _remove(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        admin.remove_schedule(args.nome)
    emit(args, {"nome": args.nome, "removido": True},
         f"Agendamento {args.nome} removido: os workers param de inseri-lo em até 1 s.")
    return EXIT_OK
