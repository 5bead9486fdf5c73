"""Print the DDL of a queue: python -m nsj_queue_lib.db_gen <schema> <fila> [--mysql]."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from nsj_queue_lib.cli.common import HelpFormatter, portuguese
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.schema import render_schema
from nsj_queue_lib.exceptions import ConfigError


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        add_help=False, formatter_class=HelpFormatter,
        prog="python -m nsj_queue_lib.db_gen",
        description="Imprime o modelo de banco (DDL) de uma fila: tabela da fila, tabela de "
        "assinantes, índices e, no PostgreSQL, a trigger de notificação.",
    )
    parser.add_argument("schema", help="schema do banco (ex.: public)")
    parser.add_argument("fila", help="nome da fila, que é também o nome da tabela e do canal")
    parser.add_argument("--mysql", action="store_true",
                        help="gera o dialeto MySQL/SingleStore em vez do PostgreSQL")
    portuguese(parser, version=True)
    args = parser.parse_args(argv)
    try:
        ddl = render_schema(MYSQL if args.mysql else POSTGRES, args.schema, args.fila)
    except ConfigError as exc:
        print(f"Erro: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(ddl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
