"""Module path named by the reference README: the consumer loop that runs the tasks.

The implementation lives in `nsj_queue_lib.runtime.consumer`.
"""

from __future__ import annotations

from nsj_queue_lib.runtime.consumer import Consumer

__all__ = ["Consumer"]
