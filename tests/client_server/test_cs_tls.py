"""Optional TLS of the client/server mode, with the real server and real workers on
PostgreSQL: certificates of a throwaway CA made with the `openssl` command line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import List

import pytest

from nsj_queue_lib.engine.socket import protocol as p
from nsj_queue_lib.engine.socket.connection import SocketConnection
from nsj_queue_lib.engine.socket.notifier import SocketNotifier
from nsj_queue_lib.engine.socket.tls import client_context
from nsj_queue_lib.exceptions import ConfigError
from tests.fixtures.processes import run_python
from tests.fixtures.queue import TOKEN, Queue
from tests.fixtures.servers import SERVER_READY, QueueServerProc
from tests.fixtures.waiting import eventually
from tests.server.socket_server_helpers import HOST, notify_past_a_stuck_client


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_ca(directory: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=directory)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """ca.pem signs server.pem (SAN 127.0.0.1 and localhost); other-ca.pem signs nothing."""
    if shutil.which("openssl") is None:
        if os.environ.get("CI"):
            pytest.fail("comando openssl ausente (necessário para os testes de TLS)")
        pytest.skip("comando openssl ausente")
    directory = tmp_path_factory.mktemp("tls")
    _make_ca(directory, "ca")
    _make_ca(directory, "other-ca")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
             "-keyout", "server.key", "-out", "server.csr", cwd=directory)
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem",
             cwd=directory)
    return directory


def _tls_server(q: Queue, certs: Path, **extra: str) -> QueueServerProc:
    """The real server with TLS (the plain-text readiness probe of QueueServerProc cannot
    talk to it: ready = its log line plus a TLS client that gets a pong)."""
    srv = QueueServerProc(q.env(SERVER_TLS_CERT_FILE=certs / "server.pem",
                                SERVER_TLS_KEY_FILE=certs / "server.key", **extra),
                          q.log_dir / f"{q.schema}-tls-server.log", q.notify_port, q.lock_port,
                          TOKEN)
    q.servers.append(srv)

    def ready() -> bool:
        if srv.proc.poll() is not None:
            raise AssertionError(f"servidor saiu com {srv.proc.returncode}:\n{srv.log()}")
        return SERVER_READY in srv.log()

    eventually(ready, 20, message="servidor TLS pronto")
    assert "TLS ativo" in srv.log()
    return srv


class _Tap:
    """A tiny TCP proxy that records every byte going through it (both directions)."""

    def __init__(self, target_port: int) -> None:
        self.listener = socket.create_server((HOST, 0))
        self.port = self.listener.getsockname()[1]
        self.target_port = target_port
        self.seen: List[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def data(self) -> bytes:
        with self._lock:
            return b"".join(self.seen)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((HOST, self.target_port))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                with self._lock:
                    self.seen.append(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


def test_workers_run_tasks_over_tls_and_the_token_never_travels_in_clear(pg_socket_queue, certs):
    _tls_server(pg_socket_queue, certs)
    tap = _Tap(pg_socket_queue.notify_port)
    try:
        # The worker's task locks and wake-ups go through the recording proxy.
        worker = pg_socket_queue.start_ready_worker(SERVER_TLS="true",
                                                    SERVER_TLS_CA_FILE=certs / "ca.pem",
                                        NOTIFY_SERVICE_PORT=tap.port)
        ids = pg_socket_queue.insert_many([{"efeito": f"tls-{n}"} for n in range(4)])
        for task_id in ids:
            pg_socket_queue.wait_status(task_id, "sucesso", timeout=15)
        assert [r["status"] for r in pg_socket_queue.rows()] == ["sucesso"] * 4
        effects = pg_socket_queue.effects()
        assert sorted(e["tarefa_id"] for e in effects) == ids
        assert {e["pid"] for e in effects} == {worker.pid}
        captured = tap.data()
        assert captured[:1] == b"\x16"  # a TLS handshake record, not a JSON frame
        assert len(captured) > 2000
        assert TOKEN.encode() not in captured
        assert b'"hello"' not in captured and b"try_lock" not in captured
    finally:
        tap.close()


def test_plaintext_client_and_wrong_ca_are_refused_with_clear_errors(pg_socket_queue, certs):
    srv = _tls_server(pg_socket_queue, certs)
    plain = SocketConnection(HOST, pg_socket_queue.notify_port, TOKEN, 2.0)
    with pytest.raises(ConfigError, match="este servidor exige TLS: configure SERVER_TLS=true"):
        plain.request(p.OP_PING)
    plain.close()
    wrong = SocketConnection(HOST, pg_socket_queue.notify_port, TOKEN, 2.0,
                             tls_context=client_context(str(certs / "other-ca.pem")))
    with pytest.raises(ConfigError, match=r"certificado TLS do servidor .* recusado: "
                                          r".*confira SERVER_TLS_CA_FILE"):
        wrong.request(p.OP_PING)
    wrong.close()
    # The right CA, checked against the host name "localhost" too.
    good = SocketConnection("localhost", pg_socket_queue.notify_port, TOKEN, 2.0,
                            tls_context=client_context(str(certs / "ca.pem")))
    try:
        assert good.request(p.OP_PING)[0] == "pong"
    finally:
        good.close()
    log = srv.log()
    assert "cliente sem TLS recusado (o servidor exige TLS)" in log
    assert "falha no handshake TLS" in log
    # A worker process without TLS stops with the same clear message.
    worker = pg_socket_queue.start_worker()
    eventually(lambda: worker.proc.poll() is not None, 20, message="worker sem TLS encerrado")
    assert worker.proc.returncode == 2, worker.log()
    assert "este servidor exige TLS" in worker.log()
    # And so does a TLS worker that does not trust the server's CA.
    doubter = pg_socket_queue.start_worker(SERVER_TLS="true",
                                           SERVER_TLS_CA_FILE=certs / "other-ca.pem")
    eventually(lambda: doubter.proc.poll() is not None, 20, message="worker com CA errada")
    assert doubter.proc.returncode == 2, doubter.log()
    assert "certificado TLS do servidor" in doubter.log()
    assert "confira SERVER_TLS_CA_FILE" in doubter.log()


def test_tls_client_against_a_plaintext_server(pg_socket_queue, certs):
    srv = pg_socket_queue.start_server()
    conn = SocketConnection(HOST, pg_socket_queue.notify_port, TOKEN, 2.0,
                            tls_context=client_context(str(certs / "ca.pem")))
    with pytest.raises(ConfigError, match=r"falha na negociação TLS .*Sem TLS no servidor, "
                                          r"use SERVER_TLS=false"):
        conn.request(p.OP_PING)
    conn.close()
    eventually(lambda: "o cliente usa TLS (SERVER_TLS=true), mas este servidor está sem TLS"
               in srv.log(), 5, message="aviso do servidor")


@pytest.mark.parametrize("variables, named", [
    ({"SERVER_TLS_CERT_FILE": "/nao/existe.pem", "SERVER_TLS_KEY_FILE": "/nao/existe.key"},
     "variável SERVER_TLS_CERT_FILE='/nao/existe.pem' inválida: arquivo não encontrado"),
    ({"SERVER_TLS_CERT_FILE": "server.pem"}, "variável SERVER_TLS_KEY_FILE não definida"),
    ({"SERVER_TLS_CERT_FILE": "ca.key", "SERVER_TLS_KEY_FILE": "server.key"},
     "certificado/chave TLS inválidos (SERVER_TLS_CERT_FILE="),
])
def test_invalid_tls_files_stop_the_server_with_exit_2(pg_socket_queue, certs, variables, named):
    env = {k: (v if v.startswith("/") else str(certs / v)) for k, v in variables.items()}
    srv = QueueServerProc(pg_socket_queue.env(**env), pg_socket_queue.log_dir / "bad-tls.log",
                          pg_socket_queue.notify_port,
                          pg_socket_queue.lock_port, TOKEN)
    pg_socket_queue.servers.append(srv)
    eventually(lambda: srv.proc.poll() is not None, 20, message="servidor encerrado")
    assert srv.proc.returncode == 2
    assert named in srv.log()


def test_a_tls_client_that_stops_reading_is_dropped_without_delaying_wake_ups(pg_socket_queue,
                                                                              certs):
    """The never-block wake-up path with SSLSocket (SSLWantWriteError = slow client), while
    the healthy worker's reader and the server's writers share each TLS connection."""
    srv = _tls_server(pg_socket_queue, certs, TIMEOUT_SOCKET_MESSAGE="5")
    context = client_context(str(certs / "ca.pem"))
    stuck = context.wrap_socket(socket.create_connection((HOST, pg_socket_queue.notify_port),
                                                         timeout=5),
                                server_hostname=HOST)
    # (version 2: a listener woken by every notify, so unread wake-ups fill its buffer)
    stuck.sendall(p.encode(p.request(p.OP_HELLO, 1, version=2, token=TOKEN,
                                     role="worker", queue=pg_socket_queue.fila))
                  + p.encode(p.request(p.OP_LISTEN, 2)))
    decoder, replies = p.FrameDecoder(), []
    while len(replies) < 2:
        replies += decoder.feed(stuck.recv(65536))
    assert all(r.get("ok") for r in replies), replies  # from now on it never reads
    with SocketNotifier(HOST, pg_socket_queue.notify_port, TOKEN, 5.0, queue=pg_socket_queue.fila,
                        tls_context=context) as worker, \
            SocketNotifier(HOST, pg_socket_queue.lock_port, TOKEN, 5.0, queue=pg_socket_queue.fila,
                           tls_context=context) as producer:
        worker.listen()
        slowest = notify_past_a_stuck_client(worker, producer, srv.log)
        assert slowest < 0.5, slowest
    eventually(lambda: "cliente lento" in srv.log(), 5, message="cliente lento desconectado")
    stuck.close()


def test_a_listener_thread_stopped_by_a_server_that_now_requires_tls_stops_the_worker(
        pg_socket_queue, certs, tmp_path):
    """The listener thread of a QUEUE_CONCURRENCY worker ends only on a configuration
    error (a lost connection is retried).  For real: the socket server comes back with
    TLS required and the listener's reconnection is refused (ConfigError).  Before, only
    that thread ended: the worker ran on, deaf to wake-ups and HALT, with nothing to
    restart it.  Now the failure is logged, the health state says why at once, and the
    worker stops as on SIGTERM and exits with code 2 (as a single-threaded worker does
    on a configuration error), so that its supervisor restarts it."""
    srv = pg_socket_queue.start_server()
    health_file = tmp_path / "worker.health"
    env = pg_socket_queue.env(QUEUE_HEALTH_FILE=str(health_file))
    worker = pg_socket_queue.start_ready_worker(QUEUE_CONCURRENCY="2",
                                                QUEUE_HEALTH_FILE=str(health_file),
                                    QUEUE_WAIT_NOTIFY_INTERVAL="300")
    try:
        eventually(lambda: _probe(env).returncode == 0, 30, message="worker saudável")
        srv.stop()
        _tls_server(pg_socket_queue, certs)
        try:
            code = worker.wait_exit(60)
        except subprocess.TimeoutExpired:
            raise AssertionError("o worker seguiu rodando sem o listener:\n"
                                 + worker.log()) from None
        assert code == 2, worker.log()
        log = worker.log()
        assert "este servidor exige TLS" in log
        stopped = log.index("Listener parado por erro de configuração")
        # The health state said so before the worker ended (what /healthz and the file
        # showed while the task threads finished).
        unhealthy = log.index("worker não saudável", stopped)
        assert "listener parado por erro de configuração" in log[unhealthy:].splitlines()[0]
        assert unhealthy < log.index("[MainThread] nsj_queue_lib.runtime.supervisor")  # exit
        assert _probe(env).returncode == 1  # the ended worker's file is gone
    finally:
        worker.stop(timeout=20)


def _probe(env: dict):
    return run_python(["-m", "nsj_queue_lib.health"], env=env)
