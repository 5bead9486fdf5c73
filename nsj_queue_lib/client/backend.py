"""Re-export shim: the implementation lives in `nsj_queue_lib.engine.socket.backend`."""

from __future__ import annotations

from nsj_queue_lib.engine.socket.backend import SocketBackend

__all__ = ["SocketBackend"]
