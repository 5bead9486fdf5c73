"""nsj-queue worker / webhook / server: run the long-lived processes."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from typing import Any

from nsj_queue_lib.cli.common import EXIT_CONFIG, add_parser

ORDER = 20

WORKER_EPILOG = """\
exemplos:
  nsj-queue worker meu_worker:MeuWorker      # meu_worker.py no diretório atual
  nsj-queue worker meu_pacote.workers        # o único WorkerBase definido no módulo

Variáveis: DB_*, QUEUE_NAME, QUEUE_TABLE e as opcionais do .env.dist.
Para com SIGTERM/SIGINT (espera a tarefa em curso) ou NOTIFY "<fila>", 'HALT'."""


def register(subparsers: Any) -> None:
    worker = add_parser(
        subparsers, "worker", _worker, help="executa um worker: nsj-queue worker MODULO:CLASSE",
        epilog=WORKER_EPILOG,
        description="Executa o worker CLASSE (subclasse de WorkerBase ou WorkerPubSubBase) "
        "do MODULO até SIGTERM/SIGINT ou HALT. Saída 2 se a configuração é inválida.")
    worker.add_argument("alvo", metavar="MODULO:CLASSE",
                        help="módulo importável (o diretório atual entra no caminho) e a "
                        "classe; sem :CLASSE, a única subclasse de WorkerBase do módulo")
    add_parser(
        subparsers, "webhook", _webhook,
        help="executa o worker de webhooks (chama a url de cada assinatura)",
        description="Executa o worker de webhooks (python -m nsj_queue_lib.worker_webhook): "
        "cada tarefa de assinante vira uma chamada HTTP à url da assinatura. Precisa de "
        "QUEUE_SUBSCRIBER_TABLE.")
    add_parser(
        subparsers, "server", _server,
        help="executa o servidor de filas (modo cliente/servidor, MySQL)",
        description="Executa o servidor de filas do modo cliente/servidor "
        "(python -m nsj_queue_lib.server.server_main): notificações na porta "
        "NOTIFY_SERVICE_PORT e locks na LOCK_SERVICE_PORT, um servidor por fila.")


def load_worker_class(target: str) -> type:
    """The worker class named by 'module:Class' (or 'module' with one worker class)."""
    from nsj_queue_lib.exceptions import ConfigError
    from nsj_queue_lib.worker_base import WorkerBase

    module_name, _, class_name = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"worker: não foi possível importar o módulo '{module_name}': "
                          f"{exc}") from exc
    if class_name:
        cls = getattr(module, class_name, None)
        if not (inspect.isclass(cls) and issubclass(cls, WorkerBase)):
            raise ConfigError(f"worker: '{class_name}' não é uma subclasse de WorkerBase em "
                              f"'{module_name}'")
        return cls
    found = [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, WorkerBase)
             and c.__module__ == module.__name__ and not inspect.isabstract(c)]
    if len(found) != 1:
        names = ", ".join(sorted(c.__name__ for c in found)) or "nenhuma"
        raise ConfigError(f"worker: indique a classe (MODULO:CLASSE); subclasses de "
                          f"WorkerBase em '{module_name}': {names}")
    return found[0]


def _worker(args: argparse.Namespace) -> int:
    from nsj_queue_lib.exceptions import ConfigError

    try:
        cls = load_worker_class(args.alvo)
    except ConfigError as exc:
        print(f"Erro: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return _run(cls)


def _run(cls: type) -> int:
    try:
        cls().run(argv=[])
    except SystemExit as exc:  # WorkerBase.run exits with the worker's non-zero code
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def _webhook(args: argparse.Namespace) -> int:
    from nsj_queue_lib.worker_webhook import WorkerWebhook

    return _run(WorkerWebhook)


def _server(args: argparse.Namespace) -> int:
    from nsj_queue_lib.server import server_main

    return server_main.main([])
