"""Insert cost of unique tasks (#26): python bench/bench_unique.py [--tasks 2000] [--rounds 5].

On the PostgreSQL of DB_* and the MariaDB of NSJQ_TEST_MYSQL_*, in one run and alternating
rounds (the machine is shared): one committed insert_task per transaction
* "antes": the schema-6 table with ix_unique dropped (the insert path of schema 5),
* "sem chave": the schema-6 table, insert_task without unique_key (what users who do not
  use the feature pay),
* "com chave": insert_task(unique_key=...) with a new key each time,
* "chave repetida": insert_task(unique_key=...) with a key held by an unfinished task.
Prints the median microseconds per insert of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsj_queue_lib.db.dialect import MYSQL, POSTGRES  # noqa: E402
from nsj_queue_lib.db.schema import render_schema, split_statements  # noqa: E402
from nsj_queue_lib.queue_client import QueueClient  # noqa: E402


def _pg():
    import psycopg2

    return psycopg2.connect(host=os.environ.get("DB_HOST", "127.0.0.1"),
                            port=int(os.environ.get("DB_PORT", "5432")),
                            user=os.environ.get("DB_USER", "postgres"),
                            password=os.environ.get("DB_PASS", ""),
                            dbname=os.environ.get("DB_BASE", "postgres"))


def _my(database=None):
    import pymysql

    return pymysql.connect(host=os.environ.get("NSJQ_TEST_MYSQL_HOST", "127.0.0.1"),
                           port=int(os.environ.get("NSJQ_TEST_MYSQL_PORT", "3306")),
                           user=os.environ.get("NSJQ_TEST_MYSQL_USER", "root"),
                           password=os.environ.get("NSJQ_TEST_MYSQL_PASS", ""),
                           database=database, init_command="SET time_zone = '+00:00'")


def _setup(kind: str, schema: str, fila: str, drop_unique: bool):
    if kind == "postgres":
        conn = _pg()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE SCHEMA "{schema}"')
            cur.execute(render_schema(POSTGRES, f'"{schema}"', f'"{fila}"'))
            if drop_unique:
                cur.execute(f'DROP INDEX "{schema}"."ix_{fila}_unique"')
        conn.autocommit = False
        return conn, f"{schema}.{fila}"
    conn = _my()
    conn.autocommit(True)
    with conn.cursor() as cur:
        for stmt in split_statements(render_schema(MYSQL, schema, fila)):
            cur.execute(stmt)
        if drop_unique:
            cur.execute(f"ALTER TABLE `{schema}`.`{fila}` DROP INDEX `ix_{fila}_unique`, "
                        "DROP COLUMN chave_unica_ativa")
    conn.close()
    conn = _my(schema)
    conn.autocommit(False)
    return conn, f"{schema}.{fila}"


def _drop(kind: str, schema: str) -> None:
    conn = _pg() if kind == "postgres" else _my()
    if kind == "postgres":
        conn.autocommit = True
    else:
        conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute(f'DROP SCHEMA "{schema}" CASCADE' if kind == "postgres"
                    else f"DROP DATABASE `{schema}`")
    conn.close()


def _run(conn, table: str, n: int, key) -> float:
    client = QueueClient(conn, table)
    started = time.perf_counter()
    for i in range(n):
        client.insert_task("b", "b", "bench", None, {"i": i}, unique_key=key(i))
        conn.commit()
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for kind in ("postgres", "mariadb"):
        tag = uuid.uuid4().hex[:6]
        before = _setup(kind, f"nsjq_bu_a_{tag}", "fila", True)
        after = _setup(kind, f"nsjq_bu_b_{tag}", "fila", False)
        times = {"antes": [], "sem chave": [], "com chave": [], "chave repetida": []}
        try:
            for r in range(args.rounds):
                times["antes"].append(_run(*before, args.tasks, lambda i: None))
                times["sem chave"].append(_run(*after, args.tasks, lambda i: None))
                times["com chave"].append(_run(*after, args.tasks,
                                               lambda i, r=r: f"k{r}-{i}"))
                times["chave repetida"].append(_run(*after, args.tasks, lambda i: "fixa"))
            for name, values in times.items():
                print(f"{kind:<8} {name:<15} {statistics.median(values):8.1f} us/insert "
                      f"(rodadas: {', '.join(f'{v:.0f}' for v in values)})")
        finally:
            before[0].close()
            after[0].close()
            _drop(kind, f"nsjq_bu_a_{tag}")
            _drop(kind, f"nsjq_bu_b_{tag}")


if __name__ == "__main__":
    main()
