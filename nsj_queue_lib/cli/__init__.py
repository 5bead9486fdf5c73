"""The `nsj-queue` command (also `python -m nsj_queue_lib`).

Each subcommand lives in one module of `nsj_queue_lib.cli.commands`, found at start-up:
a module defines `ORDER` (its place in the help) and `register(subparsers)`, which adds
its parser(s) and sets `handler` (a function of the parsed arguments returning the exit
code).  Adding a subcommand is adding one file there.

The package also holds the operator's and developer's tools that have their own
`python -m` entry: db_gen (the DDL of a queue; 1.2.2's `python -m nsj_queue_lib.db_gen`
runs it), demo (`nsj-queue demo`, `make demo`) and devdb (a PostgreSQL for development:
the one of DB_* or an embedded one, for the demo, the tests and the benchmarks).  The
dashboard is its own package (nsj_queue_lib.dashboard); status and health are in
nsj_queue_lib.observability.

Exit codes: 0 success; 1 the operation failed (database unavailable, task not found or
not in a state the command applies to, unhealthy worker, schema with differences);
2 invalid usage or configuration.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from types import ModuleType
from typing import List, Optional

from nsj_queue_lib.cli.common import (
    EXIT_CONFIG,
    ArgumentParser,
    HelpFormatter,
    load_env_file,
    portuguese,
)

EPILOG = """\
códigos de saída:
  0  sucesso
  1  a operação falhou (banco indisponível, tarefa inexistente ou em estado que não
     permite a operação, worker não saudável, schema com diferenças)
  2  uso ou configuração inválidos (argumento, variável DB_*/QUEUE_* ausente ou inválida)

Configuração: variáveis de ambiente DB_* e QUEUE_* (ou um arquivo .env; ver .env.dist).
Ajuda de um comando: nsj-queue COMANDO --help"""


def _command_modules() -> List[ModuleType]:
    from nsj_queue_lib.cli import commands

    modules = [importlib.import_module(f"{commands.__name__}.{info.name}")
               for info in pkgutil.iter_modules(commands.__path__) if not info.name.startswith("_")]
    return sorted(modules, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))


def build_parser(prog: str = "nsj-queue") -> argparse.ArgumentParser:
    """The parser with every subcommand of nsj_queue_lib.cli.commands."""
    parser = ArgumentParser(
        prog=prog, formatter_class=HelpFormatter, epilog=EPILOG, add_help=False,
        description="Opera filas do nsj-queue-lib: schema, workers, servidor de filas, "
        "estado, tarefas (listar, ver, reenfileirar, cancelar) e pausa.")
    portuguese(parser, version=True)
    parser.add_argument("--env-file", metavar="ARQUIVO",
                        help="lê as variáveis deste arquivo .env (sem sobrescrever as do "
                        "ambiente); padrão: o .env encontrado a partir do diretório atual")
    subparsers = parser.add_subparsers(dest="command", metavar="COMANDO", title="comandos")
    for module in _command_modules():
        module.register(subparsers)
    return parser


def main(argv: Optional[List[str]] = None, prog: str = "nsj-queue") -> int:
    """Run the command line; return the exit code."""
    parser = build_parser(prog)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"argumentos não reconhecidos: {' '.join(extra)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_CONFIG
    args.extra = extra
    code = load_env_file(args.env_file)
    if code:
        return code
    return int(args.handler(args) or 0)


def console_main() -> None:
    """Console-script entry point (`nsj-queue`)."""
    sys.exit(main())
