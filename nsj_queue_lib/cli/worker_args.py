"""--help and --version for worker scripts (`python meu_worker.py --help` must not start
a worker).  Other arguments are left to the script, as in the original library."""

from __future__ import annotations

import inspect
import os
import sys
from typing import Optional, Sequence

from nsj_queue_lib.version import __version__

WORKER_HELP_EPILOG = """\
Configuração: variáveis DB_*, QUEUE_NAME, QUEUE_TABLE e as opcionais do .env.dist (ou .env).
Para com SIGTERM/SIGINT, esperando a tarefa em curso.
Códigos de saída: 0 parada normal; 2 configuração inválida.
O mesmo worker pode ser iniciado com: nsj-queue worker MODULO:CLASSE"""


def handle_worker_argv(cls: type, argv: Sequence[str], prog: Optional[str] = None) -> None:
    """Print help or version and exit 0 when asked; otherwise return (start the worker)."""
    if not any(a in ("-h", "--help", "--version") for a in argv):
        return
    from nsj_queue_lib.cli.common import ArgumentParser, HelpFormatter, portuguese

    doc = inspect.getdoc(cls) or ""
    summary = doc.split("\n\n")[0] if doc else ""
    parser = ArgumentParser(
        prog=prog or _prog(), formatter_class=HelpFormatter, add_help=False,
        description=f"Worker {cls.__qualname__} do nsj-queue-lib: executa as tarefas da fila "
        f"QUEUE_TABLE.\n{summary}".rstrip(), epilog=WORKER_HELP_EPILOG)
    portuguese(parser)
    parser.add_argument("--version", action="version", help="mostra a versão e sai",
                        version=f"%(prog)s (nsj-queue-lib {__version__})")
    parser.parse_known_args(list(argv))  # exits after printing


def _prog() -> str:
    """How the script was started: `python -m package.module` or the script's name."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return f"python -m {spec.name}"
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "worker"
