"""Client/server mode figures: processing rate and pickup latency with the socket server,
on PostgreSQL and on MariaDB (python bench/bench_cs.py, or as part of bench/bench.py).
`--mysql [--rounds N [--other TREE]]`: the MySQL lines of issue 12 (with `--rounds`, plain
PostgreSQL and MariaDB native alternated N times, ratio per round and their range; with
`--other`, native also with the workers of another source tree, e.g. a `git archive` of
the code before a change, against the same PostgreSQL runs).
`--pickup [--idle=N ...]`: MariaDB native pickup latency with 2 (or N) workers, no notify;
with `--cs [--postgres]`: client/server pickup on MariaDB (PostgreSQL), with and without
the producer's notify.
`--stop [--idle=N]`: how long an idle MariaDB native fleet of 16 (or N) takes to stop on
HALT, on SIGTERM to one worker, and on SIGTERM to the rest.
`--statements [--native] [--cs] [--quick] [--idle=N ...] [--postgres]`: statements per
completed task on MariaDB (with `--postgres`: client/server on PostgreSQL) with a backlog and
with 4 and 32 (or N) idle workers while tasks arrive at 100/s, and the idle fleet's
statements per second without arrivals (each process counted by bench/counting.py).

The server runs as `python -m nsj_queue_lib.server.server_main` and the workers as
processes in CLIENT_SERVER_MODE; the producer tells the server about each new task
(`notify_server`), as the README recommends, so pickup does not wait for the poll.
MariaDB comes from NSJQ_TEST_MYSQL_HOST/_PORT/_USER/_PASS (default 127.0.0.1:3306, root).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsj_queue_lib.cli.devdb import DevPostgres, acquire  # noqa: E402
from nsj_queue_lib.client.notify_client import notify_server  # noqa: E402
from nsj_queue_lib.config import Settings  # noqa: E402
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES  # noqa: E402
from nsj_queue_lib.db.schema import render_schema  # noqa: E402
from nsj_queue_lib.queue_client import QueueClient  # noqa: E402

# Another name lets two runs share the servers (NSJQ_BENCH_SCHEMA=nsjq_bench_cs_<who>).
SCHEMA = os.environ.get("NSJQ_BENCH_SCHEMA", "nsjq_bench_cs")
FILA = "fila_cs"
TOKEN = "bench-token"
Report = Callable[..., None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _split(sql: str) -> List[str]:
    """MySQL DDL script -> statements (pymysql runs one at a time); comment lines dropped."""
    out = []
    for chunk in sql.split(";\n"):
        body = "\n".join(ln for ln in chunk.splitlines() if not ln.lstrip().startswith("--"))
        if body.strip():
            out.append(body.strip().rstrip(";"))
    return out


class Target:
    """One database: how to connect, create the queue and the effects table."""

    def __init__(self, kind: str, pg: Optional[DevPostgres]) -> None:
        self.kind = kind
        self.pg = pg
        self.q = "`" if kind == "mariadb" else '"'
        self._watch: Any = None

    def connect(self, autocommit: bool = True) -> Any:
        if self.kind == "postgres":
            assert self.pg is not None
            return self.pg.connect(autocommit=autocommit)
        import pymysql

        return pymysql.connect(host=os.environ.get("NSJQ_TEST_MYSQL_HOST", "127.0.0.1"),
                               port=int(os.environ.get("NSJQ_TEST_MYSQL_PORT", "3306")),
                               user=os.environ.get("NSJQ_TEST_MYSQL_USER", "root"),
                               password=os.environ.get("NSJQ_TEST_MYSQL_PASS", ""),
                               autocommit=autocommit)

    def env(self) -> Dict[str, str]:
        if self.kind == "postgres":
            assert self.pg is not None
            return self.pg.env()
        return {"DB_HOST": os.environ.get("NSJQ_TEST_MYSQL_HOST", "127.0.0.1"),
                "DB_PORT": os.environ.get("NSJQ_TEST_MYSQL_PORT", "3306"),
                "DB_BASE": SCHEMA, "DB_USER": os.environ.get("NSJQ_TEST_MYSQL_USER", "root"),
                "DB_PASS": os.environ.get("NSJQ_TEST_MYSQL_PASS", ""), "DB_DRIVER": "MYSQL"}

    def _run(self, sql: str) -> None:
        conn = self.connect()
        with conn.cursor() as cur:
            statements = [sql] if self.kind == "postgres" else _split(sql)
            for statement in statements:
                cur.execute(statement)
        conn.close()

    def reset(self) -> None:
        q = self.q
        if self.kind == "postgres":
            self._run(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
            self._run(f'CREATE SCHEMA "{SCHEMA}"')
            self._run(render_schema(POSTGRES, SCHEMA, FILA))
        else:
            self._run(f"DROP DATABASE IF EXISTS `{SCHEMA}`")
            self._run(render_schema(MYSQL, SCHEMA, FILA))
        self._run(f"CREATE TABLE {q}{SCHEMA}{q}.efeitos (id bigint NOT NULL PRIMARY KEY "
                  + ("AUTO_INCREMENT" if self.kind == "mariadb" else "GENERATED ALWAYS AS "
                     "IDENTITY") + ", tarefa_id bigint, t_inicio double precision)")

    def close(self) -> None:
        """Closes the connection `scalar` keeps (a later call opens another)."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def drop(self) -> None:
        self.close()
        if self.kind == "postgres":
            self._run(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        else:
            self._run(f"DROP DATABASE IF EXISTS `{SCHEMA}`")

    def scalar(self, sql: str, params: Any = None) -> Any:
        """First column of the first row, on one autocommit connection kept for the run.
        A connection per call made the harness part of what it measured: the wait loops
        poll several times a second, and pymysql >= 1.2 builds a TLS context at every
        connect (about 50 ms of CPU, even against a server without TLS), so the bench
        process took a third of a core of this 2-core machine during the MariaDB runs
        only (PostgreSQL's connect costs the client under 1 ms)."""
        if self._watch is None:
            self._watch = self.connect()
        with self._watch.cursor() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
        return None if row is None else row[0]

    def settle(self) -> None:
        """Statistics after the bulk load, as bench.py does: without them the planner of
        either database plans the claim for the empty table it last analysed."""
        if self.kind == "postgres":
            self._run(f'VACUUM ANALYZE "{SCHEMA}"."{FILA}"')
        else:
            self._run(f"ANALYZE TABLE `{SCHEMA}`.`{FILA}`")

    def effects(self) -> str:
        return f"{self.q}{SCHEMA}{self.q}.efeitos"

    def load(self, n: int) -> None:
        """A new queue holding `n` tasks (each inserts a side-effect row, worker_noop.py),
        committed a thousand at a time, then the statistics (`settle`)."""
        self.reset()
        conn = self.connect(autocommit=False)
        client = QueueClient(conn, f"{SCHEMA}.{FILA}")
        for first in range(0, n, 1000):
            client.insert_tasks([{"processo": "b", "payload": "{}"}
                                 for _ in range(min(1000, n - first))])
            conn.commit()
        conn.close()
        self.settle()

    def done(self) -> int:
        """Rows in the effects table: tasks done."""
        return self.scalar(f"SELECT count(*) FROM {self.effects()}")

    def wait_done(self, at_least: float, deadline: float) -> None:
        """Polls `done` every 0.2 s until it reaches `at_least`; RuntimeError after
        `deadline` (time.monotonic())."""
        while self.done() < at_least:
            if time.monotonic() > deadline:
                raise RuntimeError("tarefas não concluídas a tempo")
            time.sleep(0.2)  # rates come from the effects rows, not from this loop


class ClientServerRun:
    """Server + workers of one target, all as processes.  With `server=False` the workers
    run in the database's own mode (PostgreSQL plain, or MySQL native) and no server."""

    def __init__(self, target: Target, server: bool = True,
                 mysql_driver: Optional[str] = None, tree: Optional[Path] = None) -> None:
        self.target = target
        self.server = server
        self.tree = tree or ROOT  # the source tree the processes run
        self.notify_port = _free_port()
        self.lock_port = _free_port()
        self.env = dict(os.environ)
        self.env.update(target.env())
        self.env.update({
            "QUEUE_NAME": FILA, "QUEUE_TABLE": f"{SCHEMA}.{FILA}", "LOG_DEBUG": "false",
            "CLIENT_SERVER_MODE": "true", "SERVER_HOST": "127.0.0.1",
            "SERVER_BIND_HOST": "127.0.0.1", "SERVER_AUTH_TOKEN": TOKEN,
            "NOTIFY_SERVICE_PORT": str(self.notify_port),
            "LOCK_SERVICE_PORT": str(self.lock_port), "CHECK_TASKS_INTERVAL": "1",
            "MAX_CLIENT_THREADS": "64",
            # this tree first; an installed mysqlclient elsewhere stays importable
            "PYTHONPATH": os.pathsep.join(p for p in (str(self.tree), os.environ.get("PYTHONPATH"))
                                          if p),
        })
        if not server:
            self.env["CLIENT_SERVER_MODE"] = "false"
        if mysql_driver:
            self.env["DB_MYSQL_DRIVER"] = mysql_driver
        self.procs: List[subprocess.Popen] = []
        self.settings = Settings.from_env(self.env, load_dotenv=False)

    def _spawn(self, args: List[str]) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, *args], env=self.env, cwd=str(self.tree),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def start_server(self) -> None:
        if not self.server:
            return
        if self.env.get("NSJQ_BENCH_COUNT_DIR"):  # the server's statements count too
            self._spawn(["-c", "import runpy, sys; sys.path.insert(0, 'bench'); "
                         "import counting; counting.install(); "
                         "runpy.run_module('nsj_queue_lib.server.server_main', "
                         "run_name='__main__')"])
        else:
            self._spawn(["-m", "nsj_queue_lib.server.server_main"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                notify_server(self.settings)
                return
            except Exception:
                time.sleep(0.05)
        raise RuntimeError("servidor de filas não respondeu")

    def start_workers(self, n: int) -> None:
        for _ in range(n):
            self._spawn([str(self.tree / "bench" / "worker_noop.py")])

    def wait_listening(self, n: int) -> None:
        if not self.server:
            time.sleep(3.0)  # workers connect and start polling
            return
        # (the server's `status`: a notify wakes only idle workers of protocol version 3,
        # one per notify)
        from nsj_queue_lib.engine.socket.connection import SocketConnection

        conn = SocketConnection("127.0.0.1", self.lock_port, TOKEN, 5.0, role="bench")
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if conn.request("status")[0]["listeners"] >= n:
                    return
                time.sleep(0.05)
        finally:
            conn.close()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def processing_rate(target: Target, n: int, workers: int, server: bool = True,
                    mysql_driver: Optional[str] = None, tree: Optional[Path] = None) -> float:
    target.load(n)
    run = ClientServerRun(target, server, mysql_driver, tree)
    try:
        run.start_server()
        run.start_workers(workers)
        target.wait_done(n, time.monotonic() + 600)
    finally:
        run.stop()
    lo, hi = (target.scalar(f"SELECT {f}(t_inicio) FROM {target.effects()}")
              for f in ("min", "max"))
    return (n - 1) / (hi - lo)


def pickup_latency(target: Target, samples: int, server: bool = True,
                   notify: bool = True, workers: int = 2) -> List[float]:
    target.reset()
    run = ClientServerRun(target, server)
    latencies: List[float] = []
    try:
        run.start_server()
        run.start_workers(workers)
        run.wait_listening(workers)
        conn = target.connect(autocommit=False)
        client = QueueClient(conn, f"{SCHEMA}.{FILA}")
        read = target.connect()
        for i in range(samples):
            task_id = client.insert_task("b", "b", "b", str(i), "{}")
            conn.commit()
            t_commit = time.time()
            if notify:
                notify_server(run.settings)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with read.cursor() as cur:
                    cur.execute(f"SELECT t_inicio FROM {target.effects()} WHERE tarefa_id = %s",
                                (task_id,))
                    row = cur.fetchone()
                if row:
                    latencies.append((row[0] - t_commit) * 1000)
                    break
                time.sleep(0.0005)
            time.sleep(0.01 if notify else 0.05 + (i % 7) * 0.013)  # idle, arrival at random
        conn.close()
        read.close()
    finally:
        run.stop()
    return sorted(latencies)


def run(pg: DevPostgres, report: Report, core_rate: Optional[float] = None,
        n: int = 5_000, samples: int = 100) -> None:
    """Client/server figures for PostgreSQL and MariaDB, next to the core rate."""
    print("-- client/server mode (baseline of the rate lines: plain PostgreSQL, 4 workers)")
    for kind in ("postgres", "mariadb"):
        target = Target(kind, pg if kind == "postgres" else None)
        try:
            target.connect().close()
        except Exception as exc:
            print(f"{kind}: indisponível ({exc}); medidas puladas")
            continue
        try:
            rate = processing_rate(target, n, 4)
            report(f"client/server {kind}: processing {n}, 4 workers", rate, "tasks/s",
                   core_rate)
            lat = pickup_latency(target, samples)
            report(f"client/server {kind}: pickup p50 (producer notifies)",
                   statistics.median(lat), "ms")
            report(f"client/server {kind}: pickup p95", lat[int(len(lat) * 0.95) - 1], "ms")
        finally:
            target.drop()


def _mysql_drivers() -> List[str]:
    """The DB_MYSQL_DRIVER values the native line is measured with: NSJQ_BENCH_MYSQL_DRIVERS
    (comma-separated), else both drivers when mysqlclient is installed, else pymysql."""
    from nsj_queue_lib.db.mysql_driver import mysqlclient_module

    chosen = os.environ.get("NSJQ_BENCH_MYSQL_DRIVERS")
    if chosen:
        return [d.strip() for d in chosen.split(",") if d.strip()]
    return ["pymysql", "mysqlclient"] if mysqlclient_module() is not None else ["pymysql"]


def mysql_rounds(pg: DevPostgres, report: Report, rounds: int, n: int = 10_000,
                 other: Optional[Path] = None) -> None:
    """`--mysql --rounds N`: plain PostgreSQL and MariaDB native (each driver) alternated
    N times, ratios within each round, then the range and the median of the ratios; so
    one slow stretch of the shared disk or CPU moves one round, not the figure.  With
    `--other TREE` the native line also runs with the workers of another source tree
    (a before/after pair measured against the same PostgreSQL runs)."""
    postgres, mariadb = Target("postgres", pg), Target("mariadb", None)
    drivers = _mysql_drivers()
    variants = [(d, None) for d in drivers] + [(f"{d}, {other}", other) for d in drivers
                                               if other is not None]
    ratios: Dict[str, List[float]] = {d: [] for d, _ in variants}
    print(f"-- MySQL native vs plain PostgreSQL, {rounds} rounds of {n} tasks, 4 workers")
    try:
        for r in range(rounds):
            base = processing_rate(postgres, n, 4, server=False)
            report(f"round {r + 1} plain postgres", base, "tasks/s",
                   note=f"(load {os.getloadavg()[0]:.1f})")
            for label, tree in (variants if r % 2 == 0 else variants[::-1]):
                driver = label.split(",")[0]
                rate = processing_rate(mariadb, n, 4, server=False, mysql_driver=driver,
                                       tree=tree)
                ratios[label].append(rate / base)
                report(f"round {r + 1} mariadb native ({label})", rate, "tasks/s", base)
    finally:
        postgres.drop()
        mariadb.drop()
    for driver, values in ratios.items():
        print(f"mariadb native ({driver}) / plain postgres: "
              f"{', '.join(f'{v:.0%}' for v in values)}; min {min(values):.0%}, "
              f"median {statistics.median(values):.0%}, max {max(values):.0%}")


def run_mysql(pg: DevPostgres, report: Report, n: int = 10_000, samples: int = 60) -> None:
    """MySQL lines of one run (issue 12): MariaDB native and client/server on MariaDB as
    ratios of the plain PostgreSQL rate measured here too; pickup without producer notify.
    The native line once per MySQL driver (`_mysql_drivers`); the other lines use the
    driver DB_MYSQL_DRIVER chooses (pymysql unless set)."""
    postgres, mariadb = Target("postgres", pg), Target("mariadb", None)
    print(f"-- MySQL modes: {n} tasks, 4 workers, each task inserts a side-effect row")
    try:
        base = processing_rate(postgres, n, 4, server=False)
        report(f"plain postgres: processing {n}, 4 workers", base, "tasks/s")
    finally:
        postgres.drop()
    try:
        for driver in _mysql_drivers():
            report(f"mariadb native ({driver}): processing {n}, 4 workers",
                   processing_rate(mariadb, n, 4, server=False, mysql_driver=driver),
                   "tasks/s", base)
        report(f"client/server mariadb: processing {n}, 4 workers",
               processing_rate(mariadb, n, 4, server=True), "tasks/s", base)
        for server, name in ((False, "mariadb native"), (True, "client/server mariadb")):
            lat = pickup_latency(mariadb, samples, server=server, notify=False)
            report(f"{name}: pickup p50 (no producer notify)", statistics.median(lat), "ms")
            report(f"{name}: pickup p95 (no producer notify)",
                   lat[int(len(lat) * 0.95) - 1], "ms")
    finally:
        mariadb.drop()


# -- statements per task with idle workers on MariaDB (the PostgreSQL line's method) -----
def _sessions(target: Target) -> int:
    if target.kind == "postgres":  # (the workers' and the server's, by application name)
        return int(target.scalar("SELECT count(*) FROM pg_stat_activity WHERE "
                                 "application_name LIKE %s", (f"%{FILA}%",)))
    return int(target.scalar("SELECT count(*) FROM information_schema.processlist "
                             "WHERE db = %s", (SCHEMA,)))


def _counted(target: Target, server: bool, workers: int, work: Callable[[], int]) -> Dict:
    """Start the server (if any) and `workers` counting processes, mark the counts once
    they are all connected and settled, run `work()` (returns the tasks it waits for),
    stop everything; statements and round trips per completed task since the mark,
    summed over every process (the server's too)."""
    from bench.bench_perf import read_counts

    directory = tempfile.mkdtemp(prefix="nsjq-count-")
    run = ClientServerRun(target, server)
    run.env["NSJQ_BENCH_COUNT_DIR"] = directory
    try:
        run.start_server()
        run.start_workers(workers)
        deadline = time.monotonic() + 120
        while _sessions(target) < workers + int(server):
            if time.monotonic() > deadline:
                raise RuntimeError("workers não conectaram")
            time.sleep(0.1)
        time.sleep(3.0)  # start-up statements settle (rescue, first probes)
        Path(directory, "mark").touch()  # counts from here on (bench/counting.py)
        time.sleep(0.1)
        started = time.monotonic()
        expected = work()
        deadline = time.monotonic() + 120
        while target.scalar(f"SELECT count(*) FROM {target.effects()}") < expected:
            if time.monotonic() > deadline:
                raise RuntimeError("tarefas não concluídas a tempo")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
    finally:
        run.stop()
    counts = read_counts(directory)
    shutil.rmtree(directory, ignore_errors=True)
    done = int(target.scalar(f"SELECT count(*) FROM {target.effects()}"))
    if os.environ.get("NSJQ_BENCH_COUNT_TEXT"):  # round trips per task by statement start
        texts: Dict[str, int] = {}
        for c in counts:
            for key, n in c.get("texts", {}).items():
                texts[key] = texts.get(key, 0) + n
        # per task; without arrivals (no task done), per second
        per, unit = (done, "/task") if done else (elapsed, "/s")
        for key, n in sorted(texts.items(), key=lambda kv: -kv[1])[:12]:
            print(f"    {n / per:6.2f}{unit}  {key}")
    total = {k: sum(c[k] - (c["at_mark"] or {}).get(k, 0) for c in counts)
             for k in ("statements", "round_trips")}
    return {"statements": total["statements"] / max(done, 1),
            "round_trips": total["round_trips"] / max(done, 1),
            "per_second": total["statements"] / elapsed,
            "connections": max((c["connections_max"] for c in counts), default=0),
            "tasks": done}


def statements_mysql(report: Report, rate: float = 100.0, seconds: float = 30.0,
                     backlog: int = 3_000, sizes: Tuple[int, ...] = (4, 32),
                     modes: Tuple[str, ...] = ("native", "client/server"),
                     pg: Optional[DevPostgres] = None) -> None:
    """Statements per completed task on MariaDB, native and client/server: with a backlog
    (the floor: 4 workers, tasks inserted before the mark), then with idle workers while
    tasks arrive at `rate`/s (bench_perf.py's statements line, counted the same way).
    With `pg`, client/server on that PostgreSQL instead (`--postgres`)."""
    from bench.bench_perf import Producer

    target = Target("mariadb", None) if pg is None else Target("postgres", pg)
    table = f"{SCHEMA}.{FILA}"
    print(f"-- statements per task on {target.kind} (arrivals {rate:.0f}/s for "
          f"{seconds:.0f} s)")
    try:
        for server, name in ((False, "mariadb native"),
                             (True, f"client/server {target.kind}")):
            if ("client/server" if server else "native") not in modes or (
                    pg is not None and not server):
                continue
            target.reset()

            def fill() -> int:
                conn = target.connect(autocommit=False)
                client = QueueClient(conn, table)
                client.insert_tasks([{"processo": "b", "payload": "{}"}
                                     for _ in range(backlog)])
                conn.commit()
                conn.close()
                return backlog

            floor = _counted(target, server, 4, fill)
            report(f"{name}: statements per task, backlog", floor["statements"], "stmts",
                   note=f"({floor['statements']:.2f}; {floor['round_trips']:.2f} round trips)")
            for idle in sizes:
                target.reset()
                quiet = _counted(target, server, idle, lambda: time.sleep(10.0) or 0)
                report(f"{name}: {idle} idle, no arrivals", quiet["per_second"], "stmts/s",
                       note="(background cost of the idle fleet, 10 s)")
                target.reset()
                producer = Producer(target, rate, seconds, table=table)  # type: ignore[arg-type]

                def arrive(producer: Any = producer) -> int:
                    producer.start()
                    producer.join()
                    return producer.sent

                got = _counted(target, server, idle, arrive)
                report(f"{name}: statements per task, {idle} idle, {rate:.0f}/s",
                       got["statements"], "stmts", floor["statements"],
                       f"({got['statements']:.2f}; {got['round_trips']:.2f} round trips; "
                       f"target <= 6; baseline: backlog)")
    finally:
        target.drop()


# -- stopping an idle MariaDB native fleet: HALT, SIGTERM to one worker, to the rest -----
def stop_promptness(n: int = 16) -> None:
    """Print how long an idle native fleet of `n` workers takes to stop: after
    QueueAdmin.halt() until every process exited; after SIGTERM to five workers one at a
    time (each to its exit); after SIGTERM to the others (until all exited)."""
    from nsj_queue_lib.admin import QueueAdmin
    from nsj_queue_lib.db.session import DbSession

    target = Target("mariadb", None)

    def fleet() -> ClientServerRun:
        target.reset()
        run = ClientServerRun(target, server=False)
        run.start_workers(n)
        deadline = time.monotonic() + 120
        while _sessions(target) < n:
            if time.monotonic() > deadline:
                raise RuntimeError("workers não conectaram")
            time.sleep(0.1)
        time.sleep(3.0)  # every idle worker holds or waits for the turn
        return run

    try:
        run = fleet()
        session = DbSession.open(run.settings)
        started = time.monotonic()
        QueueAdmin(session, f"{SCHEMA}.{FILA}").halt()
        session.close()
        for proc in run.procs:
            proc.wait(30)
        print(f"HALT, {n} idle native workers: all exited in {time.monotonic() - started:.2f} s")
        run.stop()
        run = fleet()
        took = []
        for proc in run.procs[-5:]:
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            took.append(time.monotonic() - started)
            time.sleep(0.3)
        print("SIGTERM to one idle worker: " + ", ".join(f"{t:.2f}" for t in took) + " s")
        started = time.monotonic()
        rest = run.procs[:-5]
        for proc in rest:
            proc.send_signal(signal.SIGTERM)
        for proc in rest:
            proc.wait(30)
        print(f"SIGTERM to the other {len(rest)}: all exited in "
              f"{time.monotonic() - started:.2f} s")
        run.stop()
    finally:
        target.drop()


def main() -> int:
    from bench.bench import report

    if "--stop" in sys.argv[1:]:  # MariaDB native: HALT / SIGTERM of an idle fleet
        sizes = [int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--idle=")]
        stop_promptness(sizes[0] if sizes else 16)
        return 0
    if "--pickup" in sys.argv[1:] and "--cs" in sys.argv[1:]:  # client/server pickup
        sizes = [int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--idle=")]
        pg = acquire() if "--postgres" in sys.argv[1:] else None
        target = Target("mariadb", None) if pg is None else Target("postgres", pg)
        try:
            for workers in sizes or [2]:
                for notify in (True, False):
                    lat = pickup_latency(target, 60, server=True, notify=notify,
                                         workers=workers)
                    report(f"client/server {target.kind} pickup p50, {workers} workers, "
                           f"{'notify' if notify else 'no notify'}", lat[len(lat) // 2], "ms",
                           note=f"(p95 {lat[int(len(lat) * 0.95)]:.1f} ms, "
                                f"{len(lat)} samples)")
        finally:
            target.drop()
            if pg is not None:
                pg.release()
        return 0
    if "--pickup" in sys.argv[1:]:  # MariaDB native pickup, no producer notify
        sizes = [int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--idle=")]
        for workers in sizes or [2]:
            lat = pickup_latency(Target("mariadb", None), 60, server=False, notify=False,
                                 workers=workers)
            report(f"mariadb native pickup p50, {workers} workers", lat[len(lat) // 2], "ms",
                   note=f"(p95 {lat[int(len(lat) * 0.95)]:.1f} ms, {len(lat)} samples)")
        Target("mariadb", None).drop()
        return 0
    if "--statements" in sys.argv[1:]:
        modes = tuple(m for m, flag in (("native", "--native"), ("client/server", "--cs"))
                      if flag in sys.argv[1:])
        sizes = tuple(int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--idle="))
        pg = acquire() if "--postgres" in sys.argv[1:] else None
        try:
            statements_mysql(report, seconds=10.0 if "--quick" in sys.argv[1:] else 30.0,
                             modes=modes or ("native", "client/server"),
                             sizes=sizes or (4, 32), pg=pg)
        finally:
            if pg is not None:
                pg.release()
        return 0
    pg = acquire()
    try:
        if "--mysql" in sys.argv[1:] and "--rounds" in sys.argv[1:]:
            rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
            other = (Path(sys.argv[sys.argv.index("--other") + 1]).resolve()
                     if "--other" in sys.argv[1:] else None)
            mysql_rounds(pg, report, rounds, n=1_000 if "--quick" in sys.argv[1:] else 10_000,
                         other=other)
        elif "--mysql" in sys.argv[1:]:
            run_mysql(pg, report, n=1_000 if "--quick" in sys.argv[1:] else 10_000)
        else:
            run(pg, report)
    finally:
        pg.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
