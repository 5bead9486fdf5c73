"""Names of nsj-queue-lib 1.2.2 kept importable in 2.x (thin facades).

Code written for 1.2.2 imported from many modules.  The public names (settings and
its `logger`, the workers, the exceptions, QueueClient, db_gen) work in 2.x.  Classes
that were internal machinery of 1.2.2 (its threads, DAO, socket client) still import,
so old code loads, but using them raises an error saying what replaces them.
"""

from __future__ import annotations

from typing import Any


def removed_class(module: str, name: str, replacement: str) -> type:
    """A placeholder for a 1.2.2 internal class: importable, refuses to be used."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"{module}.{name} era um mecanismo interno da nsj-queue-lib 1.2.2 e não existe na "
            f"2.x: {replacement}")

    return type(name, (), {"__init__": __init__, "__module__": module,
                           "__doc__": f"Removido na 2.x: {replacement}"})
