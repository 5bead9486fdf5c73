"""nsj-queue subscriber ...: the queue's subscriptions, their secrets and delivery log."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any, Callable

from nsj_queue_lib.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_parser,
    add_queue_options,
    emit,
    fmt_time,
    guarded,
    open_admin,
    operator,
    positive_int,
    print_json,
    short,
)
from nsj_queue_lib.exceptions import ConfigError, NsjQueueError

ORDER = 45


def _command_errors(func: Callable[[argparse.Namespace], int]
                    ) -> Callable[[argparse.Namespace], int]:
    """The library's refusals (invalid secret, subscription exists...) as one line, exit 1."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except ConfigError:
            raise
        except NsjQueueError as exc:
            from nsj_queue_lib.admin import InvalidTaskState, NotFoundException

            if isinstance(exc, (NotFoundException, InvalidTaskState)):
                raise
            print(f"Erro: {exc}", file=sys.stderr)
            return EXIT_FAILED

    return guarded(wrapper)


def register(subparsers: Any) -> None:
    parser = add_parser(
        subparsers, "subscriber", help="assinaturas da fila: criar, listar, ativar, segredos, "
        "entregas", description="Assinaturas (tabela QUEUE_SUBSCRIBER_TABLE, padrão "
        "<fila>_subscriber) de uma fila pub/sub.")
    sub = parser.add_subparsers(dest="subscriber_command", metavar="SUBCOMANDO", required=True)

    add = add_parser(sub, "add", _add, help="cria uma assinatura (webhook com --url, senão "
                     "método @Subscriber)", description="Cria a assinatura ID do processo P. "
                     "Com --url é um webhook (método POST por padrão); sem --url, é tratada "
                     "por um método @Subscriber('ID'). Um segredo gerado é mostrado uma vez.")
    add.add_argument("id", metavar="ID")
    add.add_argument("--processo", required=True)
    add.add_argument("--url")
    add.add_argument("--method", default="POST", help="GET, POST, PUT ou DELETE (padrão POST)")
    add.add_argument("--header", action="append", default=[], metavar="NOME=VALOR")
    add.add_argument("--tenant", type=int)
    add.add_argument("--grupo-empresarial", dest="grupo")
    secret = add.add_mutually_exclusive_group()
    secret.add_argument("--secret", help="segredo whsec_... (Standard Webhooks)")
    secret.add_argument("--generate-secret", action="store_true",
                        help="gera um segredo e o mostra uma vez")
    add_queue_options(add)

    add_parser(sub, "list", _list, queue=True, help="lista as assinaturas (sem segredos)")
    for name, handler, text in (("enable", _enable, "ativa"), ("disable", _disable, "desativa"),
                                ("remove", _remove, "remove")):
        p = add_parser(sub, name, handler, help=f"{text} a assinatura ID")
        p.add_argument("id", metavar="ID")
        add_queue_options(p)
    rot = add_parser(sub, "rotate-secret", _rotate, help="troca o segredo; o anterior assina "
                     "junto durante --overlap", description="Gera um novo segredo (mostrado "
                     "uma vez). O anterior continua assinando ao lado dele durante --overlap "
                     "(padrão 24h), para o receptor trocar sem perder entregas.")
    rot.add_argument("id", metavar="ID")
    rot.add_argument("--overlap", default="24h", help="ex.: 24h, 30m, 0 (padrão 24h)")
    add_queue_options(rot)
    add_parser(sub, "reencrypt", _reencrypt, queue=True,
               help="cifra de novo os segredos com a primeira chave de WEBHOOK_SECRETS_KEY")
    add_parser(sub, "generate-key", _generate_key, help="gera uma chave para "
               "WEBHOOK_SECRETS_KEY (requer o extra webhook-crypto)")
    dl = add_parser(sub, "deliveries", _deliveries, help="últimas entregas de uma assinatura "
                    "(status HTTP, duração, início da resposta)")
    dl.add_argument("id", metavar="ID")
    dl.add_argument("--limite", type=positive_int, default=20)
    add_queue_options(dl)
    rd = add_parser(sub, "redeliver", _redeliver, help="entrega de novo a publicação de uma "
                    "entrega do registro (ENTREGA: o id em 'deliveries')")
    rd.add_argument("delivery_id", metavar="ENTREGA", type=positive_int)
    add_queue_options(rd)


@_command_errors
def _add(args: argparse.Namespace) -> int:
    from nsj_queue_lib.pubsub.subscribers import parse_headers

    with open_admin(args) as admin:
        secret = admin.subscriber_add(args.id, args.processo, args.url, args.method,
                                      parse_headers(args.header) or None, args.secret,
                                      args.generate_secret, args.tenant, args.grupo)
    data = {"id": args.id, "secret": secret}
    text = f"Assinatura {args.id} criada."
    if secret:
        text += (f"\nSegredo (mostrado só agora; entregue-o ao receptor): {secret}")
    emit(args, data, text)
    return EXIT_OK


@_command_errors
def _list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        rows = admin.subscriber_list()
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print("Nenhuma assinatura.")
        return EXIT_OK
    print(f"{'ID':<20} {'PROCESSO':<20} {'ATIVA':<5} {'ASSINA':<6} {'DISJUNTOR':<11} "
          "DESTINO")
    for r in rows:
        target = f"{r['http_method']} {r['url']}" if r["url"] else "@Subscriber"
        if r["headers"]:
            target += " headers: " + ", ".join(f"{k}={v}" for k, v in r["headers"].items())
        print(f"{short(r['id'], 20):<20} {short(r['processo'], 20):<20} "
              f"{'sim' if r['ativo'] else 'não':<5} {'sim' if r['assinada'] else 'não':<6} "
              f"{r['disjuntor'] or '-':<11} {short(_safe_url(target), 100)}")
    return EXIT_OK


def _safe_url(text: str) -> str:
    from nsj_queue_lib.text import redact_urls_in_text

    return redact_urls_in_text(text)


def _simple(method: str, done: str) -> Callable[[argparse.Namespace], int]:
    @_command_errors
    def handler(args: argparse.Namespace) -> int:
        with open_admin(args) as admin:
            getattr(admin, method)(args.id)
        emit(args, {"id": args.id}, f"Assinatura {args.id} {done}.")
        return EXIT_OK

    return handler


_enable = _simple("subscriber_enable", "ativada")
_disable = _simple("subscriber_disable", "desativada")
_remove = _simple("subscriber_remove", "removida")


@_command_errors
def _rotate(args: argparse.Namespace) -> int:
    from nsj_queue_lib.pubsub.subscribers import parse_duration

    overlap = parse_duration(args.overlap)
    with open_admin(args) as admin:
        signed = any(r["id"] == args.id and r["assinada"] for r in admin.subscriber_list())
        secret = admin.subscriber_rotate_secret(args.id, overlap)
    text = f"Novo segredo de {args.id} (mostrado só agora): {secret}\n"
    if signed:
        text += f"O anterior continua assinando junto por {args.overlap}."
    else:
        text += "A assinatura não tinha segredo: as entregas passam a ser assinadas com este."
    emit(args, {"id": args.id, "secret": secret, "overlap_seconds": overlap if signed else 0},
         text)
    return EXIT_OK


@_command_errors
def _reencrypt(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        count = admin.subscriber_reencrypt()
    emit(args, {"reencrypted": count}, f"{count} assinatura(s) com segredos cifrados de novo.")
    return EXIT_OK


@_command_errors
def _generate_key(args: argparse.Namespace) -> int:
    from nsj_queue_lib.pubsub.secret_store import generate_key

    print(generate_key())
    return EXIT_OK


@_command_errors
def _deliveries(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        rows = admin.subscriber_deliveries(args.id, args.limite)
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print(f"Nenhuma entrega registrada para {args.id}.")
        return EXIT_OK
    print(f"{'ENTREGA':>8} {'TAREFA':>8} {'TENT':>4} {'OK':<3} {'HTTP':>4} {'MS':>6} "
          f"{'DATA/HORA':<19} RESPOSTA / ERRO")
    for r in rows:
        print(f"{r['id']:>8} {r['tarefa_id']:>8} {r['tentativa']:>4} "
              f"{'sim' if r['sucesso'] else 'não':<3} {r['status_http'] or '-':>4} "
              f"{r['duracao_ms'] if r['duracao_ms'] is not None else '-':>6} "
              f"{fmt_time(r['data_hora']):<19} {short(r['resposta'] or r['erro'] or '', 80)}")
    return EXIT_OK


@_command_errors
def _redeliver(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        new_id = admin.subscriber_redeliver(args.delivery_id, operator())
    emit(args, {"delivery_id": args.delivery_id, "id": new_id},
         f"Entrega {args.delivery_id} reenfileirada como tarefa {new_id}.")
    return EXIT_OK
