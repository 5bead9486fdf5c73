"""nsj-queue status / health: the commands of nsj_queue_lib.observability.status and .health."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.cli.common import add_passthrough

ORDER = 30


def register(subparsers: Any) -> None:
    # Their options are those of the modules (python -m nsj_queue_lib.status / .health),
    # which parse the rest of the line: `nsj-queue status --help` shows them.
    add_passthrough(
        subparsers, "status", "observability.status",
        help="estado da fila: tarefas por status, atrasos, em execução, mortas, pausa, "
        "modo de frota mista com a 1.2.2 (--json, --watch)")
    add_passthrough(
        subparsers, "health", "observability.health",
        help="verificação de saúde do worker para containers (saída 0 saudável, 1 não)")
