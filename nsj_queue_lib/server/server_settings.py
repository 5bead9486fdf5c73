"""1.2.2's server settings module: each name is read from the environment on first use."""

from __future__ import annotations

from typing import Any

_FIELDS = {"MAX_CLIENT_THREADS": "max_client_threads",
           "CHECK_TASKS_INTERVAL": "check_tasks_interval",
           "LOCK_SERVICE_WAIT_CONN_INTERVAL": "lock_service_wait_conn_interval"}


def __getattr__(name: str) -> Any:
    if name not in _FIELDS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from nsj_queue_lib.settings import _settings

    return getattr(_settings(), _FIELDS[name])
