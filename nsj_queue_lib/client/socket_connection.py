"""Re-export shim: the implementation lives in `nsj_queue_lib.coordination.socket.connection`."""

from __future__ import annotations

from nsj_queue_lib.coordination.socket.connection import SocketConnection

__all__ = ["SocketConnection"]
