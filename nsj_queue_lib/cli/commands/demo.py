"""nsj-queue demo: workers consuming a real queue (nsj_queue_lib.cli.demo)."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.cli.common import add_passthrough

ORDER = 90


def register(subparsers: Any) -> None:
    add_passthrough(
        subparsers, "demo", "cli.demo",
        help="demonstração: cria uma fila, inicia workers e processa 1.000 tarefas "
        "(PostgreSQL de DB_* ou embutido; pip install \"nsj-queue-lib[demo]\")")
