"""nsj-queue status / health: the commands of nsj_queue_lib.status and nsj_queue_lib.health."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 30


def register(subparsers: Any) -> None:
    # Their options are those of the modules (python -m nsj_queue_lib.status / .health),
    # which parse the rest of the line: `nsj-queue status --help` shows them.
    status = subparsers.add_parser(
        "status", add_help=False,
        help="estado da fila: tarefas por status, atrasos, em execução, mortas, pausa "
        "(--json, --watch)")
    status.set_defaults(handler=_status, passthrough=True)
    health = subparsers.add_parser(
        "health", add_help=False,
        help="verificação de saúde do worker para containers (saída 0 saudável, 1 não)")
    health.set_defaults(handler=_health, passthrough=True)


def _status(args: argparse.Namespace) -> int:
    from nsj_queue_lib import status

    return status.main(args.extra, prog="nsj-queue status")


def _health(args: argparse.Namespace) -> int:
    from nsj_queue_lib import health

    return health.main(args.extra, prog="nsj-queue health")
