"""Re-export shim: the implementation lives in `nsj_queue_lib.engine.socket.notifier`."""

from __future__ import annotations

from nsj_queue_lib.engine.socket.notifier import (
    DEFAULT_NOTIFY_PORT,
    SocketNotifier,
    notify_server,
)

__all__ = ["DEFAULT_NOTIFY_PORT", "SocketNotifier", "notify_server"]
