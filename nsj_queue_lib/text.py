"""Small text helpers shared by messages, logs and error reports."""

from __future__ import annotations

import urllib.parse

ELLIPSIS = "…"


def clean(text: str) -> str:
    """Text safe to store: NUL characters (rejected by PostgreSQL) are removed."""
    return text.replace("\x00", "")


def truncate(text: str, limit: int) -> str:
    """At most `limit` characters; a cut text ends with '…'."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def one_line(text: str, limit: int) -> str:
    """Whitespace (newlines included) folded to single spaces, then truncated."""
    return truncate(" ".join(clean(text or "").split()), limit)


def redact_url(url: str) -> str:
    """scheme://host[:port]/path of `url`: no credentials, query string or fragment,
    which may carry tokens (for logs and stored messages)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return "<url inválida>"
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
