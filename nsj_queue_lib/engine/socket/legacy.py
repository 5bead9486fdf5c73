"""Recognising the client/server protocol of nsj-queue-lib 1.2.2 and refusing it clearly.

1.2.2's socket protocol has no handshake and no version: frames are text ended by
'###END###'; its workers connect to the notify port and wait in silence, and its
helper threads send 'try_lock(n)###END###'.  The 2.x protocol (docs/protocol.md)
starts with a versioned 'hello'.  The two never interoperate: a 2.x server answers
a 1.2.2 client with one 1.2.2-framed error naming both versions and closes (the
1.2.2 worker logs it and runs nothing); a 2.x worker that receives a 1.2.2 frame
stops with a configuration error naming both versions.
"""

from __future__ import annotations

import re

from nsj_queue_lib.engine.socket.protocol import PROTOCOL_VERSION
from nsj_queue_lib.version import __version__

LEGACY_END = b"###END###"
LEGACY_VERSION = "1.2.2"
_LEGACY_RPC = re.compile(rb"^\s*(try_lock|release_lock|sleep|halt|halt_server|close)\(")


def looks_legacy(data: bytes) -> bool:
    """True when the first bytes of a connection are 1.2.2 protocol."""
    return LEGACY_END in data or bool(_LEGACY_RPC.match(data))


def versions_text() -> str:
    return (f"nsj-queue-lib {__version__} fala o protocolo cliente/servidor versão "
            f"{PROTOCOL_VERSION} (com handshake 'hello'); o outro lado fala o protocolo da "
            f"nsj-queue-lib {LEGACY_VERSION} (sem versão, mensagens terminadas em ###END###)")


def server_refusal() -> bytes:
    """What a 2.x server sends a 1.2.2 client before closing (in 1.2.2's framing)."""
    text = (f"ERRO: protocolo incompatível: este servidor {versions_text()}. Atualize "
            "servidor e workers juntos para a mesma versão.")
    return text.encode("utf-8") + LEGACY_END


def client_refusal() -> bytes:
    """What a 2.x worker answers a 1.2.2 server before giving up (in 1.2.2's framing)."""
    text = (f"ERRO: protocolo incompatível: este worker {versions_text()}. Atualize "
            "servidor e workers juntos para a mesma versão.")
    return text.encode("utf-8") + LEGACY_END


def client_error(address: str) -> str:
    """The 2.x worker's configuration error when its server is a 1.2.2 one."""
    return (f"O servidor de filas em {address} é da nsj-queue-lib {LEGACY_VERSION}: este worker "
            f"{versions_text()}. Servidor e workers precisam da mesma versão: atualize o "
            "servidor (python -m nsj_queue_lib.server.server_main da 2.x) ou use workers 1.2.2.")
