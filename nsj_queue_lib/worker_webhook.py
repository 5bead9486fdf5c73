"""Webhook worker: `python -m nsj_queue_lib.worker_webhook`, no user code needed.

Serves a pub/sub queue (QUEUE_TABLE + QUEUE_SUBSCRIBER_TABLE) whose
subscribers are webhooks: every subscriber task calls the subscription's
`url` with its `http_method` (GET, POST, PUT or DELETE, case-insensitive) and
`headers` (json column), with timeout DEFAULT_WEBHOOK_TIMEOUT seconds.  POST
and PUT send the publication payload text as the body, with
`Content-Type: application/json` when it is JSON and the subscription sets no
Content-Type.

A 2xx answer is a success (message: method, url, status and the start of the
response body).  Any other status, a timeout or a network error is a failure
whose message keeps the status and the start of the body (or the error): the
task is retried and, after QUEUE_MAX_RETRY attempts, goes to the dead-letter
queue, handled by `WorkerBase.execute_dead` (logged).  A subscription with no
url or an unsupported method fails the same way, with a clear message.
Header values and bodies are never logged.  See `nsj_queue_lib.pubsub.webhook`.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence, Union

from nsj_queue_lib.pubsub.message import normalize_subscription
from nsj_queue_lib.worker_pub_sub_base import WorkerPubSubBase


class WorkerWebhook(WorkerPubSubBase):
    """Pub/sub worker that delivers every subscriber task as a webhook.

    Subclasses may still register `@Subscriber` handlers (they take
    precedence for their ids) or `@DeadSubscriber` handlers for dead letters.
    """

    def is_webhook_subscriber(self, subscriber_id: str) -> bool:
        return True

    def make_request(self, payload: Union[str, Mapping[str, Any]]) -> str:
        """Deliver a payload in the original library's shape; return the success message.

        `payload` is {"publication": ..., "subscription": {...}} (a dict or its
        JSON text).  A publication given as dict/list is sent as JSON text.
        Raises WebhookConfigError / WebhookError like the worker does.
        """
        data = json.loads(payload) if isinstance(payload, (str, bytes)) else payload
        publication = data.get("publication")
        if publication is not None and not isinstance(publication, str):
            publication = json.dumps(publication, ensure_ascii=False, default=str)
        subscription = normalize_subscription(data.get("subscription") or {})
        return self.deliver_webhook(publication, subscription, {})


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point: run the webhook worker until SIGTERM/SIGINT or HALT."""
    WorkerWebhook().run(argv)


if __name__ == "__main__":
    main()
