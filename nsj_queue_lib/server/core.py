"""The socket server of the client/server mode (one queue per server).

`Server` is independent of the database: it receives the `has_due_tasks`
callable used by the periodic check, so it can run with any implementation
(the real SQL check in `server_main`, a fake in the tests).  Given also
`due_candidates` (and the queue table, for the lock keys), it answers the
workers' `claim` with due ids locked for them (`ClaimPool`); without it, `claim`
answers null and the workers use their own candidates query.

Wake-ups: listeners of protocol version 1 and 2 get every wake-up, as before.  A
version 3 listener gets one only after it said `idle`, most recently idle first.  The
probe (every QUEUE_POLL_INTERVAL) wakes one idle listener when due tasks nobody holds
are in the candidate list, and one more per task it already saw free at the previous
probe: a woken worker takes the next task with its claim-ahead (two statements fewer
than a fresh claim), so new tasks are first left to it, and tasks still waiting one
interval later (a worker that cannot keep up, or a wake-up lost to a worker that died
or hangs) wake as many more.  A producer's notify wakes one (or the next listener to be
idle).  HALT goes to every listener.

Admission (see docs/protocol.md, "Resource bounds"): a connection holds one of
SERVER_MAX_HANDSHAKES places until its `hello` is accepted, for at most the handshake
budget.  When they are all taken, a connection from an address holding at least two
fewer of them than the address holding most takes the place of that address's oldest
one; otherwise it is refused: no number of connections from one address keeps another
address out.  After `hello`, producer-token sessions may take every client slot but
the ones reserved for the worker token.  Refusals are written off the accept loop
(`Refuser`) and logged in bounded volume (`RefusalLog`).
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
from typing import Any, Callable, Optional

from nsj_queue_lib.config import Settings
from nsj_queue_lib.engine.base import HALT_PAYLOAD
from nsj_queue_lib.engine.socket import protocol as p
from nsj_queue_lib.engine.socket.tls import server_tls_context
from nsj_queue_lib.server.accept_loop import AcceptThread
from nsj_queue_lib.server.check_tasks_thread import CheckTasksThread
from nsj_queue_lib.server.claim_pool import MAX_AGE as CLAIM_MAX_AGE
from nsj_queue_lib.server.claim_pool import ClaimPool
from nsj_queue_lib.server.listener_thread import ListenerThread
from nsj_queue_lib.server.locks import LockTable
from nsj_queue_lib.server.refusals import (
    CLIENT_LIMIT,
    CLOSED_BEFORE_HELLO,
    HANDSHAKE_LIMIT,
    HELLO_TIMEOUT,
    LEGACY,
    LOG_INTERVAL,
    OTHER,
    PROTOCOL,
    REFUSED_HELLO,
    STOPPING,
    TLS_FAILED,
    TLS_REQUIRED,
    TLS_UNEXPECTED,
    NotifyLog,
    RefusalLog,
    Refuser,
    peer_host,
)
from nsj_queue_lib.server.rpc_interpreter import RpcInterpreter, Session

logger = logging.getLogger(__name__)

SERVICE_NOTIFY = "notify"
SERVICE_LOCK = "lock"
HANDSHAKE_TIMEOUT = 2.0  # seconds an unauthenticated connection has to send a valid hello


def default_reserved_worker_slots(max_clients: int) -> int:
    """Client slots producer-token sessions never take: a fifth of MAX_CLIENT_THREADS
    (at least 1, none when there is a single slot)."""
    return max(1, max_clients // 5) if max_clients > 1 else 0


# Close reasons of unauthenticated sessions (listener_thread) -> kind of refusal.
_KINDS = (("'hello' não recebido a tempo", HELLO_TIMEOUT),
          ("protocolo incompatível", LEGACY),
          ("cliente sem TLS", TLS_REQUIRED),
          ("falha no handshake TLS", TLS_FAILED),
          ("cliente TLS recusado", TLS_UNEXPECTED),
          (f"recusado: {p.ERR_TOO_MANY_CLIENTS}", CLIENT_LIMIT),
          ("recusado:", REFUSED_HELLO),
          ("violação de protocolo", PROTOCOL),
          ("frame incompleto", PROTOCOL),
          ("conexão encerrada pelo cliente", CLOSED_BEFORE_HELLO),
          ("erro de leitura", CLOSED_BEFORE_HELLO),
          ("servidor encerrando", STOPPING),
          ("descartada", HANDSHAKE_LIMIT))


def _refusal_kind(reason: str) -> str:
    for prefix, kind in _KINDS:
        if reason.startswith(prefix):
            return kind
    return OTHER


class Server:
    """Notify and lock services over TCP; see docs/protocol.md.

    `start()` binds both ports (port 0 picks a free port; see `notify_port` and
    `lock_port`) and starts the threads; `stop()` closes everything and joins
    the threads.  `wake_workers()` sends the wake-ups (see the module docstring).
    """

    def __init__(self, has_due_tasks: Callable[[], bool], *, host: str = "0.0.0.0",
                 notify_port: int = 8770, lock_port: int = 8970,
                 token: Optional[str] = None, timeout: float = 5.0, max_clients: int = 50,
                 check_interval: float = 15.0, probe_interval: Optional[float] = None,
                 accept_wait: float = 30.0,
                 heartbeat_interval: Optional[float] = None, channel: str = "",
                 max_frame: int = p.MAX_FRAME_BYTES, producer_token: Optional[str] = None,
                 max_handshakes: int = 8, max_locks_per_client: int = 10_000,
                 handshake_timeout: Optional[float] = None,
                 tls_context: Optional[ssl.SSLContext] = None,
                 due_candidates: Optional[Callable[[int], list[int]]] = None,
                 queue_table: str = "", claim_max_age: float = CLAIM_MAX_AGE,
                 reserved_worker_slots: Optional[int] = None,
                 log_interval: float = LOG_INTERVAL) -> None:
        if max_clients < 1:
            raise ValueError("max_clients deve ser maior que zero")
        if reserved_worker_slots is None:
            reserved_worker_slots = default_reserved_worker_slots(max_clients)
        self.host = host
        self.token = token or None
        self.producer_token = producer_token or None
        self.max_handshakes = max_handshakes
        self.max_locks_per_client = max_locks_per_client
        # Unauthenticated connections get a short budget and a small limit of their own.
        self.handshake_timeout = min(handshake_timeout or HANDSHAKE_TIMEOUT, float(timeout))
        self.timeout = float(timeout)
        self.heartbeat_interval = float(heartbeat_interval or timeout)
        self.channel = channel
        self.max_clients = max_clients
        # Slots producer-token sessions cannot take (kept for workers, CLI and health).
        self.reserved_worker_slots = max(0, min(reserved_worker_slots, max_clients - 1))
        self.refusals = RefusalLog(log_interval)
        self.notifies = NotifyLog(log_interval)
        self.tls_context = tls_context
        self.locks = LockTable()
        self._has_due_tasks = has_due_tasks
        self.claims: Optional[ClaimPool] = None
        if due_candidates is not None and queue_table:
            self.claims = ClaimPool(due_candidates, queue_table, self.locks,
                                    max_age=claim_max_age)
            # The probe reads the candidates themselves: one query serves both.
            self._has_due_tasks = self.claims.refresh
        self._ports = {SERVICE_NOTIFY: notify_port, SERVICE_LOCK: lock_port}
        self._check_interval = check_interval
        self._probe_interval = probe_interval
        self._accept_wait = accept_wait
        self._max_frame = max_frame
        self._interpreter = RpcInterpreter(self)
        self._mutex = threading.Lock()
        self._clients: dict[int, ListenerThread] = {}
        self._listening: set[int] = set()
        # Version 3 listeners waiting for work, in the order they said `idle` (a dict
        # used as an ordered set: the last one is woken first).
        self._idle: dict[int, None] = {}
        # A notify came while no version 3 listener was idle: the next one to say `idle`
        # is woken at once (its claim reads the news).
        self._owed = False
        self._free_before: set[int] = set()  # free due ids at the previous probe
        # Connected, not authenticated yet, within the handshake budget: conn_id -> the
        # peer's address, oldest first (each holds one SERVER_MAX_HANDSHAKES place).
        self._pending: dict[int, str] = {}
        self._authenticated: set[int] = set()  # sessions holding a client slot
        self._producers: set[int] = set()  # of which with the producer token
        self._refuser: Optional[Refuser] = None
        self._ids = itertools.count(1)
        self._sockets: dict[str, socket.socket] = {}
        self._threads: list[Any] = []
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._wake_r: Optional[socket.socket] = None
        self._wake_w: Optional[socket.socket] = None
        self._started = False

    @classmethod
    def from_settings(cls, settings: Settings, has_due_tasks: Callable[[], bool],
                      due_candidates: Optional[Callable[[int], list[int]]] = None) -> Server:
        """Server configured from the client/server variables of `settings`."""
        return cls(has_due_tasks, host=settings.server_bind_address,
                   notify_port=settings.notify_service_port,
                   lock_port=settings.lock_service_port, token=settings.server_auth_token,
                   timeout=settings.timeout_socket_message,
                   max_clients=settings.max_client_threads,
                   check_interval=settings.check_tasks_interval,
                   probe_interval=settings.queue_poll_interval,
                   accept_wait=settings.lock_service_wait_conn_interval,
                   channel=settings.queue_name or "",
                   producer_token=settings.server_producer_token,
                   max_handshakes=settings.server_max_handshakes,
                   max_locks_per_client=settings.server_max_locks_per_client,
                   tls_context=server_tls_context(settings),
                   due_candidates=due_candidates, queue_table=settings.queue_table or "")

    # -- life cycle ----------------------------------------------------------------
    def start(self) -> None:
        """Bind both ports and start the threads (raises OSError if a port is taken)."""
        if self._started:
            raise RuntimeError("servidor já iniciado")
        try:
            for service, port in self._ports.items():
                self._sockets[service] = self._bind(port)
                self._ports[service] = self._sockets[service].getsockname()[1]
        except OSError:
            for sock in self._sockets.values():
                sock.close()
            self._sockets.clear()
            raise
        self._started = True
        self._wake_r, self._wake_w = socket.socketpair()
        self._refuser = Refuser(self._stopping, on_tick=[self.refusals.flush,
                                                         self.notifies.flush])
        self._threads.append(self._refuser)
        for service, sock in self._sockets.items():
            self._threads.append(AcceptThread(service, sock, self._wake_r, self._stopping,
                                              self._accept_wait, self._admit))
        self._threads.append(CheckTasksThread(self._has_due_tasks, self._probe_wake,
                                              self.wakeable_count, self._check_interval,
                                              self._stopping, self._probe_interval))
        for thread in self._threads:
            thread.start()
        logger.info("Servidor da fila '%s' no ar: notify em %s:%d, locks em %s:%d, até %d "
                    "clientes, autenticação %s, TLS %s.", self.channel, self.host,
                    self.notify_port, self.host, self.lock_port, self.max_clients,
                    "ativa" if self.token else "DESATIVADA (defina SERVER_AUTH_TOKEN)",
                    "ativo" if self.tls_context else "desativado")

    def _bind(self, port: int) -> socket.socket:
        family, kind, proto, _, address = socket.getaddrinfo(
            self.host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            # Room for bursts: refusals no longer slow the accept loop down.
            sock.listen(max(self.max_clients + self.max_handshakes, 128))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    def stop(self, timeout: Optional[float] = None) -> None:
        """Close the listeners and every client connection, and join the threads."""
        if not self._started or self._stopping.is_set():
            self._stopped.wait(timeout)
            return
        logger.info("Encerrando o servidor...")
        self._stopping.set()
        if self._wake_w is not None:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
        join_wait = timeout if timeout is not None else self.timeout + 2.0
        for thread in self._threads:
            if isinstance(thread, AcceptThread):
                thread.join(join_wait)
        for sock in self._sockets.values():
            sock.close()
        if self._refuser is not None:
            self._refuser.wake()
        with self._mutex:
            clients = list(self._clients.values())
        for client in clients:
            client.abort("servidor encerrando")
        for client in clients:
            client.join(join_wait)
        for thread in self._threads:
            thread.join(join_wait)
        for wake in (self._wake_r, self._wake_w):
            if wake is not None:
                wake.close()
        self._stopped.set()
        logger.info("Servidor encerrado.")

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the server has stopped; True if it has."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def notify_port(self) -> int:
        return self._ports[SERVICE_NOTIFY]

    @property
    def lock_port(self) -> int:
        return self._ports[SERVICE_LOCK]

    # -- clients -------------------------------------------------------------------
    def _admit(self, sock: socket.socket, peer: str, service: str) -> None:
        host = peer_host(peer)
        evicted: Optional[ListenerThread] = None
        with self._mutex:
            if self._stopping.is_set():
                refusal: Optional[tuple[str, str, str]] = (
                    STOPPING, p.ERR_SERVER_STOPPING, "servidor em encerramento")
            elif len(self._pending) >= self.max_handshakes \
                    and (evicted := self._evictable(host)) is None:
                refusal = (HANDSHAKE_LIMIT, p.ERR_TOO_MANY_CLIENTS,
                           f"limite de {self.max_handshakes} conexões ainda não autenticadas "
                           "atingido (SERVER_MAX_HANDSHAKES), a maior parte deste endereço; "
                           "tente novamente mais tarde")
            else:
                refusal = None
                conn_id = next(self._ids)
                client = ListenerThread(sock, Session(conn_id, peer, service), self._interpreter,
                                        timeout=self.timeout,
                                        heartbeat_interval=self.heartbeat_interval,
                                        on_closed=self._closed, max_frame=self._max_frame,
                                        handshake_timeout=self.handshake_timeout,
                                        tls_context=self.tls_context,
                                        on_handshake_over=self._handshake_over)
                self._clients[conn_id] = client
                self._pending[conn_id] = host
        if evicted is not None:
            evicted.abort("descartada: conexões não autenticadas demais do mesmo endereço "
                          f"(SERVER_MAX_HANDSHAKES={self.max_handshakes})")
        if refusal is not None:
            self.refusals.note(host, refusal[0], f"{refusal[2]} ({service})")
            self._refuse(sock, refusal[1], refusal[2])
            return
        try:
            client.start()
        except RuntimeError as exc:  # cannot start a new thread
            with self._mutex:
                self._clients.pop(conn_id, None)
                self._pending.pop(conn_id, None)
            self.refusals.note(host, OTHER, f"servidor sem recursos para o cliente: {exc}")
            self._refuse(sock, p.ERR_SERVER_RESOURCES, "servidor sem recursos para o cliente")

    def _evictable(self, host: str) -> Optional[ListenerThread]:
        """With every handshake place taken (under the mutex): the oldest pending
        connection of the address holding most places, when `host` holds at least two
        fewer (its place goes to `host`); None when `host` must be refused."""
        counts: dict[str, int] = {}
        for pending_host in self._pending.values():
            counts[pending_host] = counts.get(pending_host, 0) + 1
        heaviest = max(counts, key=counts.__getitem__)
        if counts.get(host, 0) + 2 > counts[heaviest]:
            return None
        victim = next(c for c, h in self._pending.items() if h == heaviest)
        del self._pending[victim]
        return self._clients.get(victim)

    def _handshake_over(self, client: ListenerThread) -> None:
        """The handshake budget ran out: the connection (about to be closed) gives its
        place back at once."""
        with self._mutex:
            self._pending.pop(client.session.conn_id, None)

    def _refuse(self, sock: socket.socket, code: str, message: str) -> None:
        """Error frame and close, without waiting (see `Refuser`)."""
        if self._refuser is not None and self._refuser.is_alive():
            self._refuser.refuse(sock, code, message)
            return
        try:
            sock.setblocking(False)
            sock.send(p.encode(p.reply_error(None, code, message)))
        except OSError:
            pass
        finally:
            sock.close()

    def _closed(self, client: ListenerThread, reason: str) -> None:
        session = client.session
        with self._mutex:
            self._clients.pop(session.conn_id, None)
            self._listening.discard(session.conn_id)
            self._idle.pop(session.conn_id, None)
            self._pending.pop(session.conn_id, None)
            self._authenticated.discard(session.conn_id)
            self._producers.discard(session.conn_id)
        released = self.locks.release_all(session.conn_id)
        if not session.authenticated:
            # Never authenticated: one more refusal, logged in bounded volume.
            self.refusals.note(peer_host(session.peer), _refusal_kind(reason),
                               f"{reason.removeprefix('recusado: ')} ({session.service})")
            return
        normal = reason.startswith(("conexão encerrada", "servidor encerrando"))
        level = logging.DEBUG if normal and not released else (
            logging.INFO if normal else logging.WARNING)
        logger.log(level, "Sessão %d (%s, %s) encerrada: %s; %d lock(s) liberado(s).",
                   session.conn_id, session.peer, session.service, reason, released)

    def promote(self, conn_id: int, producer: bool = False) -> Optional[str]:
        """An authenticated session takes a client slot; the refusal text when none is
        free (producer-token sessions leave `reserved_worker_slots` free)."""
        with self._mutex:
            if conn_id not in self._pending:
                return ("conexão descartada antes do 'hello' (SERVER_MAX_HANDSHAKES); "
                        "tente novamente")
            if len(self._authenticated) >= self.max_clients:
                return (f"limite de {self.max_clients} clientes conectados atingido "
                        "(MAX_CLIENT_THREADS); tente novamente mais tarde")
            if producer and len(self._producers) >= self.max_clients - self.reserved_worker_slots:
                return (f"limite de {self.max_clients - self.reserved_worker_slots} sessões com "
                        f"o token de produtor atingido ({self.reserved_worker_slots} das "
                        f"{self.max_clients} vagas de MAX_CLIENT_THREADS ficam reservadas ao "
                        "token dos workers); tente novamente mais tarde")
            del self._pending[conn_id]
            self._authenticated.add(conn_id)
            if producer:
                self._producers.add(conn_id)
            return None

    def set_listening(self, conn_id: int, listening: bool) -> None:
        with self._mutex:
            if listening and conn_id in self._clients:
                self._listening.add(conn_id)
            else:
                self._listening.discard(conn_id)
                self._idle.pop(conn_id, None)

    def set_idle(self, conn_id: int) -> bool:
        """A version 3 listener waits for work: it gets the next targeted wake-up (most
        recently idle first).  False when the session does not listen."""
        with self._mutex:
            if conn_id not in self._listening:
                return False
            self._idle.pop(conn_id, None)
            self._idle[conn_id] = None
            owed, self._owed = self._owed, False
        pool = self.claims
        if owed:
            self.wake_workers(wanted=1)
        elif pool is not None and pool.free():
            # Due tasks nobody holds (tasks that came while every worker was busy): no
            # need to wait for the probe.
            self.wake_workers(wanted=1)
        return True

    def listener_count(self) -> int:
        with self._mutex:
            return len(self._listening)

    def wakeable_count(self) -> int:
        """Listeners a wake-up would reach now: every version 1 and 2 listener, and the
        idle version 3 ones (the probe reads nothing while this is 0)."""
        with self._mutex:
            return len(self._idle) + sum(1 for c in self._listening if not self._targeted(c))

    def _targeted(self, conn_id: int) -> bool:
        client = self._clients.get(conn_id)
        return client is not None and client.session.version >= 3

    def wake_workers(self, payload: str = "", wanted: Optional[int] = None,
                     owe: bool = False) -> int:
        """Send a wake-up to the listening workers; return how many got it.

        HALT goes to every listener; any other wake-up to every listener of protocol
        version 1 and 2 and to `wanted` idle version 3 listeners (None: as many as the
        due tasks nobody holds in the candidate list; every idle one without a list).
        With `owe`, a wake-up that found no idle listener goes to the next one idle."""
        if payload != HALT_PAYLOAD and wanted is None:
            wanted = self.claims.free() if self.claims is not None else None
        with self._mutex:
            if payload == HALT_PAYLOAD:
                ids = list(self._listening)
                self._idle.clear()
            else:
                ids = [c for c in self._listening if not self._targeted(c)]
                count = len(self._idle) if wanted is None else max(0, wanted)
                while self._idle and count > 0:
                    conn_id, _ = self._idle.popitem()  # the most recently idle
                    ids.append(conn_id)
                    count -= 1
                if count > 0 and owe:
                    self._owed = True
            targets = [self._clients[c] for c in ids if c in self._clients]
        if not targets:
            return 0
        message = p.event(p.OP_NOTIFY, channel=self.channel, payload=payload)
        # Never blocks: a client that does not read is dropped, not waited for.
        return sum(1 for client in targets if client.send_event(message))

    def _probe_wake(self) -> int:
        """The probe's wake-up (due tasks were found): every version 1 and 2 listener;
        one idle version 3 listener, plus one per task that was free at the previous
        probe too (see the module docstring)."""
        pool = self.claims
        if pool is None:
            return self.wake_workers()
        free = pool.free_ids()
        lagging = len(free & self._free_before)
        self._free_before = free
        return self.wake_workers(wanted=max(lagging, 1) if free else 0)

    def notify_received(self, payload: str = "") -> int:
        """A client's `notify` (a producer's "work available", or HALT): the next claim
        reads the candidates again, and one idle version 3 listener is woken (its claim
        wakes more when the list has more), or the next one to be idle; see
        `wake_workers`."""
        if self.claims is not None:
            self.claims.invalidate()
        return self.wake_workers(payload, wanted=1, owe=True)

    def claim_tasks(self, conn_id: int, namespace: Any, limit: int,
                    version: int = 2) -> Optional[list[int]]:
        """Due task ids locked for session `conn_id` ([] when none is known); None when
        this server does not hand out tasks for that key namespace (no database, or
        another queue table): the worker then claims on its own.  For version 3 sessions
        [] means that no due task is free (a fresh read) and None also that the list could
        not be read."""
        pool = self.claims
        if pool is None or namespace != pool.namespace:
            return None
        return pool.take(conn_id, limit, self.max_locks_per_client,
                         authoritative=version >= 3)

    def stats(self) -> dict[str, Any]:
        """Counters for monitoring and tests."""
        with self._mutex:
            clients, listening = len(self._clients), len(self._listening)
            pending = len(self._pending)
            idle = len(self._idle)
            authenticated, producers = len(self._authenticated), len(self._producers)
        return {"clients": clients, "handshaking": pending, "listeners": listening,
                "authenticated": authenticated, "producers": producers,
                "reserved_worker_slots": self.reserved_worker_slots,
                "refused": self.refusals.stats(),
                "locks": len(self.locks),
                "lock_owners": self.locks.owners(), "max_clients": self.max_clients,
                "threads": threading.active_count(), "channel": self.channel,
                "requests": self._interpreter.request_counts(),
                "claimed": self.claims.handed_out if self.claims else 0,
                "idle": idle, "reads": self.claims.reads if self.claims else 0}
