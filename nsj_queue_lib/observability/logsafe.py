"""Log records made safe before any handler writes them.

`SafeRecordFilter` is attached by `log.configure_logging` to every handler of
the root logger (and by `loki` to its handler).  Each record, whoever logged
it, leaves the filter with:

* its message formatted once, encodable as UTF-8 (lone surrogates escaped, NUL
  removed) and cut to LOG_MESSAGE_MAX characters, noting the full length;
* its traceback (and stack) formatted once, each line cut to LOG_MESSAGE_MAX
  and the whole to LOG_TRACEBACK_MAX characters;
* every URL in them without credentials and query string (tokens travel
  there: webhook `?api_key=`, OAuth, credentials, Loki).

So a 200,000-character exception message costs a few KB of log, never 400 KB,
and a write to a strict UTF-8 stream never fails.
"""

from __future__ import annotations

import logging

from nsj_queue_lib.text import bounded, clean, redact_urls_in_text, to_str

LOG_MESSAGE_MAX = 4000
LOG_TRACEBACK_MAX = 16000

_MARK = "_nsjq_safe"
_formatter = logging.Formatter()


def safe_log_text(text: str, limit: int = LOG_MESSAGE_MAX) -> str:
    """What a log line may carry: redacted URLs, encodable, bounded."""
    return bounded(clean(redact_urls_in_text(text)), limit)


def _safe_block(text: str) -> str:
    lines = [safe_log_text(line) for line in text.splitlines()]
    return bounded("\n".join(lines), LOG_TRACEBACK_MAX)


class SafeRecordFilter(logging.Filter):
    """Makes each record safe in place (once: records are shared by the handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _MARK, False):
            return True
        try:
            message = record.getMessage()
        except Exception:  # bad format string or arguments: show what was given
            message = f"{to_str(record.msg)} {to_str(record.args)}"
        record.msg = safe_log_text(to_str(message))
        record.args = None
        if record.exc_info and not record.exc_text:
            try:
                record.exc_text = _formatter.formatException(record.exc_info)
            except Exception:
                record.exc_text = f"<traceback ilegível de {type(record.exc_info[1]).__name__}>"
        if record.exc_text:
            record.exc_text = _safe_block(record.exc_text)
        if record.stack_info:
            record.stack_info = _safe_block(record.stack_info)
        setattr(record, _MARK, True)
        return True


_FILTER = SafeRecordFilter()


def protect_handler(handler: logging.Handler) -> None:
    """Attach the (shared) safety filter to `handler`, once."""
    if _FILTER not in handler.filters:
        handler.addFilter(_FILTER)
