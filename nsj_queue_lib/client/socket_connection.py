"""Re-export shim: the implementation lives in `nsj_queue_lib.engine.socket.connection`."""

from __future__ import annotations

from nsj_queue_lib.engine.socket.connection import SocketConnection

__all__ = ["SocketConnection"]
