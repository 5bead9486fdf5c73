"""1.2.2 module path kept importable; its classes were internal machinery."""

from __future__ import annotations

from nsj_queue_lib.compat.removed import removed_class

RetryUtil = removed_class(
    __name__, "RetryUtil",
    "as falhas são registradas por nsj_queue_lib.runtime.failure")

__all__ = ["RetryUtil"]
