"""Webhook deliveries per second with one endpoint down beside all endpoints up:
python bench/bench_webhook_down.py [--quick].

E local endpoints (HTTP servers on 127.0.0.1, one port each), S webhook subscribers on
each, P publications, W `python -m nsj_queue_lib.worker_webhook` processes.  Three runs:

1. all endpoints up: deliveries per second until every delivery is `sucesso`;
2. one endpoint down (it accepts the connection and never answers in time:
   DEFAULT_WEBHOOK_TIMEOUT=1), circuit breaker on (the default): deliveries per second
   to the healthy endpoints, until all of theirs are `sucesso`;
3. the same with the breaker off (WEBHOOK_BREAKER_FAILURES=0): every delivery to the
   dead endpoint holds a worker for the whole timeout.

Uses the PostgreSQL of the DB_* variables (or an embedded one), in its own schema.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench import stop_workers  # noqa: E402
from bench.bench_pubsub import (  # noqa: E402
    RESULTS,
    SUB_TABLE,
    TABLE,
    count,
    drop,
    http_url,
    report,
    reset,
    start_http,
    wait_connected,
    worker_env,
)
from nsj_queue_lib.cli.devdb import DevPostgres, acquire  # noqa: E402
from nsj_queue_lib.queue_client import QueueClient  # noqa: E402

PROCESSO = "wh"


def add_subscribers(pg: DevPostgres, urls: List[str], per_endpoint: int) -> None:
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {SUB_TABLE} (id, processo, url, http_method) VALUES (%s, %s, %s, %s)",
            [(f"e{e}_s{s}", PROCESSO, f"{url}/e{e}/s{s}", "POST")
             for e, url in enumerate(urls) for s in range(per_endpoint)])
    conn.close()


def run(pg: DevPostgres, endpoints: int, per_endpoint: int, publications: int, procs: int,
        down: bool, breaker: bool) -> float:
    reset(pg)
    servers = [start_http() for _ in range(endpoints - 1)]
    servers.append(start_http(delay=5.0 if down else 0.0))
    add_subscribers(pg, [http_url(s) for s in servers], per_endpoint)
    env = dict(worker_env(pg), DEFAULT_WEBHOOK_TIMEOUT="1",
               WEBHOOK_BREAKER_FAILURES="5" if breaker else "0")
    workers = [subprocess.Popen([sys.executable, "-m", "nsj_queue_lib.worker_webhook"],
                                env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(procs)]
    down_prefix = f"e{endpoints - 1}_%"  # the last endpoint's subscribers
    where = ("subscriber_id IS NOT NULL AND status = 'sucesso'"
             + (f" AND subscriber_id NOT LIKE '{down_prefix}'" if down else ""))
    total = publications * per_endpoint * (endpoints - 1 if down else endpoints)
    try:
        wait_connected(pg, procs)
        conn = pg.connect(autocommit=False)
        QueueClient(conn, TABLE, SUB_TABLE).insert_tasks(
            [{"origem": "bench", "destino": "bench", "processo": PROCESSO,
              "chave_externa": str(i), "payload": {"pedido": i}} for i in range(publications)],
            pub_sub=True)
        t0 = time.perf_counter()
        conn.commit()
        conn.close()
        deadline = time.monotonic() + max(120.0, total / 5)
        done = 0
        while time.monotonic() < deadline:
            done = count(pg, where)
            if done >= total:
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
    finally:
        stop_workers(workers)
        for s in servers:
            s.shutdown()
            s.server_close()
    label = ("all endpoints up" if not down else
             f"one endpoint down, breaker {'on' if breaker else 'off'}")
    note = (f"{endpoints} endpoints x {per_endpoint} subscribers, {publications} publications, "
            f"{procs} workers; rate of the healthy endpoints' deliveries")
    if done < total:
        note += f"; INCOMPLETE: {done}/{total}"
    report(f"webhook deliveries/s, {label}", done / elapsed, "tasks/s", note=note)
    return done / elapsed


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=5)
    parser.add_argument("--per-endpoint", type=int, default=5)
    parser.add_argument("--publications", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.quick:
        args.publications = 5
    pg = acquire()
    results: Dict[str, Any] = {}
    try:
        for down, breaker in ((False, True), (True, True), (True, False)):
            results[f"down={down},breaker={breaker}"] = run(
                pg, args.endpoints, args.per_endpoint, args.publications, args.workers,
                down, breaker)
    finally:
        drop(pg)
        pg.release()
    if args.json:
        Path(args.json).write_text(json.dumps(RESULTS, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
