"""Module path named by the reference README: the rescue of tasks whose worker died.

The implementation lives in `nsj_queue_lib.runtime.maintenance`.
"""

from __future__ import annotations

from nsj_queue_lib.runtime.maintenance import RetryService

__all__ = ["RetryService"]

# 1.2.2 names (importable; using them says what replaces them).
from nsj_queue_lib.compat.removed import removed_class

RetryThread = removed_class(
    __name__, "RetryThread",
    "as rotinas rodam com WorkerBase.run() (nsj_queue_lib.runtime.maintenance)")
