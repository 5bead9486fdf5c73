"""nsj-queue schema print|apply|upgrade|verify: the DDL of a queue and its life cycle."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Tuple

from nsj_queue_lib.cli.common import EXIT_OK, HelpFormatter, add_parser, guarded

ORDER = 10


def register(subparsers: Any) -> None:
    parser = add_parser(
        subparsers, "schema", formatter_class=HelpFormatter,
        help="DDL da fila: imprimir, aplicar, atualizar, verificar",
        description="O modelo de banco de uma fila.")
    sub = parser.add_subparsers(dest="schema_command", metavar="SUBCOMANDO", required=True)
    show = add_parser(
        sub, "print", help="imprime o DDL (mesma saída do python -m nsj_queue_lib.db_gen)",
        formatter_class=HelpFormatter,
        description="Imprime o DDL da fila: tabela da fila, tabela de assinantes, tabela de "
        "controle (pausa), índices, trigger de notificação (PostgreSQL) e views. O schema "
        "(ou database, no MySQL) precisa existir antes de aplicá-lo, exceto no MySQL, em "
        "que o DDL o cria.\n\nexemplo:\n  nsj-queue schema print public minha_fila | psql")
    _add_target(show)
    show.set_defaults(handler=_print)


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("schema", nargs="?", help="schema do banco (padrão: o de QUEUE_TABLE)")
    parser.add_argument("fila", nargs="?", help="nome da fila = nome da tabela e do canal "
                        "(padrão: a tabela de QUEUE_TABLE)")
    parser.add_argument("--mysql", action="store_true",
                        help="dialeto MySQL/SingleStore (padrão: DB_DRIVER, ou PostgreSQL)")


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


@guarded
def _print(args: argparse.Namespace) -> int:
    from nsj_queue_lib.db.schema import render_schema

    dialect, schema, fila = _target(args)
    sys.stdout.write(render_schema(dialect, schema, fila))
    return EXIT_OK
