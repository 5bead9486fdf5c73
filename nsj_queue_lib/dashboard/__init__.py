"""Web dashboard: python -m nsj_queue_lib.dashboard [--porta N] [--host H].

Every queue table of the configured database (DB_*) with its waiting and
running tasks, the last hour's throughput as an inline SVG chart, the oldest
due task, the dead letters with their last error and each chain with all its
attempts.  Server-side HTML from the standard library: no JavaScript, no CDN,
usable on a phone.  Listens on DASHBOARD_BIND_HOST (loopback by default),
port DASHBOARD_PORT (8090); answers only requests whose Host is a loopback name,
the bind host or one of DASHBOARD_ALLOWED_HOSTS (DNS rebinding).  Read-only unless
DASHBOARD_TOKEN is set; then an operator who signs in with the token can redrive a
failed or dead chain (listed among the recent failures), cancel a waiting task and
pause or resume a queue (QueueAdmin, the same
operations as the command line).

Exit codes: 0 after Ctrl-C/SIGTERM, 2 configuration error (or port in use).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, List, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError

logger = logging.getLogger(__name__)


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    from nsj_queue_lib.cli.common import module_parser

    parser = module_parser(
        "dashboard", prog=prog,
        description="Painel web das filas do banco configurado (DB_*): contagens, vazão da "
        "última hora, devida mais antiga, fila de mortos e cadeias. Somente leitura, a não ser "
        "que DASHBOARD_TOKEN esteja definido: então quem entrar com o token pode reenfileirar, "
        "cancelar e pausar/retomar filas.",
        epilog="códigos de saída: 0 parado por Ctrl-C/SIGTERM; 2 configuração inválida ou "
        "porta ocupada.")
    parser.add_argument("--porta", type=int, default=None,
                        help="porta (padrão: DASHBOARD_PORT ou 8090)")
    parser.add_argument("--host", default=None,
                        help="interface (padrão: DASHBOARD_BIND_HOST ou 127.0.0.1, só "
                        "loopback)")
    parser.add_argument("--hosts-permitidos", default=None, metavar="NOMES",
                        help="nomes (separados por vírgula; *.dominio para subdomínios) pelos "
                        "quais o painel é acessado, além de localhost, 127.0.0.1, ::1 e do "
                        "endereço de --host (padrão: DASHBOARD_ALLOWED_HOSTS)")
    return parser


def run(args: Any) -> int:
    """Serve until SIGTERM/SIGINT; the exit code."""
    from nsj_queue_lib.dashboard.server import DashboardServer
    from nsj_queue_lib.observability.logging_setup import configure_logging
    from nsj_queue_lib.runtime.signals import on_stop_signals

    try:
        settings = Settings.from_env(require=("db",))
        hosts = getattr(args, "hosts_permitidos", None)
        server = DashboardServer(settings, host=args.host, port=args.porta,
                                 allowed_hosts=None if hosts is None else hosts.split(","))
        server.bind()
    except ConfigError as exc:
        print(f"Erro: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)

    def _stop(signum: int) -> None:
        raise KeyboardInterrupt  # ends serve_forever() below, in the main thread

    restore = on_stop_signals(_stop)
    mode = "ações habilitadas (DASHBOARD_TOKEN)" if server.auth.enabled else "somente leitura"
    logger.info("Painel em http://%s:%s/ (%s; Host aceitos: %s)", server.host, server.port,
                mode, server.allowed)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        restore()
    return 0


def main(argv: Optional[List[str]] = None, prog: Optional[str] = None) -> int:
    return run(build_parser(prog).parse_args(argv))
