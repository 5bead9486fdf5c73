"""Logging set-up, done only by entry points (never at import)."""

from __future__ import annotations

import logging
import sys
from typing import Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.observability.logfields import (
    FORMAT,
    ContextFilter,
    JsonFormatter,
    TextFormatter,
)
from nsj_queue_lib.observability.logsafe import protect_handler

_configured = False


def configure_logging(settings: Optional[Settings] = None) -> None:
    """One configuration point: LOG_DEBUG sets the level, GRAFANA_URL adds Loki,
    LOG_FORMAT=json writes one JSON object per line on stdout (logfields).

    LOG_DEBUG raises only the library's own loggers ("nsj_queue_lib.*"): the
    dependencies' DEBUG output (urllib3 writes whole request lines, query
    strings included) needs the explicit LOG_DEBUG_DEPENDENCIES=true.  Every
    handler of the root logger gets the safety filter (logsafe): bounded,
    encodable records, URLs without credentials or query string.
    """
    global _configured
    if _configured:
        return
    _configured = True
    level = logging.DEBUG if settings is not None and settings.log_debug else logging.INFO
    everything = (settings is not None and settings.log_debug
                  and settings.log_debug_dependencies)
    root = logging.getLogger()
    json_lines = settings is not None and settings.log_format == "json"
    if not root.handlers:
        stream = logging.StreamHandler(sys.stdout)
        stream.setFormatter(JsonFormatter() if json_lines else TextFormatter(FORMAT))
        root.addHandler(stream)
    context = ContextFilter(settings.queue_name if settings is not None else None)
    for handler in root.handlers:
        protect_handler(handler)
        handler.addFilter(context)  # queue, task id, attempt, worker id on every record
    root.setLevel(logging.DEBUG if everything else logging.INFO)
    logging.getLogger("nsj_queue_lib").setLevel(level)
    if settings is not None and settings.grafana_url:
        try:
            from nsj_queue_lib.observability.loki import install_loki_handler
        except ImportError:  # pragma: no cover - added by the operations work
            logging.getLogger(__name__).warning("GRAFANA_URL definido, mas sem suporte a Loki")
        else:
            install_loki_handler(settings)
