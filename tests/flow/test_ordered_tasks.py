"""Ordered execution (insert_task(ordering_key=...)) with real workers on PostgreSQL and
MariaDB: tasks of one key run one at a time in insertion order (sampled by a poller in the
database), a failing task's retries keep its place, a dead letter releases the key, and
different keys run in parallel; plain, batch-mode and QUEUE_CONCURRENCY workers together."""

from __future__ import annotations

import json
import threading
import time

import pytest

from nsj_queue_lib.exceptions import FeatureUnavailable
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.process


class Poller:
    """Samples, every few milliseconds, the ordering keys of the 'processando' tasks."""

    def __init__(self, q) -> None:
        self.q = q
        self.samples: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = self.q.new_conn()
        try:
            if hasattr(conn, "autocommit") and not callable(conn.autocommit):
                conn.autocommit = True
            else:
                conn.autocommit(True)
            sql = (f"SELECT chave_ordem FROM {self.q.qtable} "
                   "WHERE status = 'processando' AND chave_ordem IS NOT NULL")
            while not self._stop.is_set():
                with conn.cursor() as cur:
                    cur.execute(sql)
                    rows = cur.fetchall()
                self.samples.append([r[0] if isinstance(r, tuple) else r["chave_ordem"]
                                     for r in rows])
                time.sleep(0.01)
        finally:
            conn.close()

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


def _insert(q, tasks):
    conn = q.new_conn()
    try:
        ids = q.client(conn).insert_tasks([
            {"origem": "t", "destino": "t", "processo": "teste", "ordering_key": key,
             "payload": json.dumps(payload)} for key, payload in tasks])
        conn.commit()
        return ids
    finally:
        conn.close()


def test_one_key_runs_in_insertion_order_with_retries_and_keys_run_in_parallel(each_db_queue):
    dbq = each_db_queue
    for extra in ({}, {}, {"QUEUE_BATCH_SIZE": "3"}, {"QUEUE_CONCURRENCY": "2"}):
        dbq.start_ready_worker(**extra)
    tasks = []
    for i in range(6):
        # the second task of each key fails twice (its retries must keep its place)
        tasks.append(("k1", {"efeito": f"k1-{i}", "sleep": 0.1,
                             **({"fail_until": 3} if i == 1 else {})}))
        tasks.append(("k2", {"efeito": f"k2-{i}", "sleep": 0.1,
                             **({"fail_until": 3} if i == 1 else {})}))
    with Poller(dbq) as poller:
        ids = _insert(dbq, tasks)
        eventually(lambda: len(dbq.effects("tipo = 'execute'")) == 12, 90,
                   message="tarefas ordenadas executadas")
    assert len(ids) == 12
    for key in ("k1", "k2"):
        done = [e["chave"] for e in dbq.effects("tipo = 'execute'")
                if e["chave"].startswith(key)]
        assert done == [f"{key}-{i}" for i in range(6)], done
    # never two tasks of one key at once; the two keys at once at some point
    assert all(s.count("k1") <= 1 and s.count("k2") <= 1 for s in poller.samples)
    assert any(set(s) == {"k1", "k2"} for s in poller.samples)
    # the failing task ran three attempts, the retries carrying the key
    second = ids[2]
    chain = dbq.chain(second)
    assert [a["status"] for a in chain] == ["falha", "falha", "sucesso"]
    assert {a["chave_ordem"] for a in chain} == {"k1"}


def test_a_dead_letter_releases_the_key(each_db_queue):
    dbq = each_db_queue
    dbq.start_ready_worker()
    first, second = _insert(dbq, [("k", {"fail": True}), ("k", {"efeito": "depois"})])
    eventually(lambda: dbq.effects("chave = 'depois'"), 60,
               message="a tarefa seguinte roda depois da fila de mortos")
    chain = dbq.chain(first)
    assert [a["status"] for a in chain] == ["falha"] * 3  # QUEUE_MAX_RETRY=3, then dead
    dead = dbq.rows("dead AND live_id = %s", (first,))
    assert dead and dead[0]["chave_ordem"] is None
    assert dbq.row(second)["status"] == "sucesso"
    done_at = dbq.effects("chave = 'depois'")[0]["criado"]
    assert all(a["data_hora"] <= done_at.replace(tzinfo=a["data_hora"].tzinfo)
               for a in chain)


def test_ordering_key_is_checked_and_refused_in_mixed_fleet_mode(pg_queue):
    from nsj_queue_lib.admin import QueueAdmin

    client = pg_queue.client()
    with pytest.raises(ValueError):
        client.insert_task("t", "t", "t", None, "{}", ordering_key="")
    with pytest.raises(ValueError):
        client.insert_task("t", "t", "t", None, "{}", ordering_key="x" * 251)
    with pytest.raises(ValueError, match="juntos"):
        client.insert_task("t", "t", "t", None, "{}", ordering_key="a", unique_key="b")
    QueueAdmin(pg_queue.conn, pg_queue.table).compat_on(por="teste")
    with pytest.raises(FeatureUnavailable, match="modo misto"):
        pg_queue.client().insert_task("t", "t", "t", None, "{}", ordering_key="a")


def test_status_metrics_and_dashboard_show_the_ordering_keys(each_db_queue):
    from nsj_queue_lib.dashboard.data import DashboardData
    from nsj_queue_lib.dashboard.pages import queue_page
    from nsj_queue_lib.observability.metrics import QueueGauges
    from tests.fixtures.processes import run_python

    dbq = each_db_queue
    _insert(dbq, [("a", {}), ("a", {}), ("b", {})])
    res = run_python(["-m", "nsj_queue_lib", "status"], env=dbq.env(), timeout=60)
    assert ("Execução ordenada:          2 chave(s), 3 tarefa(s) esperando ou em execução"
            in res.stdout), res.stdout + res.stderr
    res = run_python(["-m", "nsj_queue_lib", "status", "--json"], env=dbq.env(), timeout=60)
    shown = json.loads(res.stdout)["ordenacao"]
    assert (shown["chaves"], shown["tarefas"]) == (2, 3)
    # (due 3 s after the queue's first ordered insert: none or the one tenant, by then)
    assert shown["tenants_devidos"] in (0, 1)
    gauges = QueueGauges(dbq.settings())
    try:
        families = {f[0]: f[3] for f in gauges.families({"queue": "q"})}
    finally:
        gauges.close_session()
    assert families["nsj_queue_ordering_keys"] == [({"queue": "q"}, 2)]
    data = DashboardData(dbq.settings())
    try:
        summary = data.summary(dbq.table)
    finally:
        data.close()
    assert summary["ordenacao"]["chaves"] == 2 and summary["ordenacao"]["tarefas"] == 3
    assert 'data-campo="ordenacao"' in queue_page(summary, [], None)
