"""Refused connections: sent their error off the accept loop, and logged in bounded volume.

`RefusalLog` counts every connection the server refuses or drops before it
authenticated.  The first refusal of each kind from an address is logged at once
with its reason; further ones from that address within `interval` seconds are only
counted, and one summary line per address and interval gives their number, by kind,
and the total since the server started.  So a flood of any size writes a bounded
number of lines (at most one per kind and one summary per address and interval),
and the `status` counters still see every refusal.

`NotifyLog` does the same for the producers' `notify`: one DEBUG line each, one INFO
summary per interval.

`Refuser` writes the refusal frame without blocking and lingers on the socket (so the
peer reads the frame, not a reset) in its own thread: the accept loop never waits on
a refused client.  The same thread calls the periodic flushes (`on_tick`), and a final
one when the server stops.
"""

from __future__ import annotations

import ipaddress
import logging
import selectors
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

from nsj_queue_lib.engine.socket import protocol as p
from nsj_queue_lib.engine.socket.protocol import log_safe

logger = logging.getLogger(__name__)

LOG_INTERVAL = 60.0  # seconds between two lines about the same address (or the notifies)
MAX_ADDRESSES = 1024  # addresses tracked one by one; beyond, one shared entry
OTHER_ADDRESSES = "outros endereços"
_LINGER = 0.5  # seconds a refused peer gets to read the frame and close
_MAX_LINGERING = 256  # refused sockets kept lingering at once; beyond, closed at once
_TICK = 1.0

# Kinds of refusal (the summary counts by kind).  Connections closed by the client
# before `hello` (port scanners, TCP probes) and the ones cut by a stop are counted
# but logged only at DEBUG.
HANDSHAKE_LIMIT = "limite de conexões não autenticadas"
CLIENT_LIMIT = "limite de clientes"
STOPPING = "servidor em encerramento"
HELLO_TIMEOUT = "'hello' não recebido a tempo"
LEGACY = "cliente 1.2.2"
TLS_REQUIRED = "cliente sem TLS"
TLS_FAILED = "falha no handshake TLS"
TLS_UNEXPECTED = "cliente com TLS num servidor sem TLS"
REFUSED_HELLO = "'hello' recusado"
PROTOCOL = "violação de protocolo"
CLOSED_BEFORE_HELLO = "encerrada pelo cliente antes do 'hello'"
OTHER = "outros"
_QUIET = frozenset({CLOSED_BEFORE_HELLO, STOPPING})


def peer_host(peer: str) -> str:
    """The client a "host:port" peer counts as: its IPv4 address (also when written as an
    IPv4-mapped IPv6 address), or its IPv6 /64 network (one host usually has a whole /64:
    counted per address, it could take every handshake place by itself)."""
    host, sep, port = peer.rpartition(":")
    host = host if sep and port.isdigit() else peer
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


@dataclass
class _Address:
    created: float
    logged: dict[str, float] = field(default_factory=dict)  # kind -> last line written
    counts: Counter[str] = field(default_factory=Counter)  # refusals not in a line yet
    summary_at: float = 0.0


class RefusalLog:
    """Counts refusals; logs each kind once per interval and address, then summaries."""

    def __init__(self, interval: float = LOG_INTERVAL, max_addresses: int = MAX_ADDRESSES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = max(0.0, float(interval))
        self._max_addresses = max(1, max_addresses)
        self._clock = clock
        self._mutex = threading.Lock()
        self._addresses: dict[str, _Address] = {}
        self._total = 0
        self._by_kind: Counter[str] = Counter()

    def note(self, host: str, kind: str, detail: str) -> None:
        """One refused (or dropped unauthenticated) connection from `host`."""
        now = self._clock()
        with self._mutex:
            self._total += 1
            self._by_kind[kind] += 1
            if host not in self._addresses and len(self._addresses) >= self._max_addresses:
                host = OTHER_ADDRESSES
            entry = self._addresses.get(host)
            if entry is None:
                entry = self._addresses[host] = _Address(created=now, summary_at=now)
            last = entry.logged.get(kind)
            if last is not None and now - last < self.interval:
                entry.counts[kind] += 1
                return
            entry.logged[kind] = now
            total = self._total
        level = logging.DEBUG if kind in _QUIET else logging.WARNING
        logger.log(level, "Conexão de %s recusada: %s (recusas desde o início: %d; outras "
                   "deste tipo e endereço: só no resumo, a cada %d s).", host,
                   _one_line(detail), total, round(self.interval))

    def flush(self, final: bool = False) -> None:
        """Summary lines for the addresses whose interval is over (every address with
        refusals not logged yet when `final`); forgets quiet ones."""
        now = self._clock()
        lines: list[tuple[int, str, int, str, int, float]] = []
        with self._mutex:
            for host in list(self._addresses):
                entry = self._addresses[host]
                if now - entry.summary_at < self.interval and not (final and entry.counts):
                    continue
                if entry.counts:
                    count = sum(entry.counts.values())
                    kinds = ", ".join(f"{n}× {kind}" for kind, n in entry.counts.most_common())
                    quiet = all(kind in _QUIET for kind in entry.counts)
                    lines.append((logging.DEBUG if quiet else logging.WARNING, host, count,
                                  kinds, self._total, entry.summary_at))
                    entry.counts.clear()
                    entry.summary_at = now
                elif all(now - at >= self.interval for at in entry.logged.values()):
                    del self._addresses[host]  # nothing new: the next refusal logs at once
        for level, host, count, kinds, total, since in lines:
            logger.log(level, "%d conexão(ões) de %s recusada(s) nos últimos %d s (%s); "
                       "recusas desde o início: %d.", count, host,
                       round(min(self.interval, now - since)), kinds, total)

    def stats(self) -> dict[str, int]:
        with self._mutex:
            return {"total": self._total, **self._by_kind}


class NotifyLog:
    """The producers' notifies: DEBUG one by one, an INFO summary per interval."""

    def __init__(self, interval: float = LOG_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = max(0.0, float(interval))
        self._clock = clock
        self._mutex = threading.Lock()
        self._since = clock()
        self._count = 0
        self._woken = 0
        self._peers: set[str] = set()

    def note(self, peer: str, role: str, payload: str, woken: int) -> None:
        with self._mutex:
            self._count += 1
            self._woken += woken
            if len(self._peers) < MAX_ADDRESSES:
                self._peers.add(peer_host(peer))
        logger.debug("Notify%s recebido de %s (%s); %d worker(s) acordado(s).",
                     f" '{log_safe(payload)}'" if payload else "", peer,
                     log_safe(role or "cliente", 40), woken)

    def flush(self, final: bool = False) -> None:
        """The summary line, once per interval (at once when `final`)."""
        now = self._clock()
        with self._mutex:
            if now - self._since < self.interval and not final:
                return
            elapsed = now - self._since
            count, woken, hosts = self._count, self._woken, len(self._peers)
            self._since, self._count, self._woken = now, 0, 0
            self._peers.clear()
        if count:
            logger.info("%d notify(s) recebido(s) de %d endereço(s) nos últimos %d s; %d "
                        "wake-up(s) enviado(s) a workers.", count, hosts,
                        round(min(self.interval, elapsed)), woken)


class Refuser(threading.Thread):
    """Sends refusal frames and closes the sockets, off the accept loop."""

    def __init__(self, stopping: threading.Event,
                 on_tick: Optional[list[Callable[[bool], None]]] = None,
                 linger: float = _LINGER, max_lingering: int = _MAX_LINGERING) -> None:
        super().__init__(name="nsj-queue-refuser", daemon=True)
        self._stopping = stopping
        self._on_tick = list(on_tick or [])
        self._linger = linger
        self._max_lingering = max_lingering
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._mutex = threading.Lock()
        self._incoming: list[tuple[socket.socket, float]] = []
        self._lingering: dict[socket.socket, float] = {}  # socket -> close deadline

    def refuse(self, sock: socket.socket, code: str, message: str) -> None:
        """Write the error frame (never waits: a new connection's send buffer is empty),
        half-close, and let the thread close the socket once the peer did or later."""
        try:
            sock.setblocking(False)
            sock.send(p.encode(p.reply_error(None, code, message)))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            _close(sock)
            return
        with self._mutex:
            if len(self._incoming) + len(self._lingering) >= self._max_lingering \
                    or self._stopping.is_set():
                crowded = True
            else:
                crowded = False
                self._incoming.append((sock, time.monotonic() + self._linger))
        if crowded:
            _drain(sock)
            _close(sock)
            return
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # already woken (buffer full) or stopping

    def run(self) -> None:
        next_tick = time.monotonic() + _TICK
        try:
            while not self._stopping.is_set():
                self._take_incoming()
                now = time.monotonic()
                deadlines = [next_tick, *self._lingering.values()]
                wait = max(0.0, min(deadlines) - now)
                for key, _ in self._selector.select(wait):
                    if key.fileobj is self._wake_r:
                        _drain(self._wake_r)
                        continue
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if _drain(sock):  # the peer closed its side
                        self._forget(sock)
                now = time.monotonic()
                for sock, deadline in list(self._lingering.items()):
                    if now >= deadline:
                        _drain(sock)
                        self._forget(sock)
                if now >= next_tick:
                    next_tick = now + _TICK
                    for tick in self._on_tick:
                        try:
                            tick(False)
                        except Exception:  # a log summary must not end the thread
                            logger.exception("Erro no resumo periódico do servidor")
        finally:
            self._take_incoming()
            for sock in list(self._lingering):
                self._forget(sock)
            for tick in self._on_tick:  # what was only counted is logged before the end
                try:
                    tick(True)
                except Exception:
                    logger.exception("Erro no resumo periódico do servidor")
            self._selector.close()
            _close(self._wake_r)
            _close(self._wake_w)

    def wake(self) -> None:
        """End `run` promptly once `stopping` is set."""
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _take_incoming(self) -> None:
        with self._mutex:
            incoming, self._incoming = self._incoming, []
        for sock, deadline in incoming:
            try:
                self._selector.register(sock, selectors.EVENT_READ)
            except (OSError, ValueError):
                _close(sock)
                continue
            self._lingering[sock] = deadline

    def _forget(self, sock: socket.socket) -> None:
        self._lingering.pop(sock, None)
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass
        _close(sock)


def _one_line(text: str) -> str:
    """A server-written reason (client values in it are escaped already) on one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _drain(sock: socket.socket) -> bool:
    """Read what is there without waiting; True at end of stream or on error."""
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
