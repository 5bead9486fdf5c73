"""Per-task cost of concurrency limits (#26 item 4): python bench/bench_limits.py
[--tasks 2000] [--rounds 3] [--main /work/main].

On the PostgreSQL of DB_* and the MariaDB of NSJQ_TEST_MYSQL_*: one worker
(bench/worker_noop.py, statements counted by bench/counting.py) drains N due tasks of
processo "p" from a fresh schema-8 queue, in rounds alternating between
* "sem limites": the queue has no limits (what every queue not using the feature pays),
* "limite noutro processo": a limit exists for another processo (the limit-aware claim
  runs, the tasks' processo has no limit),
* "limite 4 em p": processo p limited to 4 (each task takes and frees a slot),
* "ordenação, chave por tarefa": ordering keys in use (the order-aware claim), each task
  with a key of its own (nothing waits for another task),
* "QUEUE_FAIR_TENANTS": the worker with the setting (all tasks of one tenant),
* with --main DIR, "main, sem limites": the same no-limits run with the worker's code
  from DIR (the branch point), for the statement counts and rate before the feature.
Prints, per mode, the median tasks/s and the statements and round trips per task
(counted from the 50th task to the last).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsj_queue_lib.db.dialect import MYSQL, POSTGRES  # noqa: E402
from nsj_queue_lib.db.schema import render_schema, split_statements  # noqa: E402

WARM = 50  # tasks before the mark (start-up left out)


def _pg(dbname: str = "") -> Any:
    import psycopg2

    conn = psycopg2.connect(host=os.environ.get("DB_HOST", "127.0.0.1"),
                            port=int(os.environ.get("DB_PORT", "5432")),
                            user=os.environ.get("DB_USER", "postgres"),
                            password=os.environ.get("DB_PASS", ""),
                            dbname=dbname or os.environ.get("DB_BASE", "postgres"))
    conn.autocommit = True
    return conn


def _my(database: Optional[str] = None) -> Any:
    import pymysql

    return pymysql.connect(host=os.environ.get("NSJQ_TEST_MYSQL_HOST", "127.0.0.1"),
                           port=int(os.environ.get("NSJQ_TEST_MYSQL_PORT", "3306")),
                           user=os.environ.get("NSJQ_TEST_MYSQL_USER", "root"),
                           password=os.environ.get("NSJQ_TEST_MYSQL_PASS", ""),
                           database=database, autocommit=True,
                           init_command="SET time_zone = '+00:00'")


def _setup(db: str, schema: str, tasks: int, limit: Optional[Tuple[str, int]],
           ordered: bool = False) -> Any:
    if db == "pg":
        conn = _pg()
        ddl = render_schema(POSTGRES, schema, "fila")
        with conn.cursor() as cur:
            cur.execute(f'CREATE SCHEMA "{schema}"')
            cur.execute(ddl)
            cur.execute(f'CREATE TABLE "{schema}".efeitos (tarefa_id bigint, t_inicio float8)')
            if limit:
                cur.execute(f'INSERT INTO "{schema}".fila_limites (processo, maximo) '
                            "VALUES (%s, %s)", limit)
                cur.execute(f'UPDATE "{schema}".fila_controle SET limites = true WHERE id = 1')
            if ordered:
                cur.execute(f'UPDATE "{schema}".fila_controle SET ordenacao_desde = now() '
                            "WHERE id = 1")
            cur.execute(f'INSERT INTO "{schema}".fila (origem, destino, processo, payload, '
                        "tentativa, status, data_hora, data_hora_inicial, chave_ordem) "
                        "SELECT 'b', 'b', 'p', '{}', 1, 'pendente', now(), now(), "
                        "CASE WHEN %s THEN 'k' || g END FROM generate_series(1, %s) g",
                        (ordered, tasks))
        return conn
    conn = _my()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
    conn.close()
    conn = _my(schema)
    with conn.cursor() as cur:
        for stmt in split_statements(render_schema(MYSQL, schema, "fila")):
            cur.execute(stmt)
        cur.execute(f"CREATE TABLE `{schema}`.efeitos (tarefa_id BIGINT, t_inicio DOUBLE)")
        if limit:
            cur.execute(f"INSERT INTO `{schema}`.fila_limites (processo, maximo) "
                        "VALUES (%s, %s)", limit)
            cur.execute(f"INSERT INTO `{schema}`.fila_controle (id, pausada, motivo) "
                        "VALUES (4, TRUE, 'limites')")
        if ordered:
            cur.execute(f"INSERT INTO `{schema}`.fila_controle (id, pausada, motivo) "
                        "VALUES (5, TRUE, 'ordem')")
        for start in range(0, tasks, 500):
            rows = min(500, tasks - start)
            cur.execute(f"INSERT INTO `{schema}`.fila (origem, destino, processo, payload, "
                        "tentativa, status, data_hora, data_hora_inicial, chave_ordem) VALUES "
                        + ", ".join(_my_row(start + i, ordered) for i in range(rows)))
    return conn


def _my_row(n: int, ordered: bool) -> str:
    key = f"'k{n}'" if ordered else "NULL"
    return ("('b', 'b', 'p', '{}', 1, 'pendente', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), "
            f"{key})")


def _done(conn: Any, db: str, schema: str) -> int:
    q = '"' if db == "pg" else "`"
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {q}{schema}{q}.efeitos")
        return int(cur.fetchone()[0])


def _drop(conn: Any, db: str, schema: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f'DROP SCHEMA "{schema}" CASCADE' if db == "pg"
                    else f"DROP DATABASE `{schema}`")
    conn.close()


def run(db: str, tasks: int, limit: Optional[Tuple[str, int]],
        code: Path, ordered: bool = False, fair: bool = False) -> Dict[str, float]:
    schema = f"bl_{uuid.uuid4().hex[:8]}"
    conn = _setup(db, schema, tasks, limit, ordered)
    directory = tempfile.mkdtemp(prefix="nsjq-limits-")
    env = dict(os.environ, QUEUE_NAME=f"bl_{schema}", QUEUE_TABLE=f"{schema}.fila",
               LOG_DEBUG="false", PYTHONPATH=str(code), NSJQ_BENCH_COUNT_DIR=directory,
               QUEUE_FAIR_TENANTS="true" if fair else "false")
    if db == "my":
        env.update(DB_HOST=os.environ.get("NSJQ_TEST_MYSQL_HOST", "127.0.0.1"),
                   DB_PORT=os.environ.get("NSJQ_TEST_MYSQL_PORT", "3306"),
                   DB_USER=os.environ.get("NSJQ_TEST_MYSQL_USER", "root"),
                   DB_PASS=os.environ.get("NSJQ_TEST_MYSQL_PASS", ""), DB_BASE=schema,
                   DB_DRIVER="MYSQL")
    worker = subprocess.Popen([sys.executable, str(code / "bench" / "worker_noop.py")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while _done(conn, db, schema) < WARM:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"worker parado ({db}, {limit})")
            time.sleep(0.01)
        Path(directory, "mark").touch()
        time.sleep(0.05)  # (the counter sees the mark within 20 ms)
        start, first = time.monotonic(), _done(conn, db, schema)
        while _done(conn, db, schema) < tasks:
            if time.monotonic() > deadline + 600:
                raise RuntimeError("tarefas não terminaram")
            time.sleep(0.01)
        took = time.monotonic() - start
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    [counts] = [json.loads(p.read_text()) for p in Path(directory).glob("counts-*.json")]
    n = tasks - first
    mark = counts["at_mark"]
    _drop(conn, db, schema)
    return {"rate": n / took,
            "statements": (counts["statements"] - mark["statements"]) / n,
            "round_trips": (counts["round_trips"] - mark["round_trips"]) / n}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--main", type=Path, help="a checkout of the code before the feature")
    args = parser.parse_args()
    modes = [("sem limites", None, ROOT, False),
             ("limite noutro processo", ("outro", 1), ROOT, False),
             ("limite 4 em p", ("p", 4), ROOT, False),
             ("ordenação, chave por tarefa", None, ROOT, True),
             ("QUEUE_FAIR_TENANTS", None, ROOT, None)]
    if args.main:
        modes.insert(0, ("main, sem limites", None, args.main.resolve(), False))
    for db in ("pg", "my"):
        got: Dict[str, list] = {name: [] for name, _, _, _ in modes}
        for _ in range(args.rounds):
            for name, limit, code, ordered in modes:
                got[name].append(run(db, args.tasks, limit, code, bool(ordered),
                                     fair=ordered is None))
        print(f"\n{'PostgreSQL' if db == 'pg' else 'MariaDB'} ({args.tasks} tarefas, "
              f"{args.rounds} rodadas, 1 worker)")
        for name, results in got.items():
            print(f"  {name:<24} {statistics.median(r['rate'] for r in results):7.0f} "
                  f"tarefas/s  {statistics.median(r['statements'] for r in results):5.2f} "
                  f"comandos/tarefa  {statistics.median(r['round_trips'] for r in results):5.2f}"
                  " idas e voltas/tarefa")


if __name__ == "__main__":
    main()
