"""Module path named by the reference README: the consumer loop that runs the tasks.

The implementation lives in `nsj_queue_lib.runtime.consumer`.
"""

from __future__ import annotations

from nsj_queue_lib.runtime.consumer import Consumer

__all__ = ["Consumer"]

# 1.2.2 names (importable; using them says what replaces them).
from nsj_queue_lib.compat.removed import removed_class

MainThread = removed_class(
    __name__, "MainThread",
    "o worker roda com WorkerBase.run() (nsj_queue_lib.runtime)")
