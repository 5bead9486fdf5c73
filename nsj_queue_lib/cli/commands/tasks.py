"""nsj-queue tasks list|show: the tasks of the queue and the attempts of one chain."""

from __future__ import annotations

import argparse
import json
from typing import Any, Dict

from nsj_queue_lib.cli.common import (
    EXIT_OK,
    add_parser,
    add_queue_options,
    emit,
    fmt_time,
    guarded,
    open_admin,
    positive_int,
    print_json,
    short,
)

ORDER = 40


def register(subparsers: Any) -> None:
    parser = add_parser(
        subparsers, "tasks", help="lista tarefas ou mostra uma cadeia com todas as tentativas",
        description="Tarefas da fila (QUEUE_TABLE ou --tabela).")
    sub = parser.add_subparsers(dest="tasks_command", metavar="SUBCOMANDO", required=True)

    lst = add_parser(
        sub, "list", _list, help="lista as tarefas (estado atual de cada cadeia), das mais "
        "novas às mais antigas",
        description="Lista as tarefas, das mais novas às mais antigas: por padrão, a "
        "tentativa atual de cada cadeia (a tarefa e suas retentativas).")
    lst.add_argument("--status", help="só este status (pendente, agendada, processando, "
                     "sucesso, falha, cancelada)")
    lst.add_argument("--processo", help="só este processo")
    lst.add_argument("--chave-externa", dest="chave_externa", help="só esta chave_externa")
    lst.add_argument("--tenant", type=int, help="só este tenant")
    dead = lst.add_mutually_exclusive_group()
    dead.add_argument("--mortas", dest="dead", action="store_const", const=True,
                      help="só a fila de mortos")
    dead.add_argument("--vivas", dest="dead", action="store_const", const=False,
                      help="sem a fila de mortos")
    lst.add_argument("--falhando", dest="failing", action="store_const", const=True,
                     help="só cadeias que falharam e aguardam a próxima tentativa (retry ID "
                     "a antecipa)")
    lst.add_argument("--todas-tentativas", dest="all_attempts", action="store_true",
                     help="todas as tentativas, não só a atual de cada cadeia")
    lst.add_argument("--limite", type=positive_int, default=50, help="máximo de linhas (padrão 50)")
    lst.add_argument("--antes-de", dest="before_id", type=int, metavar="ID",
                     help="só ids menores que ID (paginação)")
    add_queue_options(lst)
    add_parser(
        sub, "show", _show, task_id=True, queue=True,
        help="mostra a cadeia de uma tarefa com todas as tentativas",
        description="Mostra a cadeia da tarefa ID (qualquer tentativa dela): cada tentativa "
        "com status e mensagem, o payload, a fila de mortos e, numa publicação, as tarefas "
        "dos assinantes. Sai com 1 se a tarefa não existe.")


@guarded
def _list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        rows = admin.list_tasks(status=args.status, processo=args.processo,
                                chave_externa=args.chave_externa, tenant=args.tenant,
                                dead=args.dead, all_attempts=args.all_attempts,
                                limit=args.limite, before_id=args.before_id,
                                failing=args.failing)
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print("Nenhuma tarefa.")
        return EXIT_OK
    print(f"{'ID':>8} {'CADEIA':>8} {'TENT':>4} {'STATUS':<11} {'PROCESSO':<20} "
          f"{'DATA/HORA':<19} MENSAGEM")
    for r in rows:
        kind = " (morta)" if r["dead"] else ""
        if r.get("chave_unica"):
            kind += f" [chave única {short(r['chave_unica'], 40)}]"
        print(f"{r['id']:>8} {r['id_inicial']:>8} {r['tentativa']:>4} {r['status']:<11} "
              f"{short(r['processo'], 20):<20} {fmt_time(r['data_hora']):<19} "
              f"{short(r['mensagem'], 60)}{kind}")
    return EXIT_OK


def _render_chain(chain: Dict[str, Any]) -> str:
    first = chain["tentativas"][0]
    head = f"Tarefa {chain['id_inicial']}"
    if first["dead"]:
        head += f" (fila de mortos da tarefa {chain['cadeia_viva']})"
    elif first["pub_sub"]:
        head += " (publicação)"
    elif first["publication_id"]:
        head += f" (assinante {first['subscriber_id']} da publicação {first['publication_id']})"
    lines = [head + f": {chain['status']} após {len(chain['tentativas'])} tentativa(s)"]
    details = [("processo", first["processo"]), ("origem", first["origem"]),
               ("destino", first["destino"]), ("chave_externa", first["chave_externa"]),
               ("tenant", first["tenant"]), ("grupo_empresarial", first["grupo_empresarial"]),
               ("prioridade", first["prioridade"]),
               ("chave_unica", chain["tentativas"][-1].get("chave_unica"))]
    lines.append("  " + ", ".join(f"{k} {v}" for k, v in details if v is not None))
    for a in chain["tentativas"]:
        lines.append(f"  #{a['id']:<8} tentativa {a['tentativa']:<3} {a['status']:<11} "
                     f"{fmt_time(a['data_hora'])}  {a['mensagem'] or ''}".rstrip())
    if chain["cadeias_mortas"]:
        lines.append("  Fila de mortos: " + ", ".join(f"#{i}" for i in chain["cadeias_mortas"]))
    for s in chain["assinaturas"]:
        lines.append(f"  Assinante {s['subscriber_id']}: tarefa #{s['id']} {s['status']} "
                     f"(tentativa {s['tentativa']})")
    payload = first["payload"]
    if payload is not None:
        try:
            payload = json.dumps(json.loads(payload), ensure_ascii=False)
        except ValueError:
            pass
        lines.append(f"  payload: {short(payload, 500)}")
    return "\n".join(lines)


@guarded
def _show(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        chain = admin.show(args.id)
    emit(args, chain, "" if args.json else _render_chain(chain))
    return EXIT_OK
