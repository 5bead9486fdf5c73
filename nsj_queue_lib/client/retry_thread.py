"""Module path named by the reference README: the rescue of tasks whose worker died.

The implementation lives in `nsj_queue_lib.runtime.maintenance`.
"""

from __future__ import annotations

from nsj_queue_lib.runtime.maintenance import RetryService

__all__ = ["RetryService"]
