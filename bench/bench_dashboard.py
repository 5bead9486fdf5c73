"""Dashboard and metrics on a 1,000,000-row queue: python bench/bench_dashboard.py [--manter].

Creates the schema `bench_painel` on the PostgreSQL of DB_* with one queue of 1,000,000
rows (900,000 old successes over 30 days, 22,000 attempts in the last hour, 50,000 waiting
of which ~30,000 due, 5,000 scheduled, 20 running, 1,000 dead-letter chains, old failures),
then times, server side, each dashboard page (10 requests, median and max) and one uncached
read of the /metrics queue gauges.  The schema is dropped at the end unless --manter.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nsj_queue_lib.config import Settings
from nsj_queue_lib.dashboard.server import DashboardServer
from nsj_queue_lib.db.dialect import POSTGRES
from nsj_queue_lib.db.schema import render_schema
from nsj_queue_lib.db.session import connect
from nsj_queue_lib.observability.metrics import QueueGauges

SCHEMA, FILA = "bench_painel", "grande"
T = f"{SCHEMA}.{FILA}"
LOAD = f"""
ALTER TABLE {T} DISABLE TRIGGER USER;
INSERT INTO {T} (data_hora_inicial, data_hora, processo, status, mensagem)
SELECT now() - (i % 2592000) * interval '1 second' - interval '1 hour',
       now() - (i % 2592000) * interval '1 second' - interval '1 hour', 'faturar', 'sucesso', 'ok'
  FROM generate_series(1, 900000) i;
INSERT INTO {T} (data_hora_inicial, data_hora, processo, status, mensagem)
SELECT now() - (i % 3600) * interval '1 second', now() - (i % 3600) * interval '1 second',
       'faturar', CASE WHEN i % 10 = 0 THEN 'falha' ELSE 'sucesso' END, 'x'
  FROM generate_series(1, 22000) i;
INSERT INTO {T} (data_hora, processo, status)
SELECT now() + CASE WHEN i <= 30000 THEN -1 ELSE 1 END * (i % 600) * interval '1 second',
       'faturar', 'pendente'
  FROM generate_series(1, 50000) i;
INSERT INTO {T} (data_hora, processo, status)
SELECT now() + (i % 600) * interval '1 second', 'faturar', 'agendada'
  FROM generate_series(1, 5000) i;
INSERT INTO {T} (processo, status) SELECT 'faturar', 'processando' FROM generate_series(1, 20);
INSERT INTO {T} (processo, status, mensagem, estouro_tentativas)
SELECT 'faturar', 'falha', 'Erro: sem estoque. Máximo de tentativas atingido.', true
  FROM generate_series(1, 1000);
INSERT INTO {T} (processo, status, mensagem, dead, live_id)
SELECT 'faturar', 'falha', 'falha também na fila de mortos', true, id
  FROM {T} WHERE estouro_tentativas;
INSERT INTO {T} (data_hora, processo, status, mensagem)
SELECT now() - interval '2 days', 'faturar', 'falha', 'antiga'
  FROM generate_series(1, 1000000 - (SELECT count(*) FROM {T})) i;
ALTER TABLE {T} ENABLE TRIGGER USER;
"""


def _times(url: str, n: int = 10) -> tuple:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as resp:
            resp.read()
        out.append(time.perf_counter() - started)
    return statistics.median(out), max(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manter", action="store_true", help="não apaga o schema no fim")
    args = parser.parse_args()
    settings = Settings.from_env(require=("db",)).replace(queue_name=FILA, queue_table=T)
    conn = connect(settings, application_name="nsj_queue_lib:bench_dashboard")
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
    cur.execute(f'CREATE SCHEMA "{SCHEMA}"')
    cur.execute(render_schema(POSTGRES, SCHEMA, FILA))
    started = time.perf_counter()
    cur.execute(LOAD)
    cur.execute(f"VACUUM ANALYZE {T}")
    cur.execute(f"SELECT count(*), max(id) FILTER (WHERE dead) FROM {T}")
    rows, dead = cur.fetchone()
    print(f"{rows} linhas carregadas em {time.perf_counter() - started:.1f} s")
    server = DashboardServer(settings, port=0)
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        for path in ("/", f"/fila?f={T}", f"/cadeia?f={T}&id={dead}"):
            median, worst = _times(base + path)
            print(f"{path:40s} mediana {median * 1000:7.1f} ms   máx. {worst * 1000:7.1f} ms")
        gauges = QueueGauges(settings, interval=0)
        gauges.read()
        reads = []
        for _ in range(10):
            t0 = time.perf_counter()
            gauges.read()
            reads.append(time.perf_counter() - t0)
        gauges.close_session()
        print(f"{'/metrics: leitura das medidas da fila':40s} mediana "
              f"{statistics.median(reads) * 1000:7.1f} ms   máx. {max(reads) * 1000:7.1f} ms")
    finally:
        server.stop()
        if not args.manter:
            cur.execute(f'DROP SCHEMA "{SCHEMA}" CASCADE')
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
