"""Pub/sub benchmark: python bench/bench_pubsub.py [--quick].

1. Fan-out: one publication to 100 subscribers, run in-process as the worker
   does it (one INSERT ... SELECT in the publication's transaction + COMMIT);
   median time over several rounds and the subscriber tasks created per second.
2. Webhook delivery: publications fanned out to webhook subscribers that POST
   to a local HTTP server (127.0.0.1, random port), served by 4
   `python -m nsj_queue_lib.worker_webhook` processes; deliveries per second
   from the publications' commit until every subscriber task is `sucesso`.
   Baseline: the same number of POSTs from 4 processes with plain `requests`
   (the HTTP-only ceiling of this machine and server).

Uses the PostgreSQL of the DB_* variables (or an embedded one when none is
configured), in its own schema, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench import drop_schema, stop_workers  # noqa: E402
from bench.bench import wait_connected as _wait_connected  # noqa: E402
from nsj_queue_lib.cli.devdb import DevPostgres, acquire  # noqa: E402
from nsj_queue_lib.config import Settings  # noqa: E402
from nsj_queue_lib.db.dialect import POSTGRES  # noqa: E402
from nsj_queue_lib.db.repository import TaskRepository  # noqa: E402
from nsj_queue_lib.db.schema import render_schema  # noqa: E402
from nsj_queue_lib.db.session import DbSession, TaskConnection  # noqa: E402
from nsj_queue_lib.queue_client import QueueClient  # noqa: E402
from nsj_queue_lib.worker_webhook import WorkerWebhook  # noqa: E402

SCHEMA = "nsjq_bench_pubsub"
FILA = "fila_pubsub"
TABLE = f"{SCHEMA}.{FILA}"
SUB_TABLE = f"{SCHEMA}.{FILA}_subscriber"
RESULTS: List[Dict[str, Any]] = []


def report(name: str, value: float, unit: str, baseline: float = 0.0, note: str = "") -> None:
    ratio = f"{value / baseline:6.0%}" if baseline else "     -"
    base = f"{baseline:10.1f}" if baseline else " " * 10
    print(f"{name:<48} {value:10.1f} {unit:<8} baseline {base}  ratio {ratio}  {note}",
          flush=True)
    RESULTS.append({"name": name, "value": value, "unit": unit, "baseline": baseline or None})


# -- database ----------------------------------------------------------------
def reset(pg: DevPostgres) -> None:
    drop(pg)
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{SCHEMA}"')
        cur.execute(render_schema(POSTGRES, SCHEMA, FILA))
    conn.close()


def drop(pg: DevPostgres) -> None:
    drop_schema(pg, SCHEMA)


def add_subscribers(pg: DevPostgres, processo: str, n: int, url: str = "",
                    method: str = "POST") -> None:
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {SUB_TABLE} (id, processo, url, http_method, headers) "
            "VALUES (%s, %s, %s, %s, %s)",
            [(f"{processo}_{i:04d}", processo, f"{url}/{processo}/{i}" if url else None,
              method, json.dumps({"X-Bench": "1"})) for i in range(n)])
    conn.close()


def count(pg: DevPostgres, where: str) -> int:
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {TABLE} WHERE {where}")
        n = cur.fetchone()[0]
    conn.close()
    return int(n)


def worker_env(pg: DevPostgres) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(pg.env())
    env.update({"QUEUE_NAME": FILA, "QUEUE_TABLE": TABLE, "QUEUE_SUBSCRIBER_TABLE": SUB_TABLE,
                "LOG_DEBUG": "false", "PYTHONPATH": str(ROOT),
                "DEFAULT_WEBHOOK_TIMEOUT": "10"})
    return env


# -- local HTTP server ---------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    """Answers 200 after `delay` seconds; `answered` keeps when each answer went out and
    `peers` the client address of each connection (one per worker thread: keep-alive)."""

    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16
    # Without this the body, sent apart from the headers, waits for the client's delayed
    # ACK of the headers: 40 ms more per answer.
    disable_nagle_algorithm = True
    delay = 0.0
    answered: ClassVar[List[float]] = []  # each start_http() gets lists of its own
    peers: ClassVar[set] = set()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.delay:
            time.sleep(self.delay)
        self.answered.append(time.monotonic())
        self.peers.add(self.client_address)
        data = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_PUT = do_GET = do_DELETE = do_POST


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen() backlog, set in the constructor: must be a class attribute.  With the
    # default 5, 32 task threads connecting at once on a busy machine overflowed it, some
    # connections were reset, their deliveries failed and waited for the queue's retry:
    # two runs of the webhook line took 5 minutes (6.6/s).
    request_queue_size = 128


def start_http(delay: float = 0.0) -> ThreadingHTTPServer:
    """A local endpoint answering after `delay` s (its handler: server.RequestHandlerClass)."""
    handler = type("Endpoint", (_Handler,), {"delay": delay, "answered": [], "peers": set()})
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def http_url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


# -- 1. fan-out ------------------------------------------------------------------
def bench_fanout(pg: DevPostgres, subscribers: int, rounds: int) -> float:
    reset(pg)
    add_subscribers(pg, "fan", subscribers)
    settings = Settings.from_env(worker_env(pg), load_dotenv=False)
    worker = WorkerWebhook(settings)
    producer = pg.connect()
    client = QueueClient(producer, TABLE, SUB_TABLE)
    session = DbSession(pg.connect())
    repo = TaskRepository(session, TABLE, SUB_TABLE)
    times = []
    payload = {"pedido": 1, "itens": list(range(20)), "texto": "x" * 200}
    try:
        for _ in range(rounds + 1):  # the first round warms the plan cache
            pub_id = client.insert_task_pub_sub("bench", "bench", "fan", None, payload)
            tarefa = repo.task_get(pub_id)
            t0 = time.perf_counter()
            session.begin()
            message = worker.dispatch(tarefa, TaskConnection(session))
            session.commit()
            times.append(time.perf_counter() - t0)
            assert message.startswith(f"Publicado para {subscribers} "), message
    finally:
        session.close()
        producer.close()
    median = statistics.median(times[1:])
    report(f"fan-out 1 publication -> {subscribers} subscribers", median * 1000, "ms",
           note=f"median of {rounds}, statement + commit")
    report(f"fan-out {subscribers} subscribers", subscribers / median, "tasks/s")
    return subscribers / median


# -- 2. webhook delivery -----------------------------------------------------------
def _raw_poster(url: str, n: int, result: Any) -> None:
    import requests

    session = requests.Session()
    body = json.dumps({"pedido": 1}).encode()
    t0 = time.perf_counter()
    for i in range(n):
        r = session.post(f"{url}/raw/{i}", data=body,
                         headers={"Content-Type": "application/json", "X-Bench": "1"},
                         timeout=10)
        r.content  # noqa: B018 - read the body, as the worker does
    result.put(time.perf_counter() - t0)


def raw_http_rate(url: str, total: int, procs: int) -> float:
    result: Any = mp.Queue()
    per = total // procs
    workers = [mp.Process(target=_raw_poster, args=(url, per, result)) for _ in range(procs)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    return per * procs / elapsed


def wait_connected(pg: DevPostgres, procs: int, timeout: float = 30.0) -> None:
    _wait_connected(pg, procs, timeout, FILA)


def bench_webhook(pg: DevPostgres, publications: int, subscribers: int, procs: int) -> float:
    reset(pg)
    server = start_http()
    url = http_url(server)
    add_subscribers(pg, "wh", subscribers, url=url)
    total = publications * subscribers
    baseline = raw_http_rate(url, total, procs)
    workers = [subprocess.Popen([sys.executable, "-m", "nsj_queue_lib.worker_webhook"],
                                env=worker_env(pg), cwd=str(ROOT), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(procs)]
    try:
        wait_connected(pg, procs)
        conn = pg.connect(autocommit=False)
        client = QueueClient(conn, TABLE, SUB_TABLE)
        client.insert_tasks([{"origem": "bench", "destino": "bench", "processo": "wh",
                              "chave_externa": str(i), "payload": {"pedido": i}}
                             for i in range(publications)], pub_sub=True)
        t0 = time.perf_counter()
        conn.commit()
        conn.close()
        deadline = time.monotonic() + max(60.0, total / 20)
        done = 0
        while time.monotonic() < deadline:
            done = count(pg, "subscriber_id IS NOT NULL AND status = 'sucesso'")
            if done >= total:
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        failed = count(pg, "status <> 'sucesso'")
    finally:
        stop_workers(workers)
        server.shutdown()
        server.server_close()
    note = (f"{publications} publications x {subscribers} subscribers, {procs} workers; "
            f"baseline: plain requests, {procs} processes")
    if done < total or failed:
        note += f"; INCOMPLETE: {done}/{total} delivered, {failed} not 'sucesso'"
    report(f"webhook delivery ({procs} workers)", done / elapsed, "tasks/s", baseline, note)
    return done / elapsed


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=100, help="fan-out subscribers")
    parser.add_argument("--rounds", type=int, default=20, help="fan-out rounds")
    parser.add_argument("--publications", type=int, default=20, help="webhook publications")
    parser.add_argument("--webhook-subscribers", type=int, default=50,
                        help="webhook subscribers per publication")
    parser.add_argument("--workers", type=int, default=4, help="webhook worker processes")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.publications, args.webhook_subscribers = 5, 5, 20
    pg = acquire()
    try:
        bench_fanout(pg, args.subscribers, args.rounds)
        bench_webhook(pg, args.publications, args.webhook_subscribers, args.workers)
    finally:
        drop(pg)
        pg.release()
    if args.json:
        Path(args.json).write_text(json.dumps(RESULTS, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
