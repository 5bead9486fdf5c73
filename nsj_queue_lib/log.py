"""Logging set-up, done only by entry points (never at import)."""

from __future__ import annotations

import logging
import sys
from typing import Optional

from nsj_queue_lib.config import Settings

FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"

_configured = False


def configure_logging(settings: Optional[Settings] = None) -> None:
    """One configuration point: LOG_DEBUG sets the level, GRAFANA_URL adds Loki."""
    global _configured
    if _configured:
        return
    _configured = True
    level = logging.DEBUG if settings is not None and settings.log_debug else logging.INFO
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("nsj_queue_lib").setLevel(level)
    if settings is not None and settings.grafana_url:
        try:
            from nsj_queue_lib.loki import install_loki_handler
        except ImportError:  # pragma: no cover - added by the operations work
            logging.getLogger(__name__).warning("GRAFANA_URL definido, mas sem suporte a Loki")
        else:
            install_loki_handler(settings)
