"""The DDL of a queue and its life: python -m nsj_queue_lib.db_gen <schema> <fila> [opções].

Without options it prints the DDL (idempotent: safe to apply twice).  --apply runs it,
--upgrade prints (with --apply, runs) what brings an existing queue (1.2.2 or an
earlier 2.x) to the current version, --verify lists what differs.  Options that talk
to the database read the DB_* variables.
"""

from __future__ import annotations

import contextlib
import sys
from typing import List, Optional

from nsj_queue_lib.cli.common import (
    connect_db,
    module_parser,
    print_verify,
)
from nsj_queue_lib.db import schema as schema_mod
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.exceptions import ConfigError, DatabaseUnavailable

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_CONFIG = 2


def main(argv: Optional[List[str]] = None) -> int:
    parser = module_parser(
        "db_gen",
        description="Imprime o modelo de banco (DDL) de uma fila: tabela da fila, tabela de "
        "assinantes, índices, views e, no PostgreSQL, a trigger de notificação. Nomes sem "
        "aspas viram minúsculas no PostgreSQL; entre aspas duplas mantêm maiúsculas.",
    )
    parser.add_argument("schema", help="schema do banco (ex.: public)")
    parser.add_argument("fila", help="nome da fila, que é também o nome da tabela e do canal")
    parser.add_argument("--mysql", action="store_true",
                        help="gera o dialeto MySQL/SingleStore em vez do PostgreSQL")
    parser.add_argument("--upgrade", action="store_true",
                        help="imprime o que leva a fila existente (1.2.2 ou 2.x anterior) à "
                        "versão atual; com --apply, executa (variáveis DB_*)")
    parser.add_argument("--verify", action="store_true",
                        help="compara a fila no banco com a versão atual: código 0 se igual, "
                        "1 listando as diferenças (variáveis DB_*)")
    parser.add_argument("--apply", action="store_true",
                        help="executa no banco (DB_*) em vez de só imprimir")
    args = parser.parse_args(argv)
    dialect = MYSQL if args.mysql else POSTGRES
    try:
        schema_mod.resolve_names(dialect, args.schema, args.fila)
        if args.verify and args.upgrade:
            raise ConfigError("use --verify ou --upgrade, não os dois.")
        if not (args.verify or args.upgrade or args.apply):
            sys.stdout.write(schema_mod.render(dialect, args.schema, args.fila))
            return EXIT_OK
        with contextlib.closing(connect_db(args.mysql, "nsj_queue_lib:db_gen")) as conn:
            if args.verify:
                return _verify(conn, dialect, args.schema, args.fila)
            if args.upgrade:
                stmts = (schema_mod.upgrade(conn, dialect, args.schema, args.fila) if args.apply
                         else schema_mod.upgrade_statements(conn, dialect, args.schema,
                                                            args.fila))
                if not stmts:
                    print("-- A fila já está na versão atual: nada a fazer.")
                else:
                    sys.stdout.write(schema_mod.format_statements(stmts))
                    if args.apply:
                        print("-- Aplicado.")
                return EXIT_OK
            schema_mod.apply(conn, dialect, args.schema, args.fila)
            print("-- Modelo da fila aplicado.")
            return EXIT_OK
    except (ConfigError, DatabaseUnavailable) as exc:
        print(f"Erro: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def _verify(conn, dialect, schema: str, fila: str) -> int:
    result = schema_mod.verify(conn, dialect, schema, fila)
    ok = print_verify(result, schema_mod.version_stamp(dialect),
                      f"python -m nsj_queue_lib.db_gen {schema} {fila} --upgrade --apply")
    return EXIT_OK if ok else EXIT_DIFFERENT


if __name__ == "__main__":
    sys.exit(main())
