"""Throughput and scale lines: python bench/bench_perf.py [--quick] [--only NAME ...].

Lines, by --only name (each with a baseline measured in the same run, and the ratio):
  pgbench     per-task and batched (QUEUE_BATCH_SIZE=--batch) processing of the library,
              each vs pgbench running the same claim / side effect / finish SQL from the
              same number of clients, and batch vs the per-task rate (4 workers): the
              batch lines run here, there is no separate "batch" name
  statements  statements and round trips per completed task with 4 and 32 idle
              workers while tasks arrive at a fixed rate; connections per process
  webhook     one webhook worker process with QUEUE_CONCURRENCY=32 against a local
              endpoint answering in 100 ms, vs the same process with QUEUE_CONCURRENCY=1
  xmin        a transaction pins xmin while tasks arrive at a fixed rate: completion
              rate before, during and after the pin

Uses the PostgreSQL of the DB_* variables (or an embedded one), in its own schema.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench.bench as base  # noqa: E402

# A schema of its own: other benchmarks may run at the same time on a shared server
# (NSJQ_BENCH_SCHEMA gives another one, for two runs of this script at once).
base.SCHEMA = SCHEMA = os.environ.get("NSJQ_BENCH_SCHEMA", "nsjq_bench_perf")
base.FILA = FILA = "fila_perf"
base.TABLE = TABLE = f'"{SCHEMA}"."{FILA}"'

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
from nsj_queue_lib.engine.base import task_lock_key  # noqa: E402
from nsj_queue_lib.queue_client import QueueClient  # noqa: E402

EFFECTS = f'"{SCHEMA}".efeitos'
LOCK_NS = task_lock_key(f"{SCHEMA}.{FILA}", 0)[0]
# int4 object id of a bigint task id, as the library computes it (task_claim_locked)
LOCK_ID = ("((id & 4294967295) - CASE WHEN (id & 4294967295) >= 2147483648 "
           "THEN 4294967296 ELSE 0 END)::int4")
DUE = (f"SELECT id FROM {TABLE} WHERE status IN ('pendente', 'agendada') AND data_hora <= now() "
       "ORDER BY prioridade DESC, data_hora, id")


# -- workers -------------------------------------------------------------------
def start_workers(pg: DevPostgres, procs: int, **extra: str) -> List[subprocess.Popen]:
    env = worker_env(pg)
    env.update(extra)
    return [subprocess.Popen([sys.executable, str(ROOT / "bench" / "worker_noop.py")],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(procs)]


def wait_for(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def backends(pg: DevPostgres) -> int:
    """Consumer sessions of this queue's workers (named after the queue)."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    (f"nsj_queue_lib:{FILA}",))
        n = cur.fetchone()[0]
    conn.close()
    return n


def lib_rate(pg: DevPostgres, n: int, procs: int, **extra: str) -> float:
    reset(pg)
    bulk_insert(pg, n)
    settle(pg)
    workers = start_workers(pg, procs, **extra)
    try:
        wait_for(lambda: effects_done(pg) >= n, 600, "library run did not finish")
    finally:
        stop_workers(workers)
    return effects_rate(pg)


# -- pgbench baseline ------------------------------------------------------------
def pgbench_script(batch: int) -> str:
    """The library's way, in SQL run by pgbench: an autocommit claim (advisory lock,
    asynchronous commit) then BEGIN, side effect, finish + unlock, COMMIT; batched:
    BEGIN, one claim of up to `batch` rows, per task SAVEPOINT (with the release of the
    last task's in the same round trip, pgbench's \\;) and effect, then one UPDATE
    marking every task and one COMMIT (runtime/batch.py since session 12; before it each
    task had its own finish UPDATE and RELEASE: NSJQ_BENCH_PGBENCH_OLD_BATCH=1)."""
    effect = (f"INSERT INTO {EFFECTS} (tarefa_id, t_inicio) "
              "SELECT {id}, extract(epoch FROM clock_timestamp()) WHERE {id} > 0;")
    if batch <= 1:
        return "\n".join([
            f"WITH s AS (SELECT set_config('synchronous_commit', 'off', true)), "
            f"c AS (UPDATE {TABLE} SET status = 'processando' FROM s "
            f"WHERE id = ({DUE} LIMIT 1 FOR UPDATE SKIP LOCKED) "
            f"AND pg_try_advisory_lock({LOCK_NS}, {LOCK_ID}) RETURNING id) "
            "SELECT coalesce((SELECT id FROM c), 0) AS id \\gset",
            "BEGIN;",
            effect.format(id=":id"),
            f"UPDATE {TABLE} SET status = 'sucesso', mensagem = 'ok' WHERE id = :id AND "
            f"status = 'processando' RETURNING pg_advisory_unlock({LOCK_NS}, {LOCK_ID});",
            "END;",
        ]) + "\n"
    lines = [
        "BEGIN;",
        f"WITH c AS (UPDATE {TABLE} SET status = 'processando' WHERE id IN "
        f"({DUE} LIMIT {batch} FOR UPDATE SKIP LOCKED) RETURNING id, prioridade, data_hora) "
        "SELECT coalesce(array_agg(id ORDER BY prioridade DESC, data_hora, id), '{}') "
        "AS ids FROM c \\gset",
    ]
    old = bool(os.environ.get("NSJQ_BENCH_PGBENCH_OLD_BATCH"))
    for i in range(1, batch + 1):
        task = f"coalesce((':ids'::bigint[])[{i}], 0)"
        if old:
            lines += ["SAVEPOINT t;", effect.format(id=task),
                      f"UPDATE {TABLE} SET status = 'sucesso', mensagem = 'ok' "
                      f"WHERE id = {task} AND status = 'processando';",
                      "RELEASE SAVEPOINT t;"]
        else:
            lines += ["SAVEPOINT t;" if i == 1 else "RELEASE SAVEPOINT t\\; SAVEPOINT t;",
                      effect.format(id=task)]
    if not old:
        lines.append(f"UPDATE {TABLE} t SET status = 'sucesso', mensagem = m.mensagem "
                     "FROM unnest(':ids'::bigint[], array_fill('ok'::text, "
                     "ARRAY[cardinality(':ids'::bigint[])])) AS m(id, mensagem) "
                     "WHERE t.id = m.id AND t.status = 'processando';")
    lines.append("END;")
    return "\n".join(lines) + "\n"


def pgbench_rate(pg: DevPostgres, n: int, clients: int, batch: int) -> Optional[float]:
    exe = shutil.which("pgbench")
    if exe is None:
        return None
    reset(pg)
    bulk_insert(pg, n)
    settle(pg)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(pgbench_script(batch))
        script = fh.name
    env = dict(os.environ, PGPASSWORD=pg.password or "")
    per_client = -(-n // (clients * max(batch, 1)))
    try:
        subprocess.run([exe, "-n", "-h", pg.host, "-p", str(pg.port), "-U", pg.user,
                        "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(per_client),
                        "-f", script, pg.dbname], env=env, check=True,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finally:
        os.unlink(script)
    return effects_rate(pg)


def bench_pgbench(pg: DevPostgres, n: int, batch: int) -> Dict[str, Optional[float]]:
    out: Dict[str, Optional[float]] = {}
    for label, size in (("per task", 1), (f"batch {batch}", batch)):
        base = pgbench_rate(pg, n, 4, size)
        env = {"QUEUE_BATCH_SIZE": str(size)} if size > 1 else {}
        ours = lib_rate(pg, n, 4, **env)
        out[label] = ours
        if base is None:
            report(f"processing {n}, 4 workers, {label}", ours, "tasks/s",
                   note="(pgbench não encontrado: sem baseline)")
        else:
            report(f"processing {n}, 4 workers, {label}", ours, "tasks/s", base,
                   f"(baseline: pgbench, 4 clients, same SQL {label})")
    per_task, batched = out["per task"], out[f"batch {batch}"]
    if per_task and batched:
        report(f"batch {batch} vs per task (4 workers)", batched, "tasks/s", per_task,
               "(baseline: per-task rate of this run)")
    return out


# -- statements per task with idle workers ---------------------------------------------
class Producer(threading.Thread):
    """Enqueues `rate` tasks/s for `seconds`, `per_commit` tasks per transaction."""

    def __init__(self, pg: DevPostgres, rate: float, seconds: float,
                 per_commit: int = 1, table: Optional[str] = None) -> None:
        super().__init__(daemon=True)
        # `pg`: anything with connect(autocommit=...) (bench_cs.Target for MariaDB, with
        # `table` its queue).
        self.pg, self.rate, self.seconds = pg, rate, seconds
        self.per_commit = per_commit
        self.table = table or f"{SCHEMA}.{FILA}"
        self.elapsed = 0.0
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        conn = self.pg.connect(autocommit=False)
        client = QueueClient(conn, self.table)
        start = time.monotonic()
        while not self.stop.is_set():
            elapsed = time.monotonic() - start
            if elapsed >= self.seconds:
                break
            due = int(elapsed * self.rate) + 1
            while self.sent < due:
                n = min(self.per_commit, due - self.sent) if self.per_commit > 1 else 1
                if n == 1:
                    client.insert_task("b", "b", "b", str(self.sent), "{}")
                else:
                    client.insert_tasks([{"origem": "b", "destino": "b", "processo": "b",
                                          "chave_externa": str(self.sent + k), "payload": "{}"}
                                         for k in range(n)])
                conn.commit()
                self.sent += n
            time.sleep(max(0.0, (self.sent / self.rate) - (time.monotonic() - start)))
        self.elapsed = time.monotonic() - start
        conn.close()


def read_counts(directory: str) -> List[Dict[str, int]]:
    out = []
    for path in glob.glob(os.path.join(directory, "counts-*.json")):
        with open(path, encoding="utf-8") as fh:
            out.append(json.load(fh))
    return out


def statements_line(pg: DevPostgres, idle: int, rate: float, seconds: float) -> Dict[str, float]:
    reset(pg)
    directory = tempfile.mkdtemp(prefix="nsjq-count-")
    workers = start_workers(pg, idle, NSJQ_BENCH_COUNT_DIR=directory)
    try:
        wait_for(lambda: backends(pg) >= idle, 60, "workers did not connect")
        time.sleep(2.0)  # start-up statements settle (rescue, first probes)
        Path(directory, "mark").touch()  # counts from here on (bench/counting.py)
        time.sleep(0.1)
        producer = Producer(pg, rate, seconds)
        producer.start()
        producer.join()
        wait_for(lambda: effects_done(pg) >= producer.sent, 60, "tasks not processed")
    finally:
        stop_workers(workers)
    counts = read_counts(directory)
    if not os.environ.get("NSJQ_BENCH_KEEP"):
        shutil.rmtree(directory, ignore_errors=True)
    else:
        print("counts kept in", directory)
    done = effects_done(pg)
    total = {k: sum(c[k] - (c["at_mark"] or {}).get(k, 0) for c in counts)
             for k in ("statements", "round_trips")}
    p50, p99 = pickup_percentiles(pg)
    return {"statements": total["statements"] / done, "round_trips": total["round_trips"] / done,
            "connections": max((c["connections_max"] for c in counts), default=0),
            "tasks": done, "procs": len(counts), "pickup_p50": p50, "pickup_p99": p99}


def pickup_percentiles(pg: DevPostgres) -> tuple:
    """Pickup (ms) of the tasks of a steady-arrival run: from the task's data_hora (the
    producer's now(); it commits right after the insert) to the start of its work."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP "
                    "(ORDER BY (e.t_inicio - extract(epoch FROM t.data_hora)) * 1000) "
                    f"FROM {EFFECTS} e JOIN {TABLE} t ON t.id = e.tarefa_id")
        p50, p99 = cur.fetchone()[0]
    conn.close()
    return p50, p99


def busy_statements(pg: DevPostgres, n: int) -> Dict[str, float]:
    """Statements per task when the workers never go idle (a backlog): the floor."""
    reset(pg)
    bulk_insert(pg, n)
    settle(pg)
    directory = tempfile.mkdtemp(prefix="nsjq-count-")
    workers = start_workers(pg, 4, NSJQ_BENCH_COUNT_DIR=directory)
    try:
        wait_for(lambda: effects_done(pg) >= n, 600, "backlog not processed")
    finally:
        stop_workers(workers)
    counts = read_counts(directory)
    shutil.rmtree(directory, ignore_errors=True)
    return {"statements": sum(c["statements"] for c in counts) / n,
            "round_trips": sum(c["round_trips"] for c in counts) / n}


def bench_statements(pg: DevPostgres, rate: float, seconds: float, busy_n: int) -> None:
    floor = busy_statements(pg, busy_n)
    report("statements per task, backlog (no idle wait)", floor["statements"], "stmts",
           note=f"({floor['statements']:.2f}; {floor['round_trips']:.2f} round trips; "
                "includes the task's own "
                "BEGIN, side effect, finish, COMMIT)")
    for idle in (4, 32):
        got = statements_line(pg, idle, rate, seconds)
        report(f"statements per task, {idle} idle workers, {rate:.0f}/s", got["statements"],
               "stmts", floor["statements"],
               f"({got['statements']:.2f}; {got['round_trips']:.2f} round trips; target <= 6; "
               "baseline: backlog)")
        report(f"pickup p50 at {rate:.0f}/s, {idle} idle workers", got["pickup_p50"], "ms",
               note=f"(p99 {got['pickup_p99']:.1f} ms; data_hora -> start of the task's work, "
                    f"{got['tasks']} tasks)")
        report(f"connections per worker process ({idle} workers)", got["connections"],
               "conns", note="(max held at once by one process, counted in the client)")


# -- webhook with concurrency ---------------------------------------------------------
def webhook_rate(pg: DevPostgres, concurrency: int, deliveries: int, server: Any) -> float:
    from bench import bench_pubsub as ps

    endpoint = server.RequestHandlerClass
    url = ps.http_url(server)
    ps.reset(pg)
    per_pub = 50
    ps.add_subscribers(pg, "wh", per_pub, url=url)
    env = ps.worker_env(pg)
    env["QUEUE_CONCURRENCY"] = str(concurrency)
    worker = subprocess.Popen([sys.executable, "-m", "nsj_queue_lib.worker_webhook"], env=env,
                              cwd=str(ROOT), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        ps.wait_connected(pg, 1)
        endpoint.answered.clear()
        endpoint.peers.clear()
        conn = pg.connect(autocommit=False)
        client = QueueClient(conn, ps.TABLE, ps.SUB_TABLE)
        client.insert_tasks([{"origem": "b", "destino": "b", "processo": "wh",
                              "chave_externa": str(i), "payload": {"pedido": i}}
                             for i in range(max(1, deliveries // per_pub))], pub_sub=True)
        conn.commit()
        conn.close()
        total = max(1, deliveries // per_pub) * per_pub
        done_sql = "subscriber_id IS NOT NULL AND status = 'sucesso'"
        wait_for(lambda: ps.count(pg, done_sql) >= total, 600, "webhooks not delivered")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
    # Between the first and the last answer of the endpoint (start-up and fan-out excluded).
    hits = endpoint.answered
    return (len(hits) - 1) / (hits[-1] - hits[0])


def bench_webhook_concurrency(pg: DevPostgres, deliveries: int) -> None:
    from bench import bench_pubsub as ps

    # Names of their own: another benchmark may use the pub/sub bench's schema meanwhile.
    ps.SCHEMA, ps.FILA = f"{SCHEMA}_wh", "fila_perf_wh"
    ps.TABLE, ps.SUB_TABLE = f"{ps.SCHEMA}.{ps.FILA}", f"{ps.SCHEMA}.{ps.FILA}_subscriber"
    # A ThreadingHTTPServer, HTTP/1.1 keep-alive, answering each request after 100 ms.
    server = ps.start_http(0.1)
    try:
        one = webhook_rate(pg, 1, 100, server)
        many = webhook_rate(pg, 32, deliveries, server)
        connections = len(server.RequestHandlerClass.peers)
    finally:
        server.shutdown()
        server.server_close()
        ps.drop(pg)
    report("webhook, 1 process, QUEUE_CONCURRENCY=32, 100 ms endpoint", many, "tasks/s", one,
           f"(baseline: the same process with QUEUE_CONCURRENCY=1; target >= 200/s; "
           f"{connections} connections for {deliveries} requests)")


# -- xmin pin ------------------------------------------------------------------------
def completions_between(pg: DevPostgres, t0: float, t1: float) -> float:
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {EFFECTS} WHERE t_inicio >= %s AND t_inicio < %s",
                    (t0, t1))
        n = cur.fetchone()[0]
    conn.close()
    return n / max(t1 - t0, 1e-6)


def bench_xmin(pg: DevPostgres, rate: float, before: float, pinned: float,
               after: float) -> None:
    """Tasks arrive at `rate`/s for before + pinned + after seconds; during the middle
    phase another session holds a snapshot (and an xid), so no dead tuple is removed."""
    reset(pg)
    workers = start_workers(pg, 4)
    try:
        wait_for(lambda: backends(pg) >= 4, 60, "workers did not connect")
        # Arrivals in small transactions (10 tasks each), so that one producer connection
        # sustains the rate on a busy machine.
        producer = Producer(pg, rate, before + pinned + after, per_commit=10)
        start = time.time()
        producer.start()
        time.sleep(before)
        pin = pg.connect(autocommit=False)
        with pin.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SELECT txid_current(), count(*) FROM pg_class")
        pin_start = time.time()
        time.sleep(pinned)
        pin.rollback()
        pin.close()
        pin_end = time.time()
        producer.join()
        wait_for(lambda: effects_done(pg) >= producer.sent, 600, "backlog not drained")
        drained = time.time()
    finally:
        stop_workers(workers)
    base = completions_between(pg, start + 5, pin_start)
    during = completions_between(pg, pin_start, pin_end)
    recovery = None
    step = 5.0
    t = pin_end
    while t + step <= drained:
        if completions_between(pg, t, t + step) >= 0.9 * base:
            recovery = t + step - pin_end
            break
        t += step
    report(f"xmin pinned {pinned:.0f} s at {rate:.0f}/s arrival", during, "tasks/s", base,
           f"(baseline: unpinned minute before; target >= 50%; arrivals achieved "
           f"{producer.sent / max(producer.elapsed, 1e-6):.0f}/s)")
    report("  back to >= 90% after the pin ended", recovery if recovery is not None else -1,
           "s", note=f"(drained {drained - pin_end:.0f} s after the pin; target <= 60 s)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    lines = ["pgbench", "statements", "webhook", "xmin"]
    parser.add_argument("--only", nargs="*", choices=lines, default=lines)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--pin-seconds", type=float, default=300.0)
    args = parser.parse_args()
    n = 2_000 if args.quick else args.tasks
    pg = acquire()
    where = "embedded" if pg.embedded else f"{pg.host}:{pg.port}/{pg.dbname}"
    print(f"PostgreSQL: {where}; CPUs: {os.cpu_count()}; Python {sys.version.split()[0]}",
          flush=True)
    try:
        if "pgbench" in args.only:
            bench_pgbench(pg, n, args.batch)
        if "statements" in args.only:
            bench_statements(pg, 100.0, 10.0 if args.quick else 30.0, n)
        if "webhook" in args.only:
            bench_webhook_concurrency(pg, 500 if args.quick else 2_000)
        if "xmin" in args.only:
            pin = 20.0 if args.quick else args.pin_seconds
            bench_xmin(pg, 500.0, 20.0 if args.quick else 60.0, pin,
                       30.0 if args.quick else 90.0)
    finally:
        drop_schema(pg)
        pg.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
