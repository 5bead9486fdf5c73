"""Pure text helpers: encodable, bounded, URLs without secrets."""

from __future__ import annotations

import logging

from nsj_queue_lib.observability.logsafe import SafeRecordFilter
from nsj_queue_lib.text import (
    bounded,
    describe_exception,
    redact_urls_in_text,
    safe_text,
    without_credentials,
)


def test_safe_text_escapes_surrogates_removes_nul_and_notes_full_length():
    text = safe_text("a\udcff\x00" + "b" * 1000, 100)
    assert text.startswith("a\\udcffbbb") and text.endswith("… [1007 caracteres]")
    assert len(text) == 100
    text.encode("utf-8")
    assert safe_text(b"\xff", 50) == "b'\\xff'"  # bytes recorded as what they are
    assert bounded("abc", 3) == "abc"


def test_describe_exception_survives_a_failing_str():
    class Bad(Exception):
        def __str__(self):
            raise RuntimeError

    assert describe_exception(Bad(1)) == "Bad: <mensagem ilegível: (1,)>"
    assert describe_exception(ValueError()) == "ValueError"


def test_urls_in_text_lose_credentials_and_query():
    text = ('x https://u:p@h.com:80/a?api_key=S1#f y "POST /hook?api_key=S2 HTTP/1.1" 200 '
            "Max retries exceeded with url: /cred?token=S3 (Caused by X)")
    out = redact_urls_in_text(text)
    assert "S1" not in out and "S2" not in out and "S3" not in out and "u:p" not in out
    assert "https://h.com:80/a?…" in out and '"POST /hook?… HTTP/1.1"' in out
    assert without_credentials("https://u:p@h:3100/push?X=1") == "https://h:3100/push?X=1"


def test_log_filter_bounds_message_and_traceback():
    try:
        raise ValueError("\udcff" + "v" * 100_000)
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "falhou %s em %s",
                                   ("y" * 100_000, "http://h/p?k=SEGREDO"), None)
        import sys
        record.exc_info = sys.exc_info()
    SafeRecordFilter().filter(record)
    line = logging.Formatter().format(record)
    assert len(line) < 25_000 and "SEGREDO" not in line
    assert line.count("caracteres]") == 2
    line.encode("utf-8")
