"""A small threaded TCP proxy that can stall (half-open) and cut its connections.

    proxy = ChaosProxy(("127.0.0.1", 5432)).start()      # or a unix socket path upstream
    ... clients connect to proxy.host:proxy.port ...
    proxy.stall()    # stop moving bytes in both directions; nothing is closed
    proxy.resume()   # bytes flow again, as if the network came back
    proxy.cut()      # reset every connection (both sides); new connections are accepted
    proxy.close()

While stalled, the proxy does not read from either side: the peers' kernels
still acknowledge what fits in the socket buffers, keepalive probes are
answered, and no FIN or RST is sent, which is what a black-holed route or a
frozen middlebox looks like to both ends.  Connections accepted during a stall
reach the upstream only after `resume()`.
"""

from __future__ import annotations

import contextlib
import itertools
import select
import socket
import struct
import threading
from typing import List, Optional, Tuple, Union

Upstream = Union[Tuple[str, int], str]  # (host, port) or a unix socket path

_POLL = 0.05
_CHUNK = 65536


class _Pair:
    """One proxied connection: the client side and the upstream side."""

    def __init__(self, client: socket.socket, number: int) -> None:
        self.client = client
        self.upstream: Optional[socket.socket] = None
        self.number = number
        self.closed = False
        self.eof = {"up": False, "down": False}


class ChaosProxy:
    """Forwards TCP connections from (host, port) to `upstream`; see the module docstring."""

    def __init__(self, upstream: Upstream, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(128)
        self.host, self.port = self._listener.getsockname()[:2]
        self._flowing = threading.Event()
        self._flowing.set()
        self._stop = threading.Event()
        self._mutex = threading.Lock()
        self._pairs: List[_Pair] = []
        self._numbers = itertools.count(1)
        self._threads: List[threading.Thread] = []
        self.accepted = 0
        self.cuts = 0
        self.bytes_forwarded = 0

    # -- control -------------------------------------------------------------------
    def start(self) -> ChaosProxy:
        thread = threading.Thread(target=self._accept_loop, daemon=True,
                                  name=f"chaos-proxy-{self.port}")
        thread.start()
        self._threads.append(thread)
        return self

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    def stall(self) -> None:
        """Stop forwarding in both directions, keeping every connection open."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again (the stalled bytes are delivered)."""
        self._flowing.set()

    def cut(self) -> int:
        """Reset every current connection on both sides; return how many were cut.

        The proxy forwards again afterwards, so clients can reconnect.
        """
        with self._mutex:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            self._close_pair(pair, reset=True)
        self.cuts += len(pairs)
        self._flowing.set()
        return len(pairs)

    def active(self) -> int:
        with self._mutex:
            return len(self._pairs)

    def close(self) -> None:
        self._stop.set()
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def __enter__(self) -> ChaosProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------
    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.connect(self.upstream)
        else:
            sock = socket.create_connection(self.upstream, timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        return sock

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                readable, _, _ = select.select([self._listener], [], [], _POLL)
                if not readable:
                    continue
                client, _ = self._listener.accept()
            except (OSError, ValueError):
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(client, next(self._numbers))
            with self._mutex:
                self._pairs.append(pair)
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(pair,), daemon=True,
                                      name=f"chaos-proxy-{self.port}-{pair.number}")
            thread.start()

    def _serve(self, pair: _Pair) -> None:
        # A connection accepted during a stall reaches the upstream only when it ends.
        while not self._flowing.wait(_POLL):
            if pair.closed or self._stop.is_set():
                return
        if pair.closed:
            return
        try:
            pair.upstream = self._connect_upstream()
        except OSError:
            self._drop(pair, reset=True)
            return
        if pair.closed:  # cut while connecting
            self._close_pair(pair, reset=True)
            return
        down = threading.Thread(target=self._pipe, args=(pair, "down"), daemon=True)
        down.start()
        self._pipe(pair, "up")
        down.join()
        self._drop(pair, reset=False)

    def _pipe(self, pair: _Pair, direction: str) -> None:
        """Copy bytes client->upstream ("up") or upstream->client ("down")."""
        while not pair.closed:
            src = pair.client if direction == "up" else pair.upstream
            dst = pair.upstream if direction == "up" else pair.client
            if src is None or dst is None:
                return
            if not self._flowing.wait(_POLL):
                continue  # stalled: leave the bytes in the kernel buffers
            try:
                readable, _, _ = select.select([src], [], [], _POLL)
                if not readable or not self._flowing.is_set():
                    continue
                data = src.recv(_CHUNK)
                if not data:
                    pair.eof[direction] = True
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
                self.bytes_forwarded += len(data)
            except (OSError, ValueError):
                self._drop(pair, reset=True)
                return

    def _drop(self, pair: _Pair, reset: bool) -> None:
        with self._mutex:
            if pair in self._pairs:
                self._pairs.remove(pair)
        self._close_pair(pair, reset)

    @staticmethod
    def _close_pair(pair: _Pair, reset: bool) -> None:
        pair.closed = True
        for sock in (pair.client, pair.upstream):
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                if reset and sock.family != socket.AF_UNIX:
                    # SO_LINGER 0: close() sends RST instead of FIN.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
