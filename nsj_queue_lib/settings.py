"""1.2.2's `nsj_queue_lib.settings`, as a facade.

1.2.2 read the environment when this module was imported; 2.x reads it when a worker
starts (`nsj_queue_lib.config.Settings.from_env`).  The old names still work: each
setting is read from the environment (and `.env`) on first access, with 2.x's
defaults and validation.  `logger` is the library's worker logger (its example workers
did `from nsj_queue_lib.settings import logger`).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any, List

logger = logging.getLogger("nsj_queue_lib.worker")
log_format = logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s")
console_handler = logging.StreamHandler()
console_handler.setFormatter(log_format)

GLOBAL_RUN = True
END_MARK = "###END###"
SOCKET_BUFFER_SIZE = 1024

_FIELDS = {
    "DB_HOST": "db_host", "DB_PORT": "db_port", "DB_BASE": "db_name", "DB_USER": "db_user",
    "DB_PASS": "db_pass", "DB_DRIVER": "db_driver", "QUEUE_NAME": "queue_name",
    "QUEUE_TABLE": "queue_table", "QUEUE_SUBSCRIBER_TABLE": "queue_subscriber_table",
    "QUEUE_MAX_RETRY": "queue_max_retry",
    "QUEUE_BASE_INTERVAL_RETRY": "queue_base_interval_retry",
    "QUEUE_MINUTE_RETRY_THREAD": "queue_minute_retry_thread",
    "QUEUE_MINUTE_PURGE_THREAD": "queue_minute_purge_thread",
    "QUEUE_MINUTE_NOTIFY_THREAD": "queue_minute_notify_thread",
    "QUEUE_PURGE_MAX_AGE": "queue_purge_max_age", "QUEUE_PURGE_LIMIT": "queue_purge_limit",
    "QUEUE_PURGE_ROUND_LIMIT": "queue_purge_round_limit",
    "QUEUE_WAIT_NOTIFY_INTERVAL": "queue_wait_notify_interval",
    "DEFAULT_WEBHOOK_TIMEOUT": "default_webhook_timeout", "ENV": "env",
    "GRAFANA_URL": "grafana_url", "LOG_DEBUG": "log_debug",
    "CLIENT_SERVER_MODE": "client_server_mode", "SERVER_HOST": "server_host",
    "NOTIFY_SERVICE_PORT": "notify_service_port", "LOCK_SERVICE_PORT": "lock_service_port",
    "TIMEOUT_SOCKET_MESSAGE": "timeout_socket_message", "MULTI_DATABASE": "multi_database",
    "MULTI_DATABASE_USER": "multi_database_user",
    "MULTI_DATABASE_PASSWORD": "multi_database_password",
    "MULTI_DATABASE_CLIENT_ID": "multi_database_client_id",
    "MULTI_DATABASE_API_CREDETIALS_URL": "multi_database_api_credentials_url",
    "OAUTH_TOKEN_URL": "oauth_token_url",
}


@lru_cache(maxsize=1)
def _settings() -> Any:
    from nsj_queue_lib.config import Settings

    return Settings.from_env(require=())


def __getattr__(name: str) -> Any:
    if name == "WORKER_NAME":
        return f"{_settings().queue_name}_WORKER"
    field = _FIELDS.get(name)
    if field is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_settings(), field)
    if isinstance(value, frozenset):  # minute lists were comma-separated text in 1.2.2
        return ",".join(str(m) for m in sorted(value))
    return value


def __dir__() -> List[str]:
    return sorted([*globals(), *_FIELDS, "WORKER_NAME"])
