"""CPU per task of MariaDB native workers, two (or more) source trees compared in pairs.

    python bench/bench_mysql_cost.py ROUNDS TASKS WORKERS label=/path/to/tree[@driver] ...

`@driver` (pymysql or mysqlclient) sets the workers' DB_MYSQL_DRIVER, so one tree can be
paired with itself on the two drivers (`pymysql=.@pymysql mysqlclient=.@mysqlclient`).

Each run loads TASKS tasks (each inserts a side-effect row, bench/worker_noop.py), starts
WORKERS native workers from one tree (PYTHONPATH=tree) and reads, between 10% and 95% of
the tasks done, the CPU of the worker processes (all threads, /proc/<pid>/task) and of
their MariaDB connection threads (information_schema.PROCESSLIST.TID, then the server's
/proc/<mariadbd>/task/<tid>/schedstat), per task.  The trees alternate in each round (ABBA
order), so a change of machine load hits both alike; CPU per task moves much less with
load than the rate does.  Needs the MariaDB server on this machine (reads its /proc).
MariaDB comes from NSJQ_TEST_MYSQL_* as in bench_cs.py; NSJQ_BENCH_SCHEMA names the
database.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import bench_cs  # noqa: E402


def _seconds(path: str) -> float:
    """CPU seconds of one thread (schedstat: nanoseconds on a CPU)."""
    with open(path) as f:
        return int(f.read().split()[0]) / 1e9


def _process_cpu(pid: int) -> float:
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += _seconds(f"/proc/{pid}/task/{tid}/schedstat")
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return total


def _server_pid() -> int:
    return int(subprocess.check_output(["pgrep", "-x", "mariadbd|mysqld"]).split()[0])


def _server_threads(cur) -> List[int]:
    cur.execute("SELECT TID FROM information_schema.PROCESSLIST WHERE DB = %s "
                "AND ID <> CONNECTION_ID()", (bench_cs.SCHEMA,))
    return [row[0] for row in cur.fetchall()]


def _sample(server: int, procs, tids: List[int]) -> Tuple[float, float]:
    workers = sum(_process_cpu(p.pid) for p in procs)
    threads = 0.0
    for tid in tids:
        try:
            threads += _seconds(f"/proc/{server}/task/{tid}/schedstat")
        except FileNotFoundError:
            pass
    return workers, threads


def one_run(tree: str, n: int, workers: int, driver: str = "") -> Dict[str, float]:
    target = bench_cs.Target("mariadb", None)
    target.load(n)
    run = bench_cs.ClientServerRun(target, server=False, mysql_driver=driver or None,
                                   tree=Path(tree).resolve())
    run.start_workers(workers)
    server = _server_pid()
    watch = target.connect()
    marks: Dict[str, Tuple[int, float, float]] = {}
    try:
        with watch.cursor() as cur:
            tids: List[int] = []
            deadline = time.monotonic() + 900
            while "end" not in marks:
                cur.execute(f"SELECT coalesce(max(id), 0) FROM {target.effects()}")
                done = cur.fetchone()[0]
                if "start" not in marks and done >= 0.1 * n:
                    tids = _server_threads(cur)
                    marks["start"] = (done, *_sample(server, run.procs, tids))
                if done >= 0.95 * n:
                    marks["end"] = (done, *_sample(server, run.procs, tids))
                if time.monotonic() > deadline:
                    raise RuntimeError("tarefas não concluídas a tempo")
                time.sleep(0.2)
            while done < n:
                cur.execute(f"SELECT coalesce(max(id), 0) FROM {target.effects()}")
                done = cur.fetchone()[0]
                time.sleep(0.2)
    finally:
        watch.close()
        run.stop()
    lo, hi = (target.scalar(f"SELECT {f}(t_inicio) FROM {target.effects()}")
              for f in ("min", "max"))
    (d0, w0, s0), (d1, w1, s1) = marks["start"], marks["end"]
    return {"worker_us": (w1 - w0) / (d1 - d0) * 1e6, "server_us": (s1 - s0) / (d1 - d0) * 1e6,
            "rate": (n - 1) / (hi - lo), "load": os.getloadavg()[0]}


def main() -> int:
    rounds, n, workers = (int(a) for a in sys.argv[1:4])
    trees = [arg.split("=", 1) for arg in sys.argv[4:]]
    results: Dict[str, List[Dict[str, float]]] = {label: [] for label, _ in trees}
    try:
        for r in range(rounds):
            for label, spec in (trees if r % 2 == 0 else trees[::-1]):
                tree, _, driver = spec.partition("@")
                m = one_run(tree, n, workers, driver)
                results[label].append(m)
                print(f"round {r} {label:10s} workers {m['worker_us']:6.0f} µs  MariaDB "
                      f"{m['server_us']:6.0f} µs  total {m['worker_us'] + m['server_us']:6.0f} "
                      f"µs per task  {m['rate']:7.1f} tasks/s  load {m['load']:.1f}", flush=True)
    finally:
        bench_cs.Target("mariadb", None).drop()
    for label, runs in results.items():
        mean = {key: statistics.fmean(m[key] for m in runs) for key in runs[0]}
        print(f"mean  {label:10s} workers {mean['worker_us']:6.0f} µs  MariaDB "
              f"{mean['server_us']:6.0f} µs  total {mean['worker_us'] + mean['server_us']:6.0f} "
              f"µs per task  {mean['rate']:7.1f} tasks/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
