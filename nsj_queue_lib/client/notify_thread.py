"""Module path named by the reference README: promotion of due tasks and re-notify.

The implementation lives in `nsj_queue_lib.runtime.maintenance`.
"""

from __future__ import annotations

from nsj_queue_lib.runtime.maintenance import NotifyService

__all__ = ["NotifyService"]
