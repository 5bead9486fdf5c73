"""Errors of the multi-database support layer."""

from __future__ import annotations

import logging
from typing import Iterable, Optional

from nsj_queue_lib.exceptions import NsjQueueError
from nsj_queue_lib.text import redact_urls_in_text, truncate

logger = logging.getLogger(__name__)

_MASK = "***"


class MultiDatabaseError(NsjQueueError):
    """The token, the tenant credentials or the tenant database connection failed.

    The message names the HTTP status code and the tenant when they are known,
    and never contains a password or a token.  `status_code` and `tenant` are
    also available as attributes for the runtime's own logging.
    """

    def __init__(self, message: str, *, status_code: Optional[int] = None,
                 tenant: object = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.tenant = tenant


def scrub(text: str, secrets: Iterable[Optional[str]]) -> str:
    """Replace every non-empty secret found in `text` by '***'.

    Used on every text that goes into an exception or a log line and that
    comes from outside (server answers, driver errors), as a last line of
    defence: secrets are never put there on purpose.  URLs in it (requests
    names the URL it failed on) lose their credentials and query string.
    """
    text = redact_urls_in_text(text)
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, _MASK)
    return text


def short(text: str, limit: int = 300) -> str:
    """First line of `text`, cut to `limit` characters (for error messages)."""
    stripped = (text or "").strip()
    return truncate(stripped.splitlines()[0] if stripped else "", limit)
