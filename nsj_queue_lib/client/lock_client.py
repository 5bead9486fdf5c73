"""Re-export shim: the implementation lives in `nsj_queue_lib.engine.socket.locker`."""

from __future__ import annotations

from nsj_queue_lib.engine.socket.locker import SocketLocker

__all__ = ["SocketLocker"]

# 1.2.2 names (importable; using them says what replaces them).
from nsj_queue_lib.compat.removed import removed_class

LockClient = removed_class(
    __name__, "LockClient",
    "os locks vêm de nsj_queue_lib.engine (PostgreSQL ou servidor de filas)")
