"""Client/server acceptance helpers: one queue on MariaDB or PostgreSQL, the real socket
server (python -m nsj_queue_lib.server.server_main) and real worker processes.

`CsQueue` gives the same API on both databases: SQL helpers that quote for the
dialect, producing through QueueClient, and processes (server and workers) that
share the queue's client/server settings (random free ports, token, timeouts).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from nsj_queue_lib.client.lock_client import SocketLocker
from nsj_queue_lib.config import Settings
from nsj_queue_lib.coordination.base import task_lock_key
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.schema import render_schema
from nsj_queue_lib.queue_client import QueueClient
from tests.fixtures.servers import QueueServerProc
from tests.helpers import READY_MARK, WorkerProc, eventually
from tests.mysql_server import split_statements
from tests.server.socket_server_helpers import HOST, RawClient, free_port

TOKEN = "segredo-cs-aceitacao"
BOOL_COLUMNS = ("dead", "pub_sub", "reenfileirado", "estouro_tentativas", "ativo")
WAITING = "status IN ('pendente', 'agendada', 'processando')"


class CsQueue:
    """One queue (its own PostgreSQL schema or MariaDB database) in client/server mode."""

    def __init__(self, kind: str, server: Any, schema: str, fila: str, log_dir: Path) -> None:
        self.kind = kind
        self.server = server
        self.schema = schema
        self.fila = fila
        self.table = f"{schema}.{fila}"
        self.sub_table = f"{schema}.{fila}_subscriber"
        self.log_dir = log_dir
        self.conn = server.connect()
        self.notify_port = free_port()
        self.lock_port = free_port()
        while self.lock_port == self.notify_port:
            self.lock_port = free_port()
        self.timeout = 2.0
        # MySQL native mode (no socket server): CLIENT_SERVER_MODE=false on MariaDB.
        self.native = False
        self.workers: List[WorkerProc] = []
        self.servers: List[QueueServerProc] = []
        self.lockers: List[SocketLocker] = []

    @property
    def is_mysql(self) -> bool:
        return self.kind == "mariadb"

    @classmethod
    def create(cls, kind: str, server: Any, log_dir: Path) -> CsQueue:
        schema = f"cs_{uuid.uuid4().hex[:10]}"
        q = cls(kind, server, schema, f"fila_{uuid.uuid4().hex[:8]}", log_dir)
        if q.is_mysql:
            for stmt in split_statements(render_schema(MYSQL, schema, q.fila)):
                q.sql(stmt)
            q.sql(f"CREATE TABLE `{schema}`.efeitos (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                  "tarefa_id BIGINT, chave TEXT, tipo VARCHAR(30), pid INT, "
                  "criado DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6))")
        else:
            q.sql(f'CREATE SCHEMA "{schema}"')
            q.sql(render_schema(POSTGRES, schema, q.fila))
            q.sql(f'CREATE TABLE "{schema}".efeitos (id serial PRIMARY KEY, tarefa_id bigint, '
                  "chave text, tipo text, pid int, criado timestamptz DEFAULT clock_timestamp())")
        return q

    def destroy(self) -> None:
        for locker in self.lockers:
            locker.close()
        for proc in self.workers:
            proc.stop(timeout=10)
        for srv in self.servers:
            srv.stop(timeout=10)
        try:
            if self.is_mysql:
                self.sql(f"DROP DATABASE IF EXISTS `{self.schema}`")
            else:
                self.sql(f'DROP SCHEMA "{self.schema}" CASCADE')
        finally:
            self.conn.close()

    # -- SQL ------------------------------------------------------------------
    def quote(self, name: str) -> str:
        return f"`{name}`" if self.is_mysql else f'"{name}"'

    @property
    def qtable(self) -> str:
        return f"{self.quote(self.schema)}.{self.quote(self.fila)}"

    @property
    def qsub_table(self) -> str:
        return f"{self.quote(self.schema)}.{self.quote(self.fila + '_subscriber')}"

    def sql(self, text: str, params: Any = None) -> List[dict]:
        with self.conn.cursor() as cur:
            cur.execute(text, params)
            if cur.description is None:
                return []
            cols = [d[0] for d in cur.description]
            rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        for row in rows:  # MySQL BOOLEAN is TINYINT
            for col in BOOL_COLUMNS:
                if isinstance(row.get(col), int):
                    row[col] = bool(row[col])
        return rows

    def value(self, text: str, params: Any = None) -> Any:
        rows = self.sql(text, params)
        return next(iter(rows[0].values())) if rows else None

    def rows(self, where: str = "TRUE", params: Any = None) -> List[dict]:
        return self.sql(f"SELECT * FROM {self.qtable} WHERE {where} ORDER BY id", params)

    def row(self, task_id: int) -> dict:
        return self.rows("id = %s", (task_id,))[0]

    def count(self, where: str = "TRUE", params: Any = None) -> int:
        return int(self.value(f"SELECT count(*) AS n FROM {self.qtable} WHERE {where}", params))

    def effects(self, where: str = "TRUE", params: Any = None) -> List[dict]:
        return self.sql(f"SELECT * FROM {self.quote(self.schema)}.efeitos WHERE {where} "
                        "ORDER BY id", params)

    def chain(self, first_id: int) -> List[dict]:
        """The attempts of one task (first attempt and its retries), in order."""
        return self.rows("(id = %s OR id_inicial = %s) AND NOT dead", (first_id, first_id))

    def dead_letters(self, first_id: int) -> List[dict]:
        return self.rows("dead AND live_id = %s", (first_id,))

    # -- producing --------------------------------------------------------------
    def new_conn(self) -> Any:
        if self.is_mysql:
            return self.server.connect(self.schema, autocommit=False)
        return self.server.connect(autocommit=False)

    def client(self, conn: Any = None) -> QueueClient:
        return QueueClient(conn or self.conn, self.table, self.sub_table)

    def insert(self, payload: Any = None, **kwargs: Any) -> int:
        """Insert one task (committed) through QueueClient."""
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        conn = self.new_conn()
        try:
            task_id = self.client(conn).insert_task(
                kwargs.pop("origem", "teste"), kwargs.pop("destino", "teste"),
                kwargs.pop("processo", "teste"), kwargs.pop("chave_externa", None), payload,
                **kwargs)
            conn.commit()
            return task_id
        finally:
            conn.close()

    def insert_many(self, payloads: Sequence[Any], **common: Any) -> List[int]:
        """Insert many tasks (one committed transaction) through QueueClient.insert_tasks."""
        conn = self.new_conn()
        try:
            ids = self.client(conn).insert_tasks(
                [{"origem": "teste", "destino": "teste", "processo": "teste",
                  "payload": json.dumps(p) if isinstance(p, dict) else p, **common}
                 for p in payloads])
            conn.commit()
            return ids
        finally:
            conn.close()

    def add_subscriber(self, sub_id: str, processo: str = "proc", *,
                       url: Optional[str] = None, method: Optional[str] = None,
                       headers: Any = None, ativo: bool = True) -> None:
        self.sql(f"INSERT INTO {self.qsub_table} (id, processo, url, http_method, headers, "
                 "ativo) VALUES (%s, %s, %s, %s, %s, %s)",
                 (sub_id, processo, url, method,
                  None if headers is None else json.dumps(headers), ativo))

    def publish(self, payload: Any, processo: str = "proc") -> int:
        conn = self.new_conn()
        try:
            pub_id = self.client(conn).insert_task_pub_sub("teste", "teste", processo, None,
                                                           payload)
            conn.commit()
            return pub_id
        finally:
            conn.close()

    # -- processes ------------------------------------------------------------------
    def env(self, **extra: Any) -> Dict[str, str]:
        """Settings shared by the server and the workers of this queue."""
        env = dict(self.server.env(self.schema) if self.is_mysql else self.server.env())
        env.update({
            "QUEUE_NAME": self.fila,
            "QUEUE_TABLE": self.table,
            "QUEUE_SUBSCRIBER_TABLE": self.sub_table,
            "QUEUE_MAX_RETRY": "3",
            "QUEUE_BASE_INTERVAL_RETRY": "0.01",  # minutes: 0.6 s x tentativa
            "QUEUE_WAIT_NOTIFY_INTERVAL": "30",
            "LOG_DEBUG": "false",
            "CLIENT_SERVER_MODE": "true",
            "SERVER_HOST": HOST,
            "SERVER_BIND_HOST": HOST,
            "SERVER_AUTH_TOKEN": TOKEN,
            "NOTIFY_SERVICE_PORT": str(self.notify_port),
            "LOCK_SERVICE_PORT": str(self.lock_port),
            "TIMEOUT_SOCKET_MESSAGE": str(self.timeout),
            "CHECK_TASKS_INTERVAL": "1",
            "LOCK_SERVICE_WAIT_CONN_INTERVAL": "1",
            "MAX_CLIENT_THREADS": "60",
        })
        if self.native:
            env["CLIENT_SERVER_MODE"] = "false"
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start_server(self, **extra: Any) -> QueueServerProc:
        """Start the queue server on this queue's ports and wait until it answers."""
        n = len(self.servers)
        srv = QueueServerProc(self.env(**extra), self.log_dir / f"{self.schema}-server{n}.log",
                              self.notify_port, self.lock_port, TOKEN)
        self.servers.append(srv)
        return srv.wait_ready()

    @property
    def current_server(self) -> QueueServerProc:
        return self.servers[-1]

    def start_worker(self, module: str = "tests.workers.scripted", **extra: Any) -> WorkerProc:
        n = len(self.workers)
        proc = WorkerProc(module, self.env(**extra), self.log_dir / f"{self.schema}-w{n}.log")
        self.workers.append(proc)
        return proc

    def start_ready_worker(self, module: str = "tests.workers.scripted",
                           **extra: Any) -> WorkerProc:
        proc = self.start_worker(module, **extra)
        wait_worker_ready(proc)
        return proc

    def settings(self, **extra: Any) -> Settings:
        return Settings.from_env(self.env(**extra), load_dotenv=False)

    def locker(self, admin: bool = False) -> SocketLocker:
        """A SocketLocker of the test itself (closed at teardown)."""
        locker = SocketLocker.from_settings(self.settings(), admin=admin)
        self.lockers.append(locker)
        return locker

    def task_key(self, task_id: int) -> Any:
        return task_lock_key(self.table, task_id)

    def server_status(self) -> Dict[str, Any]:
        """Counters of the running server (clients, listeners, locks...)."""
        with RawClient(self.lock_port) as raw:
            assert raw.hello(TOKEN)["ok"] is True
            return raw.call("status")["result"]

    def logs(self) -> str:
        parts = [f"--- {p.log_path.name} ---\n{p.log()}" for p in [*self.servers, *self.workers]]
        return "\n".join(parts)

    # -- waiting ---------------------------------------------------------------------
    def wait_status(self, task_id: int, status: str, timeout: float = 20.0) -> dict:
        return eventually(lambda: next((r for r in self.rows("id = %s", (task_id,))
                                        if r["status"] == status), None),
                          timeout, message=f"tarefa {task_id} -> {status}")

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until no task is waiting or running."""
        eventually(lambda: self.count(WAITING) == 0, timeout, interval=0.1,
                   message="fila esvaziada")

    def wait_chain_done(self, first_id: int, timeout: float = 20.0) -> List[dict]:
        """Until the chain of `first_id` has a 'sucesso' attempt or a handled dead letter."""

        def done() -> Optional[List[dict]]:
            chain = self.chain(first_id)
            if any(r["status"] == "sucesso" for r in chain):
                return chain
            dead = self.dead_letters(first_id)
            if dead and all(r["status"] in ("sucesso", "falha") for r in dead):
                return chain
            return None

        return eventually(done, timeout, interval=0.05, message=f"cadeia {first_id} concluída")


def wait_worker_ready(proc: WorkerProc, timeout: float = 20.0) -> None:
    def ready() -> bool:
        if proc.proc.poll() is not None:
            raise AssertionError(f"worker saiu com {proc.proc.returncode}:\n{proc.log()}")
        return READY_MARK in proc.log()

    eventually(ready, timeout, interval=0.05, message="worker pronto")


def effects_by_key(q: CsQueue, tipo: str = "execute") -> Dict[str, int]:
    """chave -> number of committed effects of that kind."""
    counts: Dict[str, int] = {}
    for e in q.effects("tipo = %s", (tipo,)):
        counts[e["chave"]] = counts.get(e["chave"], 0) + 1
    return counts


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
