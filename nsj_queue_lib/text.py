"""Small text helpers shared by messages, logs and error reports.

Every text the library stores or logs goes through `safe_text` (or `describe`
for exceptions and return values): it never raises, the result always encodes
as UTF-8 (lone surrogates, e.g. bytes decoded with surrogateescape, are escaped
as \\udcxx; NUL characters, which PostgreSQL rejects, are removed) and it is cut
to a bounded length with a note of the full length.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Optional

ELLIPSIS = "…"
# Characters a terminal may act on instead of showing: C0 controls but tab and newline,
# DEL and the C1 controls (some terminals read \x9b as CSI), and the bidirectional
# overrides and isolates (they reorder what is shown).
_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """Text safe to store: NUL characters removed, lone surrogates escaped."""
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (from surrogateescape or broken JSON) cannot be sent to a
        # database nor written to a UTF-8 stream: keep them visible as \udcxx.
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def truncate(text: str, limit: int) -> str:
    """At most `limit` characters; a cut text ends with '…'."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def bounded(text: str, limit: int) -> str:
    """At most `limit` characters; a cut text ends with '… [N caracteres]', N being the
    full length (when `limit` leaves room for that note; else plain truncation)."""
    if len(text) <= limit:
        return text
    note = f"{ELLIPSIS} [{len(text)} caracteres]"
    if limit < len(note) * 2:
        return truncate(text, limit)
    return text[: limit - len(note)] + note


def to_str(value: Any) -> str:
    """str(value) that never raises: falls back to repr(), then to the type name."""
    if isinstance(value, str):
        return value
    for convert in (str, repr):
        try:
            text = convert(value)
        except Exception:
            continue
        if isinstance(text, str):
            return text
    return f"<{type(value).__name__} ilegível>"


def safe_text(value: Any, limit: int) -> str:
    """`value` as text that can be stored and logged: never raises, encodable as
    UTF-8, without NUL, at most `limit` characters (noting the full length)."""
    return bounded(clean(to_str(value)), limit)


def describe_exception(exc: BaseException, limit: Optional[int] = None) -> str:
    """'Type: message' of an exception (just 'Type' when the message is empty), safe
    and bounded; an exception whose str() fails is still named."""
    name = type(exc).__name__
    try:
        text = str(exc)
        if not isinstance(text, str):  # pragma: no cover - str() enforces it
            raise TypeError
    except Exception:
        text = f"<mensagem ilegível: {to_str(exc.args) if exc.args else 'sem argumentos'}>"
    text = text.strip()
    text = clean(f"{name}: {text}" if text else name)
    return text if limit is None else bounded(text, limit)


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


def without_credentials(url: str) -> str:
    """`url` without user:password (query string and fragment kept): the URL to call
    when the credentials go in a header instead."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query,
                                    parts.fragment))


# A URL inside free text (driver and HTTP library errors, log arguments).
_URL_IN_TEXT = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^\s/?#@\"'<>]*@)?"
                          r"([^\s/?#\"'<>]*)([^\s?#\"'<>]*)([?#][^\s\"'<>]*)?")
# A request target without scheme, as urllib3 and requests write it
# ('"GET /hook?api_key=... HTTP/1.1"', 'Max retries exceeded with url: /hook?k=v').
_PATH_QUERY = re.compile(r"((?:\"[A-Z]+ |url: )/[^\s?#\"'<>]*)[?#][^\s\"'<>)]*")


def redact_urls_in_text(text: str) -> str:
    """Every URL in `text` without credentials and query string ('?…' marks where the
    query was), including bare request targets such as '"GET /path?k=v HTTP/1.1"'."""
    def url(match: re.Match) -> str:
        scheme, _userinfo, host, path, query = match.groups()
        return f"{scheme}{host}{path}" + ("?…" if query else "")

    if "://" in text:
        text = _URL_IN_TEXT.sub(url, text)
    if "/" in text and ("?" in text or "#" in text):
        text = _PATH_QUERY.sub(lambda m: m.group(1) + "?…", text)
    return text


def duration(seconds: Optional[float], missing: str = "?", decimals: int = 1) -> str:
    """A duration in s, min, h or dias (`decimals` digits below an hour; one above),
    `missing` for None."""
    if seconds is None:
        return missing
    s = max(0.0, float(seconds))
    if s < 120:
        return f"{s:.{decimals}f} s"
    if s < 7200:
        return f"{s / 60:.{decimals}f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} dias"


def terminal_safe(text: str) -> str:
    """`text` with every character a terminal would act on (escape sequences, BEL, CR,
    backspace, C1 controls) written as a visible \\uXXXX escape: text that came from the
    queue (a webhook's response body in `mensagem`) cannot move the cursor, clear the
    screen, set the title or forge lines.  Inside a JSON string the escape is valid JSON
    for the same character."""
    return _TERMINAL_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def find_unstorable(text: str) -> Optional[int]:
    """Index of the first character no database column of text can take (NUL, or a lone
    surrogate, which has no UTF-8 form), or None; `clean` is the lossy alternative."""
    nul = text.find("\x00")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return exc.start if nul < 0 else min(nul, exc.start)
    return None if nul < 0 else nul
