"""What a producer may enqueue, checked before the database sees the row.

The rule (README, "3. Enfileirar"), applied by every QueueClient insert:

* payload: None (no payload); a str, stored as it is; bytes or bytearray, decoded as
  UTF-8 and then taken as that str (bytes that are not valid UTF-8 are refused); an
  int, float, bool, Decimal, date/time/datetime or UUID, stored as its str() as by
  earlier versions; or a dict, list, tuple, set or frozenset, stored as its JSON text
  (`json.dumps(..., ensure_ascii=False)`, as before for dict and list; tuples and sets
  as lists; inside them datetime/date/time as ISO 8601, UUID and Decimal as strings,
  bytes as UTF-8 text).  NaN and Infinity, circular references, dict keys JSON has no
  form for and any other type are refused (InvalidPayloadType, also a TypeError, for a
  type).
* A str payload and the text fields (origem, destino, processo, chave_externa,
  grupo_empresarial) must not hold NUL nor lone surrogates (no text column takes them),
  nor, in a database whose encoding is not UTF-8, characters that encoding lacks.  In a
  JSON payload such characters are written as \\u escapes, which JSON reads back as the
  same value.
* prioridade: an int of the column's range (INT: -2147483648 to 2147483647);
  tenant, when an int: BIGINT's range.
* Size: MariaDB/MySQL take a statement of at most @@max_allowed_packet bytes (read once
  per connection); PostgreSQL takes a text literal of at most 536870911 bytes (512 MB:
  the column holds up to 1 GB, but the server's parser stops a literal at 512 MB) in a
  message of at most 1 GB.  A task above that is PayloadTooLarge; a batch is sent in
  as many statements as its size needs.

Refusals are InvalidTaskInput (a ValueError) with a Portuguese message, raised before
any statement: no row is written and the caller's transaction is left as it was.
"""

from __future__ import annotations

import codecs
import datetime as _dt
import decimal
import json
import math
import re
import uuid
import weakref
from typing import Any, Iterator, List, Optional, Sequence

from nsj_queue_lib.exceptions import NsjQueueError
from nsj_queue_lib.text import find_unstorable

TEXT_FIELDS = ("origem", "destino", "processo", "chave_externa", "grupo_empresarial")
INT_MIN, INT_MAX = -2**31, 2**31 - 1  # prioridade: INT on PostgreSQL and MySQL
BIGINT_MIN, BIGINT_MAX = -2**63, 2**63 - 1  # tenant: int8 / BIGINT

# PostgreSQL: the parser's buffer for one literal doubles up to 512 MB and may not reach
# 1 GB ("invalid memory alloc request size 1073741824"); a protocol message (the whole
# statement, as psycopg2 sends values inline) is at most 1 GB.
PG_LITERAL_MAX = 2**29 - 1
PG_STATEMENT_MAX = 2**30 - 1024
PG_BATCH_BUDGET = 2**28  # bytes of values per statement of a batch (then one more)
MYSQL_MIN_PACKET = 1024  # the smallest max_allowed_packet a server takes
STATEMENT_OVERHEAD = 2048  # the INSERT's own text (an upper bound)
ROW_OVERHEAD = 512  # per row: its VALUES tuple (MySQL), numbers, dates, payload_hash

# Characters a driver writes as two bytes in a quoted literal (MySQL escapes all of
# them; PostgreSQL doubles quotes and, in an E'' literal, backslashes).
_ESCAPED = ("\\", "'", '"', "\n", "\r", "\x1a", "\x00")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")

_packet_limits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LIMIT_KEY = "max_allowed_packet"  # in DbSession.server, when the connection has no weakref


class InvalidTaskInput(NsjQueueError, ValueError):
    """A task the queue cannot store as given (payload type, characters, range, size)."""


class InvalidPayloadType(InvalidTaskInput, TypeError):
    """A payload (or a value inside it) of a type the queue has no text for; also a
    TypeError, as earlier versions raised for such values."""


class PayloadTooLarge(InvalidTaskInput):
    """A task (or statement) larger than the database server accepts: a permanent error,
    not a lost connection."""


# -- payload text -------------------------------------------------------------------
def _decode(data: Any, where: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidTaskInput(
            f"{where}: bytes que não são UTF-8 válido (byte {exc.start}); a fila guarda "
            f"texto: decodifique-os antes ou codifique-os (base64, por exemplo)") from None


def _json_default(value: Any) -> Any:
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, (bytes, bytearray)):
        return _decode(value, "payload")
    raise InvalidPayloadType(f"payload contém um valor do tipo {type(value).__name__}, que "
                             f"não tem forma em JSON")


_JSON_TOP_LEVEL = (dict, list, tuple, set, frozenset)
# Scalars stored as their str(), as every earlier version did (bool as True/False, a
# datetime with a space): a consumer may parse them so.
_SCALARS = (bool, int, float, decimal.Decimal, _dt.date, _dt.time, uuid.UUID)


def _dumps(payload: Any) -> str:
    try:
        return json.dumps(payload, ensure_ascii=False, allow_nan=False, default=_json_default)
    except (InvalidTaskInput, InvalidPayloadType):
        raise
    except RecursionError:
        raise InvalidTaskInput("payload aninhado demais para JSON") from None
    except ValueError as exc:
        if "ircular" in str(exc):
            raise InvalidTaskInput("payload contém uma referência circular") from None
        if "Out of range float" in str(exc):
            raise InvalidTaskInput("payload contém NaN ou Infinity, que não são JSON "
                                   "válido (use None ou um texto)") from None
        raise InvalidTaskInput(f"payload não representável em JSON: {exc}") from None
    except TypeError as exc:
        if "keys must be" in str(exc):
            raise InvalidTaskInput(
                "payload contém uma chave de dict que não é str, int, float, bool nem None "
                "(JSON só tem chaves de texto)") from None
        raise InvalidTaskInput(f"payload não representável em JSON: {exc}") from None


def _is_utf8(codec: str) -> bool:
    try:
        return codecs.lookup(codec).name == "utf-8"
    except LookupError:
        return True  # unknown to Python: the driver's business, as before


def _sendable_json(text: str, codec: str) -> str:
    """JSON text with what the connection's encoding cannot carry (lone surrogates; in a
    non-UTF-8 database, characters it lacks) as \\u escapes: the same JSON value."""
    if text.isascii():
        return text
    utf8 = _is_utf8(codec)
    try:
        text.encode("utf-8" if utf8 else codec)
        return text
    except UnicodeEncodeError:
        pass

    def escape(match: re.Match) -> str:
        char = match.group()
        if not utf8:
            try:
                char.encode(codec)
                return char
            except UnicodeEncodeError:
                pass
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
        return f"\\u{code:04x}"

    return (_SURROGATE if utf8 else _NON_ASCII).sub(escape, text)


def check_text(name: str, value: Any, codec: str = "utf-8") -> None:
    """Refuse a str the database cannot store as it is (NUL, a lone surrogate, or a
    character the database's encoding lacks); other types are left to the driver."""
    if not isinstance(value, str):
        return
    pos = find_unstorable(value)
    if pos is not None:
        if value[pos] == "\x00":
            what = "o caractere NUL (\\x00)"
        else:
            what = f"um surrogate isolado (\\u{ord(value[pos]):04x}, sem forma em UTF-8)"
        raise InvalidTaskInput(f"{name} contém {what} na posição {pos}, que o banco não "
                               f"guarda em texto")
    if not value.isascii() and not _is_utf8(codec):
        try:
            value.encode(codec)
        except UnicodeEncodeError as exc:
            raise InvalidTaskInput(
                f"{name} contém {value[exc.start]!r} na posição {exc.start}, que a "
                f"codificação do banco ({codec}) não representa") from None


def payload_text(payload: Any, codec: str = "utf-8") -> Optional[str]:
    """The payload as stored (module docstring), or InvalidTaskInput."""
    if payload is None:
        return None
    if isinstance(payload, (bytes, bytearray)):
        payload = _decode(payload, "payload")
    if isinstance(payload, str):
        check_text("payload", payload, codec)
        return payload
    if isinstance(payload, _SCALARS):
        if isinstance(payload, (float, decimal.Decimal)) and not math.isfinite(payload):
            raise InvalidTaskInput("payload contém NaN ou Infinity, que não são JSON "
                                   "válido (use None ou um texto)")
        return str(payload)
    if not isinstance(payload, _JSON_TOP_LEVEL):
        raise InvalidPayloadType(
            f"payload do tipo {type(payload).__name__} não é aceito: use str, bytes em "
            f"UTF-8, dict, list, tupla, set, ou um int, float, bool, Decimal, data/hora ou "
            f"UUID (gravado como texto, como antes)")
    return _sendable_json(_dumps(payload), codec)


def check_int(name: str, value: Any, low: int, high: int, column: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
        raise InvalidTaskInput(f"{name} fora do intervalo da coluna ({column}, de {low} a "
                               f"{high}): {value}")


# -- size ------------------------------------------------------------------------------
def utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def literal_size(text: str) -> int:
    """Upper bound of the bytes `text` takes as a quoted literal in a statement."""
    return utf8_size(text) + sum(text.count(c) for c in _ESCAPED) + 3


def row_size(row: dict) -> int:
    """Upper bound of the bytes a row adds to an INSERT (its values and, on MySQL, its
    VALUES tuple)."""
    size = ROW_OVERHEAD
    for key in ("payload", *TEXT_FIELDS):
        value = row.get(key)
        if isinstance(value, str):
            size += literal_size(value)
    return size


def mysql_packet_limit(session: Any) -> Optional[int]:
    """@@max_allowed_packet of the session's connection (read once: the session's value
    cannot change), or None when the server does not tell."""
    conn = session.conn
    try:
        return _packet_limits[conn]
    except (KeyError, TypeError):
        pass
    if _LIMIT_KEY in session.server:
        return session.server[_LIMIT_KEY]
    from nsj_queue_lib.exceptions import DatabaseUnavailable

    try:
        value = session.fetch_value("SELECT @@max_allowed_packet")
        limit = int(value) if value is not None else None
    except DatabaseUnavailable:
        raise
    except Exception:  # a MySQL-like server without the variable: no check
        limit = None
    try:
        _packet_limits[conn] = limit
    except TypeError:
        session.server[_LIMIT_KEY] = limit
    return limit


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


class SizeRule:
    """The size limits of one connection's server, applied to rows before they are sent."""

    def __init__(self, session: Any) -> None:
        self._session = session
        # max_allowed_packet bounds a statement (MySQL); else the largest text literal
        self.packet_limit = session.dialect.packet_limit
        self._limit: Optional[int] = None
        self._read = False

    def _mysql_limit(self, needed: int) -> Optional[int]:
        if needed <= MYSQL_MIN_PACKET:
            return None  # fits any server: no need to ask
        if not self._read:
            self._limit = mysql_packet_limit(self._session)
            self._read = True
        return self._limit

    def check(self, row: dict, size: int, where: str = "") -> None:
        """PayloadTooLarge when `row` alone (of estimated `size`) exceeds the server."""
        prefix = f"{where}: " if where else ""
        statement = STATEMENT_OVERHEAD + size
        if not self.packet_limit:
            payload = row.get("payload")
            n = utf8_size(payload) if isinstance(payload, str) else 0
            if n > PG_LITERAL_MAX:
                raise PayloadTooLarge(
                    f"{prefix}payload grande demais para o PostgreSQL: {n} bytes "
                    f"({_mb(n)}); um texto enviado num comando vai até {PG_LITERAL_MAX} "
                    f"bytes (512 MB; a coluna text guarda até 1 GB, mas o servidor não lê "
                    f"um literal acima de 512 MB). Reduza o payload ou guarde o conteúdo "
                    f"fora da fila e enfileire a referência")
            if statement > PG_STATEMENT_MAX:
                raise PayloadTooLarge(
                    f"{prefix}tarefa grande demais para o PostgreSQL: o comando teria cerca "
                    f"de {statement} bytes ({_mb(statement)}), acima do limite de 1 GB de "
                    f"um comando. Reduza o payload")
            return
        limit = self._mysql_limit(statement)
        if limit is not None and statement > limit:
            raise PayloadTooLarge(
                f"{prefix}payload grande demais para o servidor MariaDB/MySQL: o comando "
                f"teria cerca de {statement} bytes ({_mb(statement)}) e o servidor aceita "
                f"até {limit} bytes ({_mb(limit)}) por comando (max_allowed_packet). "
                f"Reduza o payload ou aumente max_allowed_packet no servidor")

    def batches(self, sizes: Sequence[int], max_rows: Optional[int]) -> List[range]:
        """Consecutive ranges of rows, each sent as one statement within the server's
        limit (and at most `max_rows` rows); a row that fits alone is never refused."""
        total = STATEMENT_OVERHEAD + sum(sizes)
        if not self.packet_limit:
            budget: Optional[int] = PG_BATCH_BUDGET
        else:
            budget = self._mysql_limit(total)
        if budget is None or total <= budget:
            return [range(len(sizes))]  # one call (the repository chunks as it always did)
        return list(_ranges(sizes, budget, max_rows))


def _ranges(sizes: Sequence[int], budget: Optional[int],
            max_rows: Optional[int]) -> Iterator[range]:
    start, total = 0, STATEMENT_OVERHEAD
    for i, size in enumerate(sizes):
        full = budget is not None and total + size > budget
        if i > start and (full or (max_rows is not None and i - start >= max_rows)):
            yield range(start, i)
            start, total = i, STATEMENT_OVERHEAD
        total += size
    if start < len(sizes):
        yield range(start, len(sizes))
