"""What a subscriber handler receives: the parsed publication and its subscription.

A subscriber task stores the publication's payload text unchanged (the
fan-out copies it), and names its subscriber in the `subscriber_id` column.
At execution time the handler payload is built as::

    {"publication": <publication>, "subscription": <subscriber row>}

* `publication`: when the publication text is a JSON object or array it is
  given parsed (`dict` / `list`, with the standard `json` module: strings stay
  strings, even when they look like dates or UUIDs; numbers are int/float).
  Any other text (plain text, or a JSON scalar such as `"abc"` or `42`) is
  given as the original string, and `None` stays `None`.  The exact text is
  always available as `tarefa["payload"]`.
* `subscription`: the subscriber row read at execution time, with the table's
  fields in this order: id, tenant, grupo_empresarial, processo, url,
  http_method, headers (a dict, from the json column), ativo (bool) and
  created_at (a timezone-aware datetime).
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Dict, Mapping, Optional

from nsj_queue_lib.exceptions import NsjQueueError

SUBSCRIPTION_FIELDS = ("id", "tenant", "grupo_empresarial", "processo", "url", "http_method",
                       "headers", "ativo", "created_at")


class SubscriptionNotFound(NsjQueueError):
    """The task's subscriber no longer exists in the subscriber table."""


class NotASubscriberTask(NsjQueueError):
    """A task without `subscriber_id` reached a pub/sub worker's subscriber code."""


def parse_publication(text: Optional[str]) -> Any:
    """The publication as given to handlers: parsed JSON object/array, else the text itself."""
    if text is None or not isinstance(text, str):
        return text
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "{[":
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (dict, list)) else text


def unwrap_legacy_envelope(payload: Optional[str], tarefa: Mapping[str, Any]) -> Optional[str]:
    """The publication text of a subscriber task.

    nsj-queue-lib 1.2.2 (and 2.x beside 1.2.2 workers) stores, in each subscriber
    task, the envelope ``{"publication": <publication text>, "subscription": {...}}``
    whose subscription id is the task's `subscriber_id`; 2.x alone stores the
    publication text itself.  Anything else is returned unchanged.
    """
    sub_id = tarefa.get("subscriber_id")
    if sub_id is None or not isinstance(payload, str) or '"subscription"' not in payload:
        return payload
    try:
        value = json.loads(payload)
    except ValueError:
        return payload
    if (isinstance(value, dict) and set(value) == {"publication", "subscription"}
            and isinstance(value["subscription"], dict)
            and str(value["subscription"].get("id")) == str(sub_id)
            and (value["publication"] is None or isinstance(value["publication"], str))):
        return value["publication"]
    return payload


def normalize_subscription(row: Mapping[str, Any]) -> Dict[str, Any]:
    """The subscriber row as handlers see it (headers as dict, aware created_at, bool ativo)."""
    sub = {name: row.get(name) for name in SUBSCRIPTION_FIELDS}
    headers = sub["headers"]
    if isinstance(headers, (bytes, bytearray)):
        headers = headers.decode("utf-8")
    if isinstance(headers, str):
        try:
            headers = json.loads(headers) if headers.strip() else None
        except ValueError:
            pass  # left as text; the webhook rejects it with a clear message
    sub["headers"] = headers
    if sub["ativo"] is not None:
        sub["ativo"] = bool(sub["ativo"])
    created = sub["created_at"]
    if isinstance(created, _dt.datetime) and created.tzinfo is None:
        # MySQL returns naive values; the worker's session runs in UTC.
        sub["created_at"] = created.replace(tzinfo=_dt.timezone.utc)
    if sub["tenant"] is not None and not isinstance(sub["tenant"], int):
        try:
            sub["tenant"] = int(sub["tenant"])
        except (TypeError, ValueError):
            pass
    return sub


def handler_payload(publication_text: Optional[str],
                    subscription: Dict[str, Any]) -> Dict[str, Any]:
    """{"publication": ..., "subscription": ...} for one handler call (a fresh dict)."""
    return {"publication": parse_publication(publication_text), "subscription": subscription}


__all__ = [
    "SUBSCRIPTION_FIELDS",
    "NotASubscriberTask",
    "SubscriptionNotFound",
    "handler_payload",
    "normalize_subscription",
    "parse_publication",
    "unwrap_legacy_envelope",
]
