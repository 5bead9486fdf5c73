"""nsj_queue_lib benchmark: python bench/bench.py [--tasks 10000] [--quick].

Everything runs on the same PostgreSQL in one run (the one of DB_* or an
embedded one), and each figure is printed next to a raw-SQL baseline doing
the same database work from the same number of connections.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsj_queue_lib.cli.devdb import DevPostgres, acquire  # noqa: E402
from nsj_queue_lib.db.dialect import POSTGRES  # noqa: E402
from nsj_queue_lib.db.schema import render_schema  # noqa: E402
from nsj_queue_lib.queue_client import QueueClient  # noqa: E402

SCHEMA = "nsjq_bench"
FILA = "fila_bench"
TABLE = f'"{SCHEMA}"."{FILA}"'
RESULTS: List[Dict[str, Any]] = []


def report(name: str, value: float, unit: str, baseline: Optional[float] = None,
            note: str = "") -> None:
    ratio = f"{value / baseline:6.0%}" if baseline else "     -"
    base = f"{baseline:10.1f}" if baseline else " " * 10
    print(f"{name:<48} {value:10.1f} {unit:<8} baseline {base}  ratio {ratio}  {note}")
    RESULTS.append({"name": name, "value": value, "unit": unit, "baseline": baseline})


def drop_schema(pg: DevPostgres, schema: Optional[str] = None) -> None:
    """Drop this benchmark's schema (`schema`: another script's)."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f'DROP SCHEMA IF EXISTS "{schema or SCHEMA}" CASCADE')
    conn.close()


def reset(pg: DevPostgres) -> None:
    drop_schema(pg)
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{SCHEMA}"')
        cur.execute(render_schema(POSTGRES, SCHEMA, FILA))
        cur.execute(f'CREATE TABLE "{SCHEMA}".efeitos (id bigserial PRIMARY KEY, '
                    "tarefa_id bigint, t_inicio double precision)")
    conn.close()


def effects_done(pg: DevPostgres) -> int:
    """Tasks finished so far, from the small effects table (polling the queue table
    itself would scan the whole backlog every time and load the machine)."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f'SELECT count(*) FROM "{SCHEMA}".efeitos')
        n = cur.fetchone()[0]
    conn.close()
    return n


def count(pg: DevPostgres, where: str) -> int:
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {TABLE} WHERE {where}")
        n = cur.fetchone()[0]
    conn.close()
    return n


def bulk_insert(pg: DevPostgres, n: int, batch: int = 5000) -> float:
    conn = pg.connect(autocommit=False)
    client = QueueClient(conn, f"{SCHEMA}.{FILA}")
    t0 = time.perf_counter()
    for first in range(0, n, batch):
        client.insert_tasks([{"origem": "b", "destino": "b", "processo": "b",
                              "chave_externa": str(first + i), "payload": '{"n": 1}'}
                             for i in range(min(batch, n - first))])
        conn.commit()
    elapsed = time.perf_counter() - t0
    conn.close()
    return n / elapsed


# -- enqueue ---------------------------------------------------------------
def bench_enqueue(pg: DevPostgres, n: int, rounds: int = 4) -> None:
    """One task per transaction, library vs plain INSERT, alternating in `rounds` slices
    (so neither side gets the warmer cache)."""
    conn = pg.connect(autocommit=False)
    client = QueueClient(conn, f"{SCHEMA}.{FILA}")
    cur = conn.cursor()
    ours = raw = 0.0
    per_round = n // rounds
    for _r in range(rounds):
        t0 = time.perf_counter()
        for i in range(per_round):
            client.insert_task("b", "b", "b", str(i), {"n": i})
            conn.commit()
        ours += time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(per_round):
            cur.execute(f"INSERT INTO {TABLE} (origem, destino, processo, chave_externa, "
                        "payload) VALUES (%s, %s, %s, %s, %s)",
                        ("b", "b", "b", str(i), f'{{"n": {i}}}'))
            conn.commit()
        raw += time.perf_counter() - t0
    conn.close()
    total = per_round * rounds
    report("enqueue, 1 task per transaction", total / ours, "tasks/s", total / raw,
           "(baseline: plain INSERT into the queue table + COMMIT)")
    rate = max(bulk_insert(pg, 50_000) for _ in range(2))
    report("bulk enqueue (insert_tasks, 5000 per call)", rate, "tasks/s", note="best of 2")


# -- processing -------------------------------------------------------------
def _raw_consumer(env: Dict[str, str], result: Any) -> None:
    import psycopg2

    conn = psycopg2.connect(host=env["DB_HOST"], port=env["DB_PORT"], user=env["DB_USER"],
                            dbname=env["DB_BASE"], password=env["DB_PASS"] or None)
    cur = conn.cursor()
    done = 0
    while True:
        cur.execute(f"UPDATE {TABLE} SET status = 'processando' WHERE id = (SELECT id FROM "
                    f"{TABLE} WHERE status IN ('pendente', 'agendada') AND data_hora <= now() "
                    "ORDER BY prioridade DESC, data_hora, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
                    "RETURNING id, payload")
        row = cur.fetchone()
        if row is None:
            conn.rollback()
            break
        cur.execute(f'INSERT INTO "{SCHEMA}".efeitos (tarefa_id, t_inicio) VALUES (%s, %s)',
                    (row[0], time.time()))
        cur.execute(f"UPDATE {TABLE} SET status = 'sucesso', mensagem = 'ok' WHERE id = %s",
                    (row[0],))
        conn.commit()
        done += 1
    result.put(done)
    conn.close()


def effects_rate(pg: DevPostgres, first: int = 0) -> float:
    """Tasks/s between the first and the last task start recorded in `efeitos`
    (same measure for the library and for the baseline; process start-up excluded)."""
    conn = pg.connect()
    with conn.cursor() as cur:
        sql = f'SELECT t_inicio FROM "{SCHEMA}".efeitos ORDER BY t_inicio'
        if first:
            sql += f" LIMIT {int(first)}"
        cur.execute(f"SELECT min(t_inicio), max(t_inicio), count(*) FROM ({sql}) x")
        lo, hi, n = cur.fetchone()
    conn.close()
    return (n - 1) / (hi - lo)


def settle(pg: DevPostgres) -> None:
    """VACUUM ANALYZE after a bulk load, so the measure is the steady state of a queue and
    not autovacuum catching up with a table that just grew (same for both sides).  No
    CHECKPOINT: right after one, the first change of every page writes a full-page image,
    which penalises a large table whose index pages the run touches for the first time
    (see bench/README.md)."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f"VACUUM ANALYZE {TABLE}")
    conn.close()


def raw_processing(pg: DevPostgres, n: int, procs: int, measure: int = 0) -> float:
    """Baseline rate: plain SQL consumers; `measure` limits the run to that many tasks."""
    reset(pg)
    bulk_insert(pg, n)
    settle(pg)
    measure = measure or n
    result: Any = mp.Queue()
    workers = [mp.Process(target=_raw_consumer, args=(pg.env(), result)) for _ in range(procs)]
    for w in workers:
        w.start()
    if measure < n:
        while effects_done(pg) < measure:
            time.sleep(0.01)
        for w in workers:
            w.terminate()
    for w in workers:
        w.join()
    if measure >= n:
        assert sum(result.get() for _ in workers) == n
    return effects_rate(pg, measure)


def worker_env(pg: DevPostgres) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(pg.env())
    env.update({"QUEUE_NAME": FILA, "QUEUE_TABLE": f"{SCHEMA}.{FILA}", "LOG_DEBUG": "false",
                "PYTHONPATH": str(ROOT)})
    return env


def start_workers(pg: DevPostgres, procs: int) -> List[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, str(ROOT / "bench" / "worker_noop.py")],
                             env=worker_env(pg), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for _ in range(procs)]


def stop_workers(workers: List[subprocess.Popen]) -> None:
    """SIGTERM to every worker, then wait for each (killed after 60 s)."""
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(60)
        except subprocess.TimeoutExpired:
            w.kill()


def wait_connected(pg: DevPostgres, procs: int, timeout: float = 30.0,
                   fila: Optional[str] = None) -> None:
    """Until `procs` workers of queue `fila` (this benchmark's by default) listen."""
    deadline = time.monotonic() + timeout
    conn = pg.connect()
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            # (an idle worker's last statement is its LISTEN, or the listener turn's wait)
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE (query ILIKE 'LISTEN%%' "
                        "OR query LIKE 'DO $turn$%%') AND application_name LIKE %s",
                        (f"nsj_queue_lib:{fila or FILA}",))
            if cur.fetchone()[0] >= procs:
                break
            time.sleep(0.05)
    conn.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def lib_processing(pg: DevPostgres, n: int, procs: int, measure: int = 0) -> Dict[str, float]:
    """Rate of `measure` (default all) completions of an n-task backlog by `procs` workers."""
    reset(pg)
    bulk_insert(pg, n)
    settle(pg)
    measure = measure or n
    workers = start_workers(pg, procs)
    try:
        while effects_done(pg) < measure:
            time.sleep(0.02)
        rss = max(rss_mb(w.pid) for w in workers)
    finally:
        stop_workers(workers)
    return {"rate": effects_rate(pg, measure), "rss": rss}


def bench_processing(pg: DevPostgres, n: int) -> float:
    results = {}
    for procs in (1, 4):
        raw = raw_processing(pg, n, procs)
        ours = lib_processing(pg, n, procs)
        results[procs] = ours
        report(f"processing {n} tasks, {procs} worker process(es)", ours["rate"], "tasks/s",
               raw, "(baseline: raw claim/effect/finish SQL)")
    report("worker RSS after the run (max of workers)", results[4]["rss"], "MB")
    return results[4]["rate"]


def bench_backlog(pg: DevPostgres, measure: int, rounds: int = 3) -> None:
    """Rate over the first `measure` tasks with 1,000 and with 100,000 waiting; the two
    sizes alternate `rounds` times and the medians are compared (the machine is shared).
    The same is measured for the raw-SQL consumers, to tell the library's own cost from
    the database's."""
    small, big, raw_small, raw_big = [], [], [], []
    for _ in range(rounds):
        small.append(lib_processing(pg, 1_000, 4, measure=min(measure, 1_000))["rate"])
        big.append(lib_processing(pg, 100_000, 4, measure=min(measure, 1_000))["rate"])
        raw_small.append(raw_processing(pg, 1_000, 4, measure=min(measure, 1_000)))
        raw_big.append(raw_processing(pg, 100_000, 4, measure=min(measure, 1_000)))
    report("rate with 100,000 waiting tasks (4 workers)", statistics.median(big), "tasks/s",
           statistics.median(small), f"(baseline: same with 1,000 waiting; median of {rounds})")
    report("raw SQL with 100,000 waiting (4 connections)", statistics.median(raw_big),
           "tasks/s", statistics.median(raw_small), "(baseline: raw SQL with 1,000 waiting)")


def claim_rate(pg: DevPostgres, backlog: int, claims: int = 1000) -> float:
    """Claims/s of the library's claim statement alone, on a settled `backlog`."""
    from nsj_queue_lib.db.repository import TaskRepository
    from nsj_queue_lib.db.session import DbSession

    reset(pg)
    bulk_insert(pg, backlog)
    settle(pg)
    session = DbSession(pg.connect())
    repo = TaskRepository(session, f"{SCHEMA}.{FILA}")
    repo.task_claim_locked(12345)  # prepare
    t0 = time.perf_counter()
    for _ in range(claims):
        repo.task_claim_locked(12345)
    elapsed = time.perf_counter() - t0
    session.execute("SELECT pg_advisory_unlock_all()")
    session.close()
    return claims / elapsed


def bench_claim_cost(pg: DevPostgres) -> None:
    small = claim_rate(pg, 1_000)
    big = claim_rate(pg, 100_000)
    report("claim statement with 100,000 waiting", big, "claims/s", small,
           "(baseline: same with 1,000 waiting)")


def bench_latency(pg: DevPostgres, samples: int) -> None:
    reset(pg)
    workers = start_workers(pg, 2)
    try:
        wait_connected(pg, 2)
        conn = pg.connect(autocommit=False)
        client = QueueClient(conn, f"{SCHEMA}.{FILA}")
        lat = []
        read = pg.connect()
        rcur = read.cursor()
        for i in range(samples):
            task_id = client.insert_task("b", "b", "b", str(i), "{}")
            conn.commit()
            t_commit = time.time()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                rcur.execute(f'SELECT t_inicio FROM "{SCHEMA}".efeitos WHERE tarefa_id = %s',
                             (task_id,))
                row = rcur.fetchone()
                if row:
                    lat.append((row[0] - t_commit) * 1000)
                    break
                time.sleep(0.001)
            time.sleep(0.01)
        conn.close()
        read.close()
    finally:
        stop_workers(workers)
    lat.sort()
    p50 = statistics.median(lat)
    p95 = lat[int(len(lat) * 0.95) - 1]
    report("pickup latency p50 (idle workers, commit -> start)", p50, "ms")
    report("pickup latency p95", p95, "ms")


def bench_pubsub_vs_core(pg: DevPostgres, core_rate: float, quick: bool) -> None:
    """Fan-out and webhook delivery, as ratios of the core processing rate (4 workers)."""
    from bench import bench_pubsub

    print("-- pub/sub (lines below: baseline = core processing rate with 4 workers)")
    fan = bench_pubsub.bench_fanout(pg, 100, 5 if quick else 20)
    hook = bench_pubsub.bench_webhook(pg, 5 if quick else 20, 20 if quick else 50, 4)
    bench_pubsub.drop(pg)
    report("fan-out to 100 subscribers vs core rate", fan, "tasks/s", core_rate)
    report("webhook delivery (4 workers) vs core rate", hook, "tasks/s", core_rate)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    args = parser.parse_args()
    n = 1_000 if args.quick else args.tasks
    pg = acquire()
    where = "embedded" if pg.embedded else f"{pg.host}:{pg.port}/{pg.dbname}"
    print(f"PostgreSQL: {where}; CPUs: {os.cpu_count()}; Python {sys.version.split()[0]}")
    try:
        reset(pg)
        bench_enqueue(pg, 500 if args.quick else 2_000)
        core_rate = bench_processing(pg, n)
        bench_latency(pg, 50 if args.quick else 200)
        bench_backlog(pg, 1_000, rounds=3)
        bench_claim_cost(pg)
        bench_pubsub_vs_core(pg, core_rate, args.quick)
        from bench import bench_cs

        bench_cs.run(pg, report, core_rate, n=1_000 if args.quick else 5_000,
                     samples=30 if args.quick else 100)
        from bench import bench_pgbouncer

        bench_pgbouncer.run(pg, report, n=1_000 if args.quick else 5_000)
    finally:
        drop_schema(pg)
        pg.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
