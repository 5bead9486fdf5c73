"""Payload text and hash, as stored in the queue table."""

from __future__ import annotations

import datetime as _dt
import decimal
import hashlib
import json
import uuid
from typing import Any, Optional


def _default(value: Any) -> Any:
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"tipo {type(value).__name__} não serializável em JSON")


def to_text(payload: Any) -> Optional[str]:
    """Payload as stored: str unchanged, dict/list as JSON text, None as None, else str()."""
    if payload is None or isinstance(payload, str):
        return payload
    if isinstance(payload, (dict, list)):
        return json.dumps(payload, ensure_ascii=False, default=_default)
    return str(payload)


def payload_hash(text: Optional[str]) -> Optional[str]:
    """SHA-256 hex digest of the payload text; None for an empty payload."""
    if not text:
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _legacy_default(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S")  # 1.2.2 dropped fraction and time zone
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()
    return _default(value)


def legacy_text(payload: Any) -> Optional[str]:
    """A dict/list payload as nsj-queue-lib 1.2.2 serialised it (ASCII-escaped JSON,
    datetimes without fraction nor zone), to find tasks a 1.2.2 producer queued."""
    if isinstance(payload, (dict, list)):
        return json.dumps(payload, default=_legacy_default)
    return to_text(payload)
