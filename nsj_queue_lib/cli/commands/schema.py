"""nsj-queue schema print|apply|upgrade|verify: the DDL of a queue and its life cycle
(nsj_queue_lib.db.schema)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any, Iterator, Tuple

from nsj_queue_lib.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_json_option,
    add_parser,
    connect_db,
    guarded,
    print_json,
    print_verify,
)

ORDER = 10


def register(subparsers: Any) -> None:
    parser = add_parser(
        subparsers, "schema",
        help="DDL da fila: imprimir, aplicar, atualizar, verificar",
        description="O modelo de banco de uma fila: tabela da fila, de assinantes e de "
        "controle (pausa), índices, views e, no PostgreSQL, a trigger de notificação. "
        "SCHEMA e FILA vêm dos argumentos ou de QUEUE_TABLE; o dialeto, de --mysql ou "
        "DB_DRIVER.")
    sub = parser.add_subparsers(dest="schema_command", metavar="SUBCOMANDO", required=True)
    _add_command(
        sub, "print", _print, help="imprime o DDL (o mesmo do python -m nsj_queue_lib.db_gen)",
        description="Imprime o DDL da fila, idempotente (pode ser aplicado duas vezes). O "
        "schema precisa existir antes no PostgreSQL; no MySQL o DDL cria o database.\n\n"
        "exemplo:\n  nsj-queue schema print public minha_fila | psql")
    _add_command(
        sub, "apply", _apply, help="cria no banco (DB_*) os objetos da fila que ainda não existem",
        description="Executa o DDL da fila no banco das variáveis DB_*: cria o que falta, "
        "sem alterar o que existe. Para uma fila de versão anterior, use upgrade.")
    upgrade = _add_command(
        sub, "upgrade", _upgrade,
        help="atualiza no lugar uma fila existente (1.2.2 ou 2.x anterior)",
        description="Leva a fila existente à versão atual, no lugar (índices com "
        "CONCURRENTLY: workers e produtores seguem rodando); rodar de novo não faz nada. "
        "Com --imprimir, só mostra os comandos.")
    upgrade.add_argument("--imprimir", action="store_true",
                         help="só imprime os comandos, sem executar")
    verify = _add_command(
        sub, "verify", _verify,
        help="compara a fila no banco com a versão atual (saída 1 se difere)",
        description="Compara tabelas, colunas, índices, trigger, função, views e a versão "
        "gravada da fila com a versão atual. Saída 0 se iguais, 1 listando as diferenças.")
    add_json_option(verify)


def _add_command(sub: Any, name: str, handler: Any, **kwargs: Any) -> argparse.ArgumentParser:
    """A schema subcommand: its target is SCHEMA FILA (or QUEUE_TABLE) and --mysql."""
    parser = add_parser(sub, name, handler, **kwargs)
    parser.add_argument("schema", nargs="?", metavar="SCHEMA",
                        help="schema do banco (padrão: o de QUEUE_TABLE)")
    parser.add_argument("fila", nargs="?", metavar="FILA",
                        help="nome da fila = nome da tabela e do canal (padrão: a tabela de "
                        "QUEUE_TABLE)")
    parser.add_argument("--mysql", action="store_true",
                        help="dialeto MySQL/SingleStore (padrão: DB_DRIVER, ou PostgreSQL)")
    return parser


def _target(args: argparse.Namespace) -> Tuple[Any, str, str]:
    import os

    from nsj_queue_lib.config import validate_table_name
    from nsj_queue_lib.db.dialect import MYSQL, POSTGRES, dialect_for_driver
    from nsj_queue_lib.exceptions import ConfigError

    if args.mysql:
        dialect = MYSQL
    else:
        driver = (os.environ.get("DB_DRIVER") or os.environ.get("DATABASE_DRIVER") or "").strip()
        dialect = dialect_for_driver(driver.upper()) if driver else POSTGRES
    schema, fila = args.schema, args.fila
    if schema and not fila:
        raise ConfigError("schema: informe SCHEMA e FILA, ou nenhum dos dois (QUEUE_TABLE)")
    if not schema:
        table = (os.environ.get("QUEUE_TABLE") or "").strip()
        if not table:
            raise ConfigError("schema: informe SCHEMA FILA ou defina QUEUE_TABLE")
        validate_table_name(table, "QUEUE_TABLE")
        schema, _, fila = table.rpartition(".")
        schema = schema or "public"
    return dialect, schema, fila


@contextlib.contextmanager
def _target_connection(args: argparse.Namespace) -> Iterator[Tuple[Any, Any, str, str]]:
    """(connection, dialect, schema, fila) of the command's queue; names checked first."""
    from nsj_queue_lib.db import schema as schema_mod

    dialect, schema, fila = _target(args)
    schema_mod.resolve_names(dialect, schema, fila)
    with contextlib.closing(connect_db(args.mysql,
                                       "nsj_queue_lib:schema")) as conn:
        yield conn, dialect, schema, fila


@guarded
def _print(args: argparse.Namespace) -> int:
    from nsj_queue_lib.db.schema import render

    dialect, schema, fila = _target(args)
    sys.stdout.write(render(dialect, schema, fila))
    return EXIT_OK


@guarded
def _apply(args: argparse.Namespace) -> int:
    from nsj_queue_lib.db import schema as schema_mod

    with _target_connection(args) as (conn, dialect, schema, fila):
        schema_mod.apply(conn, dialect, schema, fila)
    print(f"Modelo da fila {schema}.{fila} aplicado.")
    return EXIT_OK


@guarded
def _upgrade(args: argparse.Namespace) -> int:
    from nsj_queue_lib.db import schema as schema_mod

    with _target_connection(args) as (conn, dialect, schema, fila):
        stmts = (schema_mod.upgrade_statements(conn, dialect, schema, fila) if args.imprimir
                 else schema_mod.upgrade(conn, dialect, schema, fila))
    if not stmts:
        print(f"-- A fila {schema}.{fila} já está na versão atual: nada a fazer.")
        return EXIT_OK
    sys.stdout.write(schema_mod.format_statements(stmts))
    if not args.imprimir:
        print(f"-- Fila {schema}.{fila} atualizada.")
    return EXIT_OK


@guarded
def _verify(args: argparse.Namespace) -> int:
    from nsj_queue_lib.db import schema as schema_mod

    with _target_connection(args) as (conn, dialect, schema, fila):
        result = schema_mod.verify(conn, dialect, schema, fila)
    where = f"{result.schema}.{result.fila}"
    if args.json:
        print_json({"fila": where, "ok": result.ok, "versao_gravada": result.version,
                    "versao_atual": schema_mod.version_stamp(dialect), "avisos": result.notes,
                    "diferencas": [{"tipo": d.kind, "nome": d.name, "problema": d.problem,
                                    "esperado": d.expected, "encontrado": d.actual}
                                   for d in result.differences]})
        return EXIT_OK if result.ok else EXIT_FAILED
    ok = print_verify(result, schema_mod.version_stamp(dialect),
                      f"nsj-queue schema upgrade {schema} {fila}")
    return EXIT_OK if ok else EXIT_FAILED
