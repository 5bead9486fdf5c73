"""Bridges a claimed task to the worker's code, adding the tenant connection when on."""

from __future__ import annotations

from typing import Any

from nsj_queue_lib.config import Settings
from nsj_queue_lib.db.session import TaskConnection
from nsj_queue_lib.runtime.runner import Dispatch


def make_dispatch(worker: Any, settings: Settings) -> Dispatch:
    """dispatch(tarefa, bd_conn) for the runner, from `worker.dispatch`."""

    def dispatch(tarefa: dict, bd_conn: TaskConnection) -> Any:
        return worker.dispatch(tarefa, bd_conn)

    return dispatch
