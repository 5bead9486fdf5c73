"""nsj-queue dashboard: the web dashboard of nsj_queue_lib.dashboard."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 70


def register(subparsers: Any) -> None:
    # Options are the module's (python -m nsj_queue_lib.dashboard), which parses the rest.
    parser = subparsers.add_parser(
        "dashboard", add_help=False,
        help="painel web das filas (somente leitura; ações com DASHBOARD_TOKEN)")
    parser.set_defaults(handler=_dashboard, passthrough=True)


def _dashboard(args: argparse.Namespace) -> int:
    from nsj_queue_lib import dashboard

    return dashboard.main(args.extra, prog="nsj-queue dashboard")
