"""Entry point of the socket server: ``python -m nsj_queue_lib.server.server_main``.

It reads the settings from the environment (DB_*, QUEUE_NAME, QUEUE_TABLE and
the client/server variables), checks the queue table for due tasks every
CHECK_TASKS_INTERVAL seconds, and serves until SIGTERM or SIGINT, when it stops
gracefully (listeners and client connections closed, threads joined).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any, Callable, List, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError, DatabaseRefused
from nsj_queue_lib.observability.logging_setup import configure_logging
from nsj_queue_lib.runtime.signals import on_stop_signals
from nsj_queue_lib.server.core import Server

logger = logging.getLogger(__name__)



class DatabaseDueCheck:
    """`has_due_tasks` and `due_candidates` backed by the queue repository (one
    connection, one statement at a time); reopens it after a failure."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._repository: Any = None
        self._mutex = threading.Lock()

    def __call__(self) -> bool:
        return bool(self._query(lambda repo: repo.task_has_due()))

    def candidates(self, limit: int) -> List[int]:
        """Ids of due tasks in claim order (the workers' own candidates query)."""
        return self._query(lambda repo: repo.task_claim_candidates(limit))

    def _query(self, run: Callable[[Any], Any]) -> Any:
        with self._mutex:
            if self._repository is None:
                from nsj_queue_lib.engine.select import open_repository

                self._repository = open_repository(self._settings)
            try:
                return run(self._repository)
            except Exception:
                self.close()
                raise

    def close(self) -> None:
        # Called under the mutex by _query, and alone at the end.
        repository, self._repository = self._repository, None
        if repository is not None:
            repository.session.close()


def _database_accepts(check: DatabaseDueCheck) -> bool:
    """False (after one clear line) when the database refuses the configured user,
    password or database at start: a configuration error.  A database merely down
    is waited for by the check thread, as before."""
    try:
        check()
    except DatabaseRefused as exc:
        logger.error("%s", exc)
        check.close()
        return False
    except Exception:  # down, or the table not there yet: the check thread reports it
        check.close()
    return True


def serve(server: Server, *, install_signals: bool = True,
          on_ready: Optional[Callable[[Server], None]] = None) -> int:
    """Start `server`, block until SIGTERM/SIGINT (or `server.stop()`), then stop it.

    Returns the process exit code: 0 after a graceful stop, 1 if a port could
    not be bound.
    """
    stop_requested = threading.Event()

    def _on_signal(signum: int) -> None:
        logger.info("Sinal %s recebido; encerrando.", signal.Signals(signum).name)
        stop_requested.set()

    restore = on_stop_signals(_on_signal) if install_signals else (lambda: None)
    try:
        try:
            server.start()
        except OSError as exc:
            logger.error("Não foi possível abrir as portas do servidor (%s:%d e %s:%d): %s",
                         server.host, server.notify_port, server.host, server.lock_port, exc)
            return 1
        if on_ready is not None:
            on_ready(server)
        while not stop_requested.wait(0.5):
            if server.wait(0):
                break
        server.stop()
        return 0
    finally:
        restore()


def run(settings: Settings, has_due_tasks: Optional[Callable[[], bool]] = None, *,
        install_signals: bool = True) -> int:
    """Serve the queue of `settings` until a stop signal; the default check uses the DB."""
    check = has_due_tasks if has_due_tasks is not None else DatabaseDueCheck(settings)
    address = settings.server_bind_address
    if not settings.server_auth_token and address not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("Servidor escutando em %s sem SERVER_AUTH_TOKEN: qualquer host que "
                       "alcance as portas pode pegar locks ou enviar HALT", address)
    if isinstance(check, DatabaseDueCheck) and not _database_accepts(check):
        return 2
    try:
        server = Server.from_settings(
            settings, check,
            due_candidates=check.candidates if isinstance(check, DatabaseDueCheck) else None)
    except ConfigError as exc:  # e.g. an unreadable TLS certificate or key
        logger.error("%s", exc)
        if isinstance(check, DatabaseDueCheck):
            check.close()
        return 2
    endpoint = None
    try:
        if settings.metrics_port:  # opt-in /metrics and /healthz
            from nsj_queue_lib.observability.metrics import server_endpoint

            endpoint = server_endpoint(settings, server)
            try:
                endpoint.start()
            except ConfigError as exc:
                logger.error("%s", exc)
                return 2
        return serve(server, install_signals=install_signals)
    finally:
        if endpoint is not None:
            endpoint.stop()
        if isinstance(check, DatabaseDueCheck):
            check.close()


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point (also `nsj-queue server`)."""

    from nsj_queue_lib.cli.common import ArgumentParser, HelpFormatter, portuguese

    parser = ArgumentParser(
        add_help=False, formatter_class=HelpFormatter,
        prog="python -m nsj_queue_lib.server.server_main",
        description="Servidor de filas do modo cliente/servidor (MySQL, MariaDB, "
        "SingleStore): notificações na porta NOTIFY_SERVICE_PORT e locks na "
        "LOCK_SERVICE_PORT para os workers da fila QUEUE_TABLE. Configuração pelas "
        "variáveis DB_*, QUEUE_* e SERVER_* (ver .env.dist). Para com SIGTERM/SIGINT. "
        "Saída 2: configuração inválida.")
    portuguese(parser, version=True)
    parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"nsj_queue_lib server: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())

# 1.2.2 names (importable; using them says what replaces them).
from nsj_queue_lib.compat.removed import removed_class  # noqa: E402

ServerMain = removed_class(
    __name__, "ServerMain",
    "rode python -m nsj_queue_lib.server.server_main")
WorkerRecord = removed_class(__name__, "WorkerRecord", "estado interno do servidor novo")
WorkerStatus = removed_class(__name__, "WorkerStatus", "estado interno do servidor novo")
