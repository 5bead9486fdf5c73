"""1.2.2 module path kept importable; its classes were internal machinery."""

from __future__ import annotations

from nsj_queue_lib.compat.removed import removed_class

SocketClient = removed_class(
    __name__, "SocketClient",
    "o cliente do servidor de filas está em nsj_queue_lib.engine.socket")

__all__ = ["SocketClient"]
