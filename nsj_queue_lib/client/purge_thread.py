"""Module path named by the reference README: the purge of old finished chains.

The implementation lives in `nsj_queue_lib.runtime.maintenance`.
"""

from __future__ import annotations

from nsj_queue_lib.runtime.maintenance import PurgeService

__all__ = ["PurgeService"]

# 1.2.2 names (importable; using them says what replaces them).
from nsj_queue_lib.compat.removed import removed_class

PurgeThread = removed_class(
    __name__, "PurgeThread",
    "as rotinas rodam com WorkerBase.run() (nsj_queue_lib.runtime.maintenance)")
