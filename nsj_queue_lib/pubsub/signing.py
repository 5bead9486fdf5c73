"""Standard Webhooks signatures (https://www.standardwebhooks.com/), pure functions.

A signed delivery carries three headers:

* ``webhook-id``: the delivery's id, the same on every retry of one delivery (derived
  from the first attempt's task id), so a receiver can drop duplicates;
* ``webhook-timestamp``: Unix seconds of this attempt;
* ``webhook-signature``: ``v1,<base64 HMAC-SHA256(key, "id.timestamp.body")>``; while a
  rotated secret is in its overlap period the old key's signature follows, separated
  by a space, so receivers still holding the old secret keep verifying.

Secrets are written ``whsec_<base64 of 24 to 64 random bytes>``; the HMAC key is the
decoded bytes.  The body signed is exactly the bytes sent (no envelope is added).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets as _random
from typing import Dict, Iterable, Optional

from nsj_queue_lib.exceptions import NsjQueueError

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # generated secrets
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
SIGNATURE_HEADERS = (HEADER_ID, HEADER_TIMESTAMP, HEADER_SIGNATURE)
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


class InvalidSecret(NsjQueueError):
    """The text is not a Standard Webhooks secret (whsec_ followed by base64)."""


def generate_secret() -> str:
    """A new random secret, ``whsec_`` + base64 of 32 bytes."""
    return SECRET_PREFIX + base64.b64encode(_random.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret; InvalidSecret (never showing it) otherwise."""
    text = (secret or "").strip()
    if not text.startswith(SECRET_PREFIX):
        raise InvalidSecret("segredo inválido: use o formato whsec_<base64> "
                            "(ou --generate-secret)")
    try:
        key = base64.b64decode(text[len(SECRET_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret("segredo inválido: o que segue whsec_ não é base64") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise InvalidSecret(f"segredo inválido: a chave deve ter de {MIN_SECRET_BYTES} a "
                            f"{MAX_SECRET_BYTES} bytes (tem {len(key)})")
    return key


def delivery_id(queue_table: str, root_task_id: int) -> str:
    """The webhook-id of a delivery: the queue's name and the first attempt's task id."""
    return f"msg_{_ID_UNSAFE.sub('_', queue_table).strip('_')}_{int(root_task_id)}"


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of ``msg_id.timestamp.body``."""
    content = f"{msg_id}.{int(timestamp)}.".encode() + (body or b"")
    digest = hmac.new(key, content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_headers(keys: Iterable[bytes], msg_id: str, timestamp: int,
                      body: Optional[bytes]) -> Dict[str, str]:
    """The three headers for `keys` (the current one first); empty without keys."""
    sigs = [sign(k, msg_id, timestamp, body or b"") for k in keys]
    if not sigs:
        return {}
    return {HEADER_ID: msg_id, HEADER_TIMESTAMP: str(int(timestamp)),
            HEADER_SIGNATURE: " ".join(sigs)}


__all__ = [
    "SECRET_PREFIX",
    "SIGNATURE_HEADERS",
    "InvalidSecret",
    "delivery_id",
    "generate_secret",
    "secret_key",
    "sign",
    "signature_headers",
]
