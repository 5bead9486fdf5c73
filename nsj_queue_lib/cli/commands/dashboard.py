"""nsj-queue dashboard: the web dashboard of nsj_queue_lib.dashboard."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.cli.common import add_passthrough

ORDER = 70


def register(subparsers: Any) -> None:
    # Options are the module's (python -m nsj_queue_lib.dashboard), which parses the rest.
    add_passthrough(subparsers, "dashboard", "dashboard",
                    help="painel web das filas (somente leitura; ações com DASHBOARD_TOKEN)")
