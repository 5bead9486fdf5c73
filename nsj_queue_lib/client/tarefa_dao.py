"""1.2.2 module path kept importable; its classes were internal machinery."""

from __future__ import annotations

from nsj_queue_lib.compat.removed import removed_class

TarefaDAO = removed_class(
    __name__, "TarefaDAO",
    "use QueueClient (produtor) ou QueueAdmin (operação)")

__all__ = ["TarefaDAO"]
