"""Module path named by the reference README: the purge of old finished chains.

The implementation lives in `nsj_queue_lib.runtime.maintenance`.
"""

from __future__ import annotations

from nsj_queue_lib.runtime.maintenance import PurgeService

__all__ = ["PurgeService"]
