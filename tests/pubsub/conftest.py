"""Fixtures of the pub/sub tests: local HTTP server, subscribers, in-process fan-out."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from nsj_queue_lib.db.repository import TaskRepository
from nsj_queue_lib.db.session import DbSession, TaskConnection


@pytest.fixture
def refused_url() -> str:
    """A local URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/ninguem"





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
