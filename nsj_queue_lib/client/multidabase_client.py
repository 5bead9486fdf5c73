"""1.2.2 module path kept importable; its classes were internal machinery."""

from __future__ import annotations

from nsj_queue_lib.compat.removed import removed_class

TokenStore = removed_class(__name__, "TokenStore", "o multi-banco está em nsj_queue_lib.multidb")
MultiDatabaseClient = removed_class(
    __name__, "MultiDatabaseClient",
    "o multi-banco está em nsj_queue_lib.multidb")

__all__ = ["MultiDatabaseClient", "TokenStore"]
