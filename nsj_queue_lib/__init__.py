"""nsj_queue_lib: transactional task queues in a database table, with self-managed workers.

Public names are imported lazily, so `import nsj_queue_lib` reads no
environment variable and opens no connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nsj_queue_lib.version import __version__

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
    from nsj_queue_lib.config import Settings
    from nsj_queue_lib.queue_client import QueueClient
    from nsj_queue_lib.worker_base import WorkerBase
    from nsj_queue_lib.worker_pub_sub_base import (
        DeadSubscriber,
        Subscriber,
        SubscriberWebhook,
        WorkerPubSubBase,
    )

__all__ = [
    "DeadSubscriber",
    "QueueClient",
    "Settings",
    "Subscriber",
    "SubscriberWebhook",
    "WorkerBase",
    "WorkerPubSubBase",
    "__version__",
]

_LAZY = {
    "QueueClient": "nsj_queue_lib.queue_client",
    "Settings": "nsj_queue_lib.config",
    "WorkerBase": "nsj_queue_lib.worker_base",
    "WorkerPubSubBase": "nsj_queue_lib.worker_pub_sub_base",
    "Subscriber": "nsj_queue_lib.worker_pub_sub_base",
    "DeadSubscriber": "nsj_queue_lib.worker_pub_sub_base",
    "SubscriberWebhook": "nsj_queue_lib.worker_pub_sub_base",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nsj_queue_lib' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
