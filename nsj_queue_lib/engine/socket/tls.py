"""Optional TLS for the client/server mode (standard library `ssl` only).

OpenSSL objects must not be used by two threads at once (CPython issues 33090
and 76714), and both sides here read in one thread while others write.  So every
SSL call on a connection runs under one per-connection lock: the reader waits
for data with `select` *outside* the lock (checking `pending()` first, since
decrypted bytes already buffered are invisible to `select`) and then reads
without blocking *under* it; writers take the same lock.
"""

from __future__ import annotations

import functools
import os
import socket
import ssl
import threading
from typing import TYPE_CHECKING, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError

if TYPE_CHECKING:
    from typing_extensions import TypeGuard

TLS_RECORD_HANDSHAKE = 0x16  # first byte of a TLS ClientHello


def _check_file(path: str, variable: str) -> None:
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ConfigError(f"variável {variable}='{path}' inválida: arquivo não encontrado "
                          "ou sem permissão de leitura")


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """Server context (TLS >= 1.2) from SERVER_TLS_CERT_FILE and SERVER_TLS_KEY_FILE."""
    _check_file(cert_file, "SERVER_TLS_CERT_FILE")
    _check_file(key_file, "SERVER_TLS_KEY_FILE")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"certificado/chave TLS inválidos (SERVER_TLS_CERT_FILE="
                          f"'{cert_file}', SERVER_TLS_KEY_FILE='{key_file}'): {exc}") from None
    return context


def client_context(ca_file: Optional[str] = None) -> ssl.SSLContext:
    """Client context that verifies the server certificate and its host name: against
    SERVER_TLS_CA_FILE when given, else against the system's trusted CAs."""
    if ca_file:
        _check_file(ca_file, "SERVER_TLS_CA_FILE")
    try:
        context = ssl.create_default_context(cafile=ca_file or None)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"variável SERVER_TLS_CA_FILE='{ca_file}' inválida: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def is_tls(sock: socket.socket) -> TypeGuard[ssl.SSLSocket]:
    return isinstance(sock, ssl.SSLSocket)


def recv_locked(sock: socket.socket, lock: threading.Lock, size: int,
                timeout: Optional[float]) -> Optional[bytes]:
    """Read what is available from a TLS socket without blocking, under `lock`.

    None when no complete record arrived yet (the caller selects again).  The
    socket's timeout is restored afterwards (writers rely on it under the lock).
    """
    with lock:
        sock.settimeout(0.0)
        try:
            return sock.recv(size)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None
        finally:
            sock.settimeout(timeout)


def has_pending(sock: socket.socket, lock: threading.Lock) -> bool:
    """True when decrypted bytes wait in the TLS buffer (`select` cannot see them)."""
    if not isinstance(sock, ssl.SSLSocket):
        return False
    with lock:
        return sock.pending() > 0


def try_send_locked(sock: ssl.SSLSocket, data: bytes, timeout: Optional[float]) -> bool:
    """Write a whole frame without waiting (caller holds the connection lock).

    OpenSSL writes the whole buffer or reports want-write (no partial writes are
    enabled by CPython), so False means the peer is not reading: drop it.
    """
    sock.settimeout(0.0)
    try:
        return sock.send(data) == len(data)
    except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
        return False
    finally:
        sock.settimeout(timeout)


def shutdown(sock: socket.socket) -> None:
    """Shut the TCP connection down from any thread.

    For TLS the plain socket's shutdown is called: `SSLSocket.shutdown` drops the
    SSL object, after which a racing send would write plaintext.
    """
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def server_tls_context(settings: Settings) -> Optional[ssl.SSLContext]:
    """The server's context when SERVER_TLS_CERT_FILE and SERVER_TLS_KEY_FILE are set."""
    if not settings.server_tls_cert_file:
        return None
    return server_context(settings.server_tls_cert_file, settings.server_tls_key_file or "")


def client_tls_context(settings: Settings) -> Optional[ssl.SSLContext]:
    """The clients' context when SERVER_TLS is true (cached per CA file)."""
    if not settings.server_tls:
        return None
    return _cached_client_context(settings.server_tls_ca_file or "")


@functools.lru_cache(maxsize=8)
def _cached_client_context(ca_file: str) -> ssl.SSLContext:
    return client_context(ca_file or None)
