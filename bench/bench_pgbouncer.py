"""Per-task rate through PgBouncer in transaction pooling (DB_POOL_MODE=transaction) beside
the direct rate (session mode), same backlog, same worker, same run:
python bench/bench_pgbouncer.py [--tasks 5000] [--rounds 2].

PgBouncer (Debian package `pgbouncer`) is started on a free port with pool_mode =
transaction and 4 server connections (tests/fixtures/pgbouncer.py); the workers are
bench/worker_noop.py (one side-effect row per task through bd_conn).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench import (  # noqa: E402
    bulk_insert,
    drop_schema,
    effects_done,
    effects_rate,
    report,
    reset,
    settle,
    stop_workers,
    worker_env,
)
from nsj_queue_lib.cli.devdb import DevPostgres, acquire  # noqa: E402

POOL_SIZE = 4


def processing(pg: DevPostgres, n: int, procs: int, env: Dict[str, str]) -> float:
    """Rate of an n-task backlog drained by `procs` workers started with `env`."""
    reset(pg)
    bulk_insert(pg, n)
    settle(pg)
    workers = [subprocess.Popen([sys.executable, str(ROOT / "bench" / "worker_noop.py")],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _ in range(procs)]
    try:
        deadline = time.monotonic() + 600
        while effects_done(pg) < n:
            if time.monotonic() > deadline:
                raise RuntimeError("os workers não terminaram a fila em 10 minutos")
            time.sleep(0.05)
    finally:
        stop_workers(workers)
    return effects_rate(pg, n)


def run(pg: DevPostgres, out: Callable[..., Any] = report, n: int = 5_000,
        rounds: int = 1) -> None:
    """The two lines (1 and 4 workers): rate through PgBouncer, the direct rate as baseline."""
    from tests.fixtures.pgbouncer import PgBouncer, binary

    if binary() is None:
        print("pgbouncer não instalado: linha do PgBouncer não medida")
        return
    bouncer = PgBouncer(pg, pool_size=POOL_SIZE).start()
    try:
        direct_env = worker_env(pg)
        pooled_env = {**direct_env, **bouncer.env()}
        for procs in (1, 4):
            direct: List[float] = []
            pooled: List[float] = []
            for _ in range(rounds):  # (alternated: the machine is shared)
                direct.append(processing(pg, n, procs, direct_env))
                pooled.append(processing(pg, n, procs, pooled_env))
            out(f"per-task rate through PgBouncer, {procs} worker(s)", statistics.median(pooled),
                "tasks/s", statistics.median(direct),
                f"(baseline: direct, session mode; transaction pooling, {POOL_SIZE} server "
                f"connections; median of {rounds})")
    finally:
        bouncer.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    pg = acquire()
    try:
        run(pg, report, args.tasks, args.rounds)
    finally:
        drop_schema(pg)
        pg.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
