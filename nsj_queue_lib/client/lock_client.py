"""Re-export shim: the implementation lives in `nsj_queue_lib.coordination.socket.locker`."""

from __future__ import annotations

from nsj_queue_lib.coordination.socket.locker import SocketLocker

__all__ = ["SocketLocker"]
