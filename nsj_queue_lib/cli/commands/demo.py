"""nsj-queue demo: workers consuming a real queue (nsj_queue_lib.demo)."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 90


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", add_help=False,
        help="demonstração: cria uma fila, inicia workers e processa 1.000 tarefas "
        "(PostgreSQL de DB_* ou embutido; pip install \"nsj-queue-lib[demo]\")")
    parser.set_defaults(handler=_demo, passthrough=True)


def _demo(args: argparse.Namespace) -> int:
    from nsj_queue_lib import demo

    return demo.main(args.extra, prog="nsj-queue demo")
