"""Module path named by the reference README: promotion of due tasks and re-notify.

The implementation lives in `nsj_queue_lib.runtime.maintenance`.
"""

from __future__ import annotations

from nsj_queue_lib.runtime.maintenance import NotifyService

__all__ = ["NotifyService"]

# 1.2.2 names (importable; using them says what replaces them).
from nsj_queue_lib.compat.removed import removed_class

NotifyThread = removed_class(
    __name__, "NotifyThread",
    "as rotinas rodam com WorkerBase.run() (nsj_queue_lib.runtime.maintenance)")
