"""Client instructions per task of one PostgreSQL worker, trees compared, load-independent.

    python bench/bench_worker_callgrind.py [--tasks 3000] [--window 1000] [--profile]
        label=/path/to/tree ...

For each tree: a queue created by that tree's DDL in its own schema, TASKS tasks
bulk-inserted (`QueueClient.insert_tasks`, `VACUUM ANALYZE`), then one
`bench/worker_noop.py` of that tree (default settings, each task inserts one side-effect
row through `bd_conn`) under `valgrind --tool=callgrind` with instrumentation off; it is
switched on for WINDOW tasks after the first 25% and the worker's instructions (all its
threads) are divided by the tasks done in the window.  Time-driven work (the health
thread, the HALT read) is counted too, and grows per task under load: compare pairs run
at a similar load.  `--profile`: the worker under cProfile instead (no valgrind), the
top functions by tottime printed.  Uses the `DB_*` server (or an embedded one).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsj_queue_lib.cli.devdb import DevPostgres, acquire  # noqa: E402

SCHEMA = "nsjq_cpubench"
FILA = "fila_cpu"

PROFILE_WRAPPER = """
import cProfile, os, pstats, runpy, signal, sys
prof = cProfile.Profile()
def _stop(*_):
    prof.disable()
    lines = int(os.environ.get("PROF_LINES", "45"))
    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(lines)
    raise SystemExit(0)
signal.signal(signal.SIGUSR1, _stop)
sys.argv = [sys.argv[1]]
prof.enable()
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def load(pg: DevPostgres, tree: Path, n: int) -> None:
    """Schema by the tree's own DDL, n tasks by the tree's own QueueClient."""
    code = (
        "import sys; from nsj_queue_lib.db.dialect import POSTGRES\n"
        "from nsj_queue_lib.db.schema import render\n"
        "from nsj_queue_lib.queue_client import QueueClient\n"
        "import psycopg2\n"
        f"c = psycopg2.connect(host={pg.host!r}, port={pg.port}, user={pg.user!r}, "
        f"password={pg.password!r} or None, dbname={pg.dbname!r})\n"
        "c.autocommit = True\ncur = c.cursor()\n"
        f"cur.execute('DROP SCHEMA IF EXISTS \"{SCHEMA}\" CASCADE')\n"
        f"cur.execute('CREATE SCHEMA \"{SCHEMA}\"')\n"
        f"cur.execute(render(POSTGRES, '{SCHEMA}', '{FILA}'))\n"
        f"cur.execute('CREATE TABLE \"{SCHEMA}\".efeitos (id bigserial PRIMARY KEY, "
        "tarefa_id bigint, t_inicio double precision)')\n"
        "c.autocommit = False\n"
        f"q = QueueClient(c, '{SCHEMA}.{FILA}')\n"
        f"for first in range(0, {n}, 1000):\n"
        "    q.insert_tasks([{'origem': 'b', 'destino': 'b', 'processo': 'b',\n"
        "                     'chave_externa': str(first + i), 'payload': '{\"n\": 1}'}\n"
        f"                    for i in range(min(1000, {n} - first))])\n"
        "    c.commit()\n"
        "c.autocommit = True\n"
        f"cur.execute('VACUUM ANALYZE \"{SCHEMA}\".\"{FILA}\"')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={**os.environ, "PYTHONPATH": str(tree)}, cwd=str(tree))


def done(cur) -> int:
    cur.execute(f'SELECT count(*) FROM "{SCHEMA}".efeitos')
    return cur.fetchone()[0]


def wait_done(cur, n: int, deadline: float) -> int:
    while True:
        got = done(cur)
        if got >= n:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {got} of {n} tasks done")
        time.sleep(0.05)


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def one_tree(pg: DevPostgres, label: str, tree: Path, n: int, window: int, profile: bool,
             workdir: str) -> float:
    load(pg, tree, n)
    env = dict(os.environ)
    env.update(pg.env())
    env.update({"QUEUE_NAME": FILA, "QUEUE_TABLE": f"{SCHEMA}.{FILA}", "LOG_DEBUG": "false",
                "PYTHONPATH": str(tree)})
    script = str(tree / "bench" / "worker_noop.py")
    if profile:
        cmd = [sys.executable, "-c", PROFILE_WRAPPER, script]
    else:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no",
               f"--callgrind-out-file={workdir}/cg.{label}.%p", sys.executable, script]
    errlog = open(f"{workdir}/{label}.err", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=errlog,
                            cwd=str(tree))
    conn = pg.connect()
    cur = conn.cursor()
    try:
        deadline = time.monotonic() + 1800
        start = n // 4
        if profile:
            first = wait_done(cur, n, deadline)
            proc.send_signal(signal.SIGUSR1)
            proc.wait(60)
            errlog.close()
            print(open(f"{workdir}/{label}.err").read())
            return 0.0
        wait_done(cur, start, deadline)
        _control("-z", str(proc.pid))
        _control("-i", "on", str(proc.pid))
        first = done(cur)
        wait_done(cur, start + window, deadline)
        _control("-i", "off", str(proc.pid))
        last = done(cur)
        _control(f"--dump={label}", str(proc.pid))
        dumped = sorted(glob.glob(f"{workdir}/cg.{label}.{proc.pid}.*"), key=os.path.getmtime)
        with open(dumped[-1]) as f:
            total = int(re.search(r"^totals: (\d+)", f.read(), re.M).group(1))
        keep = os.environ.get("CG_KEEP")
        if keep:
            shutil.copy(dumped[-1], os.path.join(keep, f"cg.{label}.out"))
        return total / (last - first)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("trees", nargs="+")
    args = parser.parse_args()
    pg = acquire()
    workdir = tempfile.mkdtemp(prefix="nsjq_cpucg_")
    try:
        for spec in args.trees:
            label, _, tree = spec.partition("=")
            load_avg = os.getloadavg()[0]
            per_task = one_tree(pg, label, Path(tree).resolve(), args.tasks, args.window,
                                args.profile, workdir)
            if not args.profile:
                print(f"{label:12s} {per_task / 1e3:7.1f} k client instructions per task "
                      f"(load {load_avg:.1f})", flush=True)
    finally:
        conn = pg.connect()
        with conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        conn.close()
        pg.release()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
