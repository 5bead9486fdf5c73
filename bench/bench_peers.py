"""This library beside its peers, same job, one run: python bench/bench_peers.py [--rounds 3]
[--tasks 10000] [--samples 200] [--json results.json].

The job everywhere: N tasks waiting (bulk-loaded, then VACUUM ANALYZE), each task inserts
one side-effect row (task number, start time) in the task's own transaction; consumed by
4 and by 1 worker processes.  Systems, each in its own database of the DB_* server:

* pgbench (the ceiling): the claim (UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP
  LOCKED LIMIT 1) RETURNING), the side-effect INSERT and the finish UPDATE in one
  transaction, on this library's queue table, -c 4 and -c 1;
* this library (the work tree) with bench/worker_noop.py: default settings (a queue the
  current DDL created: out of mixed-fleet mode), mixed-fleet mode (QUEUE_COMPAT_1_2_2=true),
  and batch mode (QUEUE_BATCH_SIZE=32);
* nsj-queue-lib 2.0.0 (commit 8485532, `git archive` installed into its own venv), the
  same worker file, its own queue DDL;
* PgQueuer 1.6 (PyPI, asyncpg) with bench/peers_pgq.py, its defaults (batch of 10).

Rates are taken as in bench/bench.py (helpers imported from there): between the first and
the last task start in the effects table.  Pickup latency: 2 idle workers, one task per
transaction, commit -> start of the task.  Rounds interleave the systems (the order
rotates each round) so the machine's drift touches all of them.  Venvs are cached under
bench/.venvs/ (git-ignored).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import bench as B  # noqa: E402
from nsj_queue_lib.cli.devdb import DevPostgres, acquire  # noqa: E402
from nsj_queue_lib.queue_client import QueueClient  # noqa: E402

OLD_COMMIT = "8485532"
PGQ_REQUIREMENT = "pgqueuer>=1.6,<1.7"
VENVS = ROOT / "bench" / ".venvs"
WORKER = ROOT / "bench" / "worker_noop.py"
PGQ_HELPER = ROOT / "bench" / "peers_pgq.py"
EFFECTS_DDL = (f'CREATE TABLE "{B.SCHEMA}".efeitos (id bigserial PRIMARY KEY, '
               "tarefa_id bigint, t_inicio double precision)")
PGBENCH_SCRIPT = f"""BEGIN;
UPDATE {B.TABLE} SET status = 'processando' WHERE id = (SELECT id FROM {B.TABLE} \
WHERE status IN ('pendente', 'agendada') AND data_hora <= now() \
ORDER BY prioridade DESC, data_hora, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id AS tid \\gset
INSERT INTO "{B.SCHEMA}".efeitos (tarefa_id, t_inicio) \
VALUES (:tid, extract(epoch FROM clock_timestamp()));
UPDATE {B.TABLE} SET status = 'sucesso', mensagem = 'ok' WHERE id = :tid;
COMMIT;
"""


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def run(cmd: List[str], **kw: Any) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done.stdout


@contextlib.contextmanager
def environ(extra: Dict[str, str]) -> Iterator[None]:
    """os.environ with `extra` set (bench.worker_env copies os.environ)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# -- venvs -------------------------------------------------------------------
def venv(name: str, install: Callable[[Path], None]) -> Path:
    """The python of bench/.venvs/<name>, created (and `install`ed) on first use."""
    home = VENVS / name
    python = home / "bin" / "python"
    if not (home / ".complete").exists():
        shutil.rmtree(home, ignore_errors=True)
        log(f"creating venv {home}")
        run(["python3", "-m", "venv", str(home)])
        run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
        install(home)
        (home / ".complete").touch()
    return python


def old_venv() -> Path:
    def install(home: Path) -> None:
        src = home / "src"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMIT],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        run([str(home / "bin" / "python"), "-m", "pip", "install", "-q", str(src)])

    python = venv(f"nsj-{OLD_COMMIT}", install)
    # The worker must import the installed 2.0.0, not this work tree.
    version = run([str(python), "-c", "import nsj_queue_lib.version as v; print(v.__version__)"],
                  env=old_env({}), cwd="/").strip()
    if version != "2.0.0":
        raise RuntimeError(f"{python} imports nsj_queue_lib {version}, not 2.0.0")
    return python


def pgq_venv() -> Path:
    def install(home: Path) -> None:
        run([str(home / "bin" / "python"), "-m", "pip", "install", "-q", PGQ_REQUIREMENT,
             "asyncpg"])

    return venv("pgqueuer-1.6", install)


def old_env(base: Dict[str, str]) -> Dict[str, str]:
    env = dict(base)
    env.pop("PYTHONPATH", None)
    return env


# -- databases ---------------------------------------------------------------
def recreate_db(pg: DevPostgres, name: str) -> DevPostgres:
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return dataclasses.replace(pg, dbname=name, embedded=None)


def drop_db(pg: DevPostgres, name: str) -> None:
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


def execute(pg: DevPostgres, *statements: str) -> None:
    conn = pg.connect()
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
    conn.close()


def fetch_value(pg: DevPostgres, sql: str) -> Any:
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(sql)
        value = cur.fetchone()[0]
    conn.close()
    return value


def spawn(python: Path, argv: List[str], env: Dict[str, str], procs: int
          ) -> List[subprocess.Popen]:
    return [subprocess.Popen([str(python), *argv], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for _ in range(procs)]


def wait_effects(pg: DevPostgres, n: int, alive: Callable[[], bool], timeout: float) -> None:
    """Until `n` effects are recorded (polled every 20 ms as bench.lib_processing does)."""
    deadline = time.monotonic() + timeout
    while B.effects_done(pg) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{B.effects_done(pg)} of {n} tasks done after {timeout} s")
        if not alive():
            if B.effects_done(pg) >= n:
                return
            raise RuntimeError(f"consumers exited with {B.effects_done(pg)} of {n} done")
        time.sleep(0.02)


def wait_sessions(pg: DevPostgres, procs: int, timeout: float = 30.0) -> None:
    """Until `procs` worker sessions of this benchmark's queue are open in pg's database.
    (bench.wait_connected looks for sessions whose last statement is LISTEN: the work
    tree's idle workers end their turn with another statement, so it would wait 30 s.)"""
    deadline = time.monotonic() + timeout
    while fetch_value(pg, "SELECT count(DISTINCT pid) FROM pg_stat_activity WHERE datname = "
                      f"current_database() AND application_name = 'nsj_queue_lib:{B.FILA}'"
                      ) < procs:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{procs} workers not connected after {timeout} s")
        time.sleep(0.05)


def pickup_latency(pg: DevPostgres, workers: List[subprocess.Popen], samples: int
                   ) -> List[float]:
    """bench.bench_latency's loop (2 idle workers, one task per transaction, its start polled
    every ms, 10 ms apart), after a warm-up task; returns the samples (ms)."""
    try:
        wait_sessions(pg, len(workers))
        conn = pg.connect(autocommit=False)
        client = QueueClient(conn, f"{B.SCHEMA}.{B.FILA}")
        read = pg.connect()
        rcur = read.cursor()

        def started(task_id: int, timeout: float) -> float:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                rcur.execute(f'SELECT t_inicio FROM "{B.SCHEMA}".efeitos WHERE tarefa_id = %s',
                             (task_id,))
                row = rcur.fetchone()
                if row:
                    return row[0]
                time.sleep(0.001)
            raise TimeoutError(f"task {task_id} not started within {timeout} s")

        warm = client.insert_task("b", "b", "b", "warm-up", "{}")
        conn.commit()
        started(warm, 60)
        time.sleep(1)
        lat = []
        for i in range(samples):
            task_id = client.insert_task("b", "b", "b", str(i), "{}")
            conn.commit()
            committed = time.time()
            lat.append((started(task_id, 10) - committed) * 1000)
            time.sleep(0.01)
        conn.close()
        read.close()
    finally:
        B.stop_workers(workers)
    return lat


# -- systems -----------------------------------------------------------------
class System:
    key = ""
    label = ""
    latency = False
    done_at = 0.0

    def __init__(self, pg: DevPostgres) -> None:
        self.pg = recreate_db(pg, f"bench_peers_{self.key}")

    def load(self, n: int) -> None:
        """A fresh queue with `n` tasks waiting, vacuumed and analyzed."""
        B.reset(self.pg)
        B.bulk_insert(self.pg, n)
        B.settle(self.pg)

    def start(self, procs: int) -> List[subprocess.Popen]:
        raise NotImplementedError

    def rate(self, n: int, procs: int, timeout: float) -> float:
        self.load(n)
        workers = self.start(procs)
        try:
            wait_effects(self.pg, n, lambda: any(w.poll() is None for w in workers), timeout)
            self.drained(timeout)
            self.done_at = time.time()
        finally:
            B.stop_workers(workers)
        self.check(n)
        return B.effects_rate(self.pg)

    def check(self, n: int) -> None:
        """Every task's effect exactly once."""
        rows, tasks = fetch_value(self.pg, "SELECT ARRAY[count(*), count(DISTINCT tarefa_id)] "
                                           f'FROM "{B.SCHEMA}".efeitos')
        if rows != n or tasks != n:
            raise RuntimeError(f"{self.key}: {rows} effects of {tasks} tasks, {n} expected")

    def done_rate(self, n: int) -> float:
        """Tasks/s from the first task start to the moment the queue had recorded them all
        (seen by a 20-50 ms poll): for PgQueuer, whose acknowledgements trail the jobs."""
        return n / (self.done_at - fetch_value(self.pg, f'SELECT min(t_inicio) FROM '
                                                        f'"{B.SCHEMA}".efeitos'))

    def drained(self, timeout: float) -> None:
        """After the last effect, until the queue itself has recorded every task."""

    def pickup(self, samples: int) -> List[float]:
        B.reset(self.pg)
        return pickup_latency(self.pg, self.start(2), samples)

    def close(self, pg: DevPostgres) -> None:
        drop_db(pg, self.pg.dbname)


class Pgbench(System):
    key = "pgbench"
    label = "pgbench (ceiling)"

    def __init__(self, pg: DevPostgres) -> None:
        super().__init__(pg)
        self.binary = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
        self.version = run([self.binary, "--version"]).strip()
        self.script = Path(tempfile.mkdtemp(prefix="bench-peers-")) / "claim.sql"
        self.script.write_text(PGBENCH_SCRIPT)

    def rate(self, n: int, procs: int, timeout: float) -> float:
        # Each client runs until its claim finds nothing (pgbench then aborts that client:
        # "expected one row, got 0"); the last client standing empties the queue.
        self.load(n)
        env = dict(os.environ, PGPASSWORD=self.pg.password or "")
        cmd = [self.binary, "-h", self.pg.host, "-p", str(self.pg.port), "-U", self.pg.user,
               "-n", "-M", "prepared", "-c", str(procs), "-j", str(procs), "-t", str(n),
               "-f", str(self.script), self.pg.dbname]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            wait_effects(self.pg, n, lambda: proc.poll() is None, timeout)
            self.done_at = time.time()
        except BaseException:
            proc.kill()
            raise
        finally:
            _out, err = proc.communicate(timeout=60)
        done = B.effects_done(self.pg)
        if proc.returncode not in (0, 2) or done != n:
            raise RuntimeError(f"pgbench rc={proc.returncode}, {done} of {n} done\n{err[-2000:]}")
        self.check(n)
        return B.effects_rate(self.pg)

    def close(self, pg: DevPostgres) -> None:
        shutil.rmtree(self.script.parent, ignore_errors=True)
        super().close(pg)


class Nsj(System):
    """This library (the work tree), bench/worker_noop.py started by bench.start_workers."""

    env: ClassVar[Dict[str, str]] = {}

    def start(self, procs: int) -> List[subprocess.Popen]:
        with environ(self.env):
            return B.start_workers(self.pg, procs)


class NsjDefault(Nsj):
    key = "nsj"
    # Default settings: no QUEUE_COMPAT_1_2_2, on a queue the current DDL created (out of
    # mixed-fleet mode).
    label = "nsj (padrão)"
    env: ClassVar[Dict[str, str]] = {"QUEUE_BATCH_SIZE": "1"}
    latency = True


class NsjCompat(Nsj):
    key = "nsj_compat"
    # Mixed-fleet mode (1.2.2 workers may join): forced for this worker.
    label = "nsj (frota mista 1.2.2)"
    env: ClassVar[Dict[str, str]] = {"QUEUE_COMPAT_1_2_2": "true", "QUEUE_BATCH_SIZE": "1"}


class NsjBatch(Nsj):
    key = "nsj_batch"
    label = "nsj batch (BATCH_SIZE=32)"
    env: ClassVar[Dict[str, str]] = {"QUEUE_BATCH_SIZE": "32"}


class NsjOld(System):
    """nsj-queue-lib 2.0.0 in its own venv: its DDL, the same worker file and task rows
    (2.0.0's task_insert has the same columns and SQL as today's)."""

    key = "nsj200"
    label = "nsj 2.0.0 (8485532)"
    latency = True

    def __init__(self, pg: DevPostgres) -> None:
        super().__init__(pg)
        self.python = old_venv()
        self.ddl = run([str(self.python), "-c",
                        "import sys\n"
                        "from nsj_queue_lib.db.dialect import POSTGRES\n"
                        "from nsj_queue_lib.db.schema import render_schema\n"
                        "print(render_schema(POSTGRES, sys.argv[1], sys.argv[2]))",
                        B.SCHEMA, B.FILA], env=old_env(dict(os.environ)), cwd="/")

    def reset(self) -> None:
        B.drop_schema(self.pg)
        execute(self.pg, f'CREATE SCHEMA "{B.SCHEMA}"', self.ddl, EFFECTS_DDL)

    def load(self, n: int) -> None:
        self.reset()
        B.bulk_insert(self.pg, n)
        B.settle(self.pg)

    def start(self, procs: int) -> List[subprocess.Popen]:
        env = old_env(B.worker_env(self.pg))
        env.pop("QUEUE_COMPAT_1_2_2", None)
        env.pop("QUEUE_BATCH_SIZE", None)
        return spawn(self.python, [str(WORKER)], env, procs)

    def pickup(self, samples: int) -> List[float]:
        self.reset()
        return pickup_latency(self.pg, self.start(2), samples)


class PgQueuer(System):
    key = "pgq"
    label = "PgQueuer"
    latency = True
    TABLES = "pgqueuer, pgqueuer_log, pgqueuer_statistics"

    def __init__(self, pg: DevPostgres) -> None:
        super().__init__(pg)
        self.python = pgq_venv()
        self.version = run([str(self.python), "-c",
                            "from importlib.metadata import version as v; "
                            "print(v('pgqueuer'), v('asyncpg'))"]).split()
        self.label = f"PgQueuer {self.version[0]}"
        self.env = dict(os.environ, **self.pg.env())
        self.helper("install")
        execute(self.pg, f'CREATE SCHEMA "{B.SCHEMA}"', EFFECTS_DDL)

    def helper(self, *args: str) -> str:
        return run([str(self.python), str(PGQ_HELPER), *args], env=self.env)

    def empty(self) -> None:
        execute(self.pg, f'TRUNCATE {self.TABLES}, "{B.SCHEMA}".efeitos RESTART IDENTITY')

    def load(self, n: int) -> None:
        self.empty()
        self.helper("load", str(n))
        execute(self.pg, "VACUUM ANALYZE pgqueuer")

    def start(self, procs: int) -> List[subprocess.Popen]:
        return spawn(self.python, [str(PGQ_HELPER), "work"], self.env, procs)

    def drained(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while fetch_value(self.pg, "SELECT count(*) FROM pgqueuer") and \
                time.monotonic() < deadline:
            time.sleep(0.05)

    def pickup(self, samples: int) -> List[float]:
        self.empty()
        workers = self.start(2)
        try:
            return json.loads(self.helper("latency", str(samples)))
        finally:
            B.stop_workers(workers)


SYSTEMS = [Pgbench, NsjDefault, NsjCompat, NsjBatch, NsjOld, PgQueuer]


# -- report ------------------------------------------------------------------
def median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.0%}" if a and b else "-"


def summarize(systems: List[System], rounds: List[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for s in systems:
        row: Dict[str, Any] = {"label": s.label}
        for procs in (4, 1):
            values = [r[s.key][f"k{procs}"] for r in rounds if s.key in r]
            row[f"k{procs}"] = {"median": median(values), "rounds": values}
        if s.latency:
            p50s = [r[s.key]["pickup_p50_ms"] for r in rounds if s.key in r]
            row["pickup_p50_ms"] = {"median": median(p50s), "rounds": p50s}
        out[s.key] = row
    return out


def print_table(summary: Dict[str, Any], rounds: List[Dict[str, Any]]) -> None:
    base = summary.get("pgbench")
    head = (f"{'system':<27} {'4 workers, tasks/s (rounds)':<30} {'vs pgbench':>10}   "
            f"{'1 worker, tasks/s (rounds)':<30} {'vs pgbench':>10}   pickup p50 ms (rounds)")
    print(head)
    print("-" * len(head))
    for key, row in summary.items():
        cells = []
        for procs in (4, 1):
            k = row[f"k{procs}"]
            ref = base[f"k{procs}"]["median"] if base else None
            per = "/".join(f"{v:.0f}" for v in k["rounds"])
            cells.append(f"{k['median']:7.0f} ({per})".ljust(30)
                         + f" {ratio(k['median'], ref) if key != 'pgbench' else '':>10}")
        pick = row.get("pickup_p50_ms")
        lat = (f"{pick['median']:.1f} (" + "/".join(f"{v:.1f}" for v in pick["rounds"]) + ")"
               if pick else "-")
        print(f"{row['label']:<27} {cells[0]}   {cells[1]}   {lat}")
    nsj = summary.get("nsj")
    if nsj:
        lines = []
        for other, name in (("pgq", "PgQueuer"), ("nsj200", "2.0.0")):
            if other in summary:
                peer = summary[other]
                lines.append(f"nsj default / {name}: " + ", ".join(
                    f"{p} worker(s) {ratio(nsj[f'k{p}']['median'], peer[f'k{p}']['median'])}"
                    for p in (4, 1)))
        if "nsj_compat" in summary:
            cost = [1 - summary["nsj_compat"][f"k{p}"]["median"] / nsj[f"k{p}"]["median"]
                    for p in (4, 1)]
            lines.append(f"compat cost (1 - compat/default): 4 workers {cost[0]:.0%}, "
                         f"1 worker {cost[1]:.0%}")
        print("\n".join(lines))
    if "pgq" in summary:
        print("PgQueuer to the last acknowledgement (not the last start): " + ", ".join(
            f"{p} worker(s) {median([r['pgq'][f'k{p}_to_done'] for r in rounds]):.0f}/s"
            for p in (4, 1)))
    loads = [v for r in rounds for v in r["loadavg"]]
    print(f"load average (1 min) at the measurements: {min(loads):.1f}-{max(loads):.1f}")


def main() -> int:
    # The default line runs with default settings, whatever this shell exports.
    os.environ.pop("QUEUE_COMPAT_1_2_2", None)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200, help="pickup latency samples")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--systems", default=",".join(s.key for s in SYSTEMS),
                        help="subset, comma-separated: " + ",".join(s.key for s in SYSTEMS))
    parser.add_argument("--keep-dbs", action="store_true", help="leave bench_peers_* databases")
    args = parser.parse_args()
    wanted = args.systems.split(",")
    pg = acquire()
    started = time.time()
    tree = run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"]).strip()
    print(f"PostgreSQL {pg.host}:{pg.port}; CPUs {os.cpu_count()}; {args.tasks} tasks; "
          f"{args.rounds} round(s); work tree at {tree}", flush=True)
    systems: List[System] = []
    rounds: List[Dict[str, Any]] = []
    timeout = max(120.0, args.tasks / 20)
    try:
        for cls in SYSTEMS:
            if cls.key in wanted:
                log(f"setting up {cls.key}")
                systems.append(cls(pg))
        for r in range(args.rounds):
            result: Dict[str, Any] = {"loadavg": []}
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for s in order:
                entry: Dict[str, Any] = {}
                for procs in (4, 1):
                    result["loadavg"].append(os.getloadavg()[0])
                    entry[f"k{procs}"] = s.rate(args.tasks, procs, timeout)
                    entry[f"k{procs}_to_done"] = s.done_rate(args.tasks)
                    log(f"round {r + 1} {s.key} {procs} worker(s): {entry[f'k{procs}']:.0f}/s "
                        f"(load {result['loadavg'][-1]:.1f})")
                if s.latency:
                    result["loadavg"].append(os.getloadavg()[0])
                    lat = s.pickup(args.samples)
                    entry["pickup_p50_ms"] = statistics.median(lat)
                    entry["pickup_p95_ms"] = sorted(lat)[int(len(lat) * 0.95) - 1]
                    log(f"round {r + 1} {s.key} pickup p50 {entry['pickup_p50_ms']:.1f} ms")
                result[s.key] = entry
            rounds.append(result)
    finally:
        if not args.keep_dbs:
            for s in systems:
                s.close(pg)
        pg.release()
    summary = summarize(systems, rounds)
    print()
    print_table(summary, rounds)
    print(f"({time.time() - started:.0f} s)")
    if args.json:
        extra = {s.key: getattr(s, "version", None) for s in systems}
        Path(args.json).write_text(json.dumps(
            {"tasks": args.tasks, "work_tree": tree, "rounds": rounds, "summary": summary,
             "versions": extra, "cpus": os.cpu_count(),
             "finished": time.strftime("%Y-%m-%d %H:%M:%S")},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
