"""Fixtures of the pub/sub tests: local HTTP server, subscribers, in-process fan-out."""

from __future__ import annotations

import json
import socket
from typing import Any, Optional

import pytest

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession, TaskConnection


@pytest.fixture
def refused_url() -> str:
    """A local URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/ninguem"


def add_subscriber(queue: Any, sub_id: str, processo: str = "proc", *,
                   tenant: Optional[int] = None, grupo: Optional[str] = None,
                   url: Optional[str] = None, method: Optional[str] = None,
                   headers: Any = None, ativo: bool = True) -> None:
    queue.sql(
        f"INSERT INTO {queue.sub_table} (id, tenant, grupo_empresarial, processo, url, "
        "http_method, headers, ativo) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (sub_id, tenant, grupo, processo, url, method,
         None if headers is None else json.dumps(headers), ativo))


def publish(queue: Any, payload: Any, processo: str = "proc", **kwargs: Any) -> int:
    """Insert a publication (committed) through QueueClient.insert_task_pub_sub."""
    return queue.client().insert_task_pub_sub("teste", "teste", processo,
                                              kwargs.pop("chave_externa", None), payload,
                                              **kwargs)


def settings_for(queue: Any, **extra: Any) -> Settings:
    return Settings.from_env(queue.env(**extra), load_dotenv=False)


def run_in_process(queue: Any, worker: Any, task_id: int, multi_db_conn: Any = None) -> Any:
    """Dispatch one task in-process inside a transaction that is rolled back afterwards
    unless the call succeeds (returns the result; raises what the worker raised)."""
    session = DbSession(queue.server.connect())
    try:
        repo = TaskRepository(session, queue.table, queue.sub_table)
        tarefa = repo.task_get(task_id)
        with session.transaction():
            return worker.dispatch(tarefa, TaskConnection(session), multi_db_conn)
    finally:
        session.close()
