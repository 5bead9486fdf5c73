"""1.2.2 module path kept importable; its classes were internal machinery."""

from __future__ import annotations

from nsj_queue_lib.compat.removed import removed_class

LockService = removed_class(
    __name__, "LockService",
    "os locks do servidor estão em nsj_queue_lib.server.locks")

__all__ = ["LockService"]
