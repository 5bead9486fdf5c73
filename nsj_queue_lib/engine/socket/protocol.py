"""Wire protocol of the client/server mode: pure encoding and decoding, no sockets.

A frame is one JSON object encoded as UTF-8 and terminated by a single newline
(b"\\n").  A frame larger than ``MAX_FRAME_BYTES`` (the newline excluded), a
line that is not valid UTF-8 JSON, or a JSON value that is not an object is a
protocol violation: the receiver closes that connection.  See docs/protocol.md.

Frames with an ``op`` field are requests (or events, when they carry no
``id``); frames without ``op`` are replies and echo the ``id`` of their request.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Union

from nsj_queue_lib.engine.base import LockKey
from nsj_queue_lib.exceptions import ProtocolError

# Version 2 added `claim` (the server picks due tasks and locks them for the session).
# Version 3 added `idle` (a listener asks for one wake-up; the server wakes only as many
# idle listeners as there are due tasks) and made an empty `claim` answer authoritative.
# The server accepts every version in SUPPORTED_VERSIONS; a client answered
# `unsupported_version` by an older server says hello again with the version below.
PROTOCOL_VERSION = 3
SUPPORTED_VERSIONS = (1, 2, 3)
CLAIM_MAX = 64  # ids one `claim` may ask for
MAX_FRAME_BYTES = 64 * 1024
MAX_ID_LENGTH = 64
MAX_PAYLOAD_BYTES = 8000  # same limit as a PostgreSQL NOTIFY payload

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

# Requests (client -> server)
OP_HELLO = "hello"
OP_PING = "ping"  # also sent server -> client as a heartbeat
OP_TRY_LOCK = "try_lock"
OP_UNLOCK = "unlock"
OP_UNLOCK_ALL = "unlock_all"
OP_LISTEN = "listen"
OP_UNLISTEN = "unlisten"
OP_NOTIFY = "notify"  # also the server -> client wake-up event (no id)
OP_STATUS = "status"
OP_CLAIM = "claim"  # version 2: due task ids, each already locked for this session
OP_IDLE = "idle"  # version 3: this listener waits for work (one targeted wake-up)

# Error codes of error replies
ERR_BAD_REQUEST = "bad_request"
ERR_UNKNOWN_OP = "unknown_op"
ERR_NOT_AUTHENTICATED = "not_authenticated"
ERR_UNAUTHORIZED = "unauthorized"
ERR_UNSUPPORTED_VERSION = "unsupported_version"
ERR_WRONG_QUEUE = "wrong_queue"
ERR_TOO_MANY_CLIENTS = "too_many_clients"
ERR_SERVER_RESOURCES = "server_resources"  # (it could not start the client's thread)
ERR_SERVER_STOPPING = "server_stopping"
ERR_TOO_MANY_LOCKS = "too_many_locks"
ERR_TLS_REQUIRED = "tls_required"

# Session roles: a producer (SERVER_PRODUCER_TOKEN) may only ping and notify (not HALT).
ROLE_PRODUCER = "producer"
PRODUCER_OPS = frozenset({OP_PING, OP_NOTIFY})


def log_safe(value: Any, limit: int = 120) -> str:
    """A client-supplied value as one printable ASCII log field: control characters
    (newlines included) and non-ASCII escaped, so no peer can forge log lines."""
    text = value if isinstance(value, str) else repr(value)
    escaped = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return escaped if len(escaped) <= limit else escaped[:limit] + "..."

MessageId = Union[int, str, None]
Message = dict[str, Any]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"constante JSON não suportada: {name}")


def encode(message: Message) -> bytes:
    """Encode one message as a frame (compact JSON + newline)."""
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")
    if len(data) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame de {len(data)} bytes excede o máximo de {MAX_FRAME_BYTES}")
    return data + b"\n"


def decode_frame(line: bytes) -> Message:
    """Decode one frame (without its newline) and check the envelope fields."""
    if len(line) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame de {len(line)} bytes excede o máximo de {MAX_FRAME_BYTES}")
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"frame não é UTF-8 válido: {exc.reason}") from None
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"frame não é JSON válido: {str(exc)[:120]}") from None
    if not isinstance(value, dict):
        raise ProtocolError("frame não é um objeto JSON")
    msg_id = value.get("id")
    if msg_id is not None and not _valid_id(msg_id):
        raise ProtocolError("campo 'id' inválido (use inteiro ou texto curto)")
    op = value.get("op")
    if op is not None and not isinstance(op, str):
        raise ProtocolError("campo 'op' inválido (deve ser texto)")
    return value


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and len(value) <= MAX_ID_LENGTH


class FrameDecoder:
    """Split a byte stream into decoded frames; keeps the incomplete tail.

    Frames split across reads and several frames in one read are both handled.
    Raises ProtocolError on the first bad frame; the connection must then be
    closed (the decoder state is undefined afterwards).
    """

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._max = max_frame
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame waiting for their newline."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Message]:
        """Add received bytes; return the complete frames they finish."""
        self._buffer += data
        frames: list[Message] = []
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end < 0:
                break
            if end - start > self._max:
                raise ProtocolError(f"frame excede o máximo de {self._max} bytes")
            line = bytes(self._buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if line.strip():
                frames.append(decode_frame(line))
        del self._buffer[:start]
        if len(self._buffer) > self._max:
            raise ProtocolError(f"frame excede o máximo de {self._max} bytes")
        return frames


def request(op: str, msg_id: MessageId, **fields: Any) -> Message:
    """Build a request frame."""
    return {"id": msg_id, "op": op, **fields}


def event(op: str, **fields: Any) -> Message:
    """Build an event (a message that expects no reply)."""
    return {"op": op, **fields}


def reply_ok(msg_id: MessageId, result: Any = None, **fields: Any) -> Message:
    """Build a success reply."""
    return {"id": msg_id, "ok": True, "result": result, **fields}


def reply_error(msg_id: MessageId, code: str, message: str) -> Message:
    """Build an error reply."""
    return {"id": msg_id, "ok": False, "error": {"code": code, "message": message}}


def is_reply(message: Message) -> bool:
    """True for a reply (a frame without 'op')."""
    return "op" not in message


def error_of(message: Message) -> tuple[str, str]:
    """(code, message) of an error reply; generic values when malformed."""
    err = message.get("error")
    if isinstance(err, dict):
        return str(err.get("code", "error")), str(err.get("message", ""))
    return "error", str(err or "erro desconhecido")


def is_int32(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (
        INT32_MIN <= value <= INT32_MAX)


def check_key(value: Any) -> LockKey:
    """Validate a lock key (two signed 32-bit integers) and return it as a tuple."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(is_int32(v) for v in value):
        return (int(value[0]), int(value[1]))
    raise ValueError(f"chave de lock inválida: {value!r} (esperado [int32, int32])")


def key_to_wire(key: LockKey) -> list[int]:
    """Lock key as sent on the wire."""
    checked = check_key(key)
    return [checked[0], checked[1]]


def check_payload(value: Any) -> str:
    """Validate a notify payload (text up to MAX_PAYLOAD_BYTES)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError("payload deve ser texto")
    if len(value.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload excede {MAX_PAYLOAD_BYTES} bytes")
    return value


def optional_str(message: Message, name: str) -> Optional[str]:
    """A field that must be text when present."""
    value = message.get(name)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"campo '{name}' deve ser texto")
