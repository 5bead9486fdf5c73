"""Concurrency limits (nsj-queue limit) with real workers on PostgreSQL and MariaDB: at most
N tasks of a limited processo 'processando' at once across the fleet (sampled by a poller
in the database), while another processo runs at full speed; batch mode and
QUEUE_CONCURRENCY workers in the same fleet; the CLI and QueueAdmin; client/server
workers refuse to claim while the queue has limits; mixed-fleet mode refuses limits."""

from __future__ import annotations

import json
import threading
import time

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.exceptions import ConfigError, FeatureUnavailable, NotFoundException
from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually, holds

pytestmark = pytest.mark.process


class Poller:
    """Samples, every few milliseconds, how many tasks of `processo` are 'processando'."""

    def __init__(self, q, processo: str) -> None:
        self.q, self.processo = q, processo
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
            sql = (f"SELECT count(*) AS n FROM {self.q.qtable} "
                   "WHERE status = 'processando' AND processo = %s")
            while not self._stop.is_set():
                with conn.cursor() as cur:
                    cur.execute(sql, (self.processo,))
                    row = cur.fetchone()
                self.samples.append(int(row[0] if isinstance(row, tuple) else row["n"]))
                time.sleep(0.01)
        finally:
            conn.close()

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


def _insert(q, processo, n, payload):
    conn = q.new_conn()
    try:
        ids = q.client(conn).insert_tasks([
            {"origem": "t", "destino": "t", "processo": processo, "payload": json.dumps(payload)}
            for _ in range(n)])
        conn.commit()
        return ids
    finally:
        conn.close()


def _cli(q, *argv):
    return run_python(["-m", "nsj_queue_lib", "limit", *argv], env=q.env(), timeout=60)


def test_limit_caps_running_tasks_of_a_processo_while_others_run(each_db_queue, tmp_path):
    dbq = each_db_queue
    admin = QueueAdmin(dbq.conn, dbq.table)
    assert admin.set_limit("lento", 2, por="teste") == {"processo": "lento", "maximo": 2,
                                                         "em_execucao": 0}
    # Six task threads: plain workers and one with two task threads (batch mode: below).
    for extra in ({}, {}, {}, {}, {"QUEUE_CONCURRENCY": "2"}):
        dbq.start_ready_worker(**extra)
    held = tmp_path / "segura"
    with Poller(dbq, "lento") as poller:
        # Four tasks of the limited processo that wait for a file: two run, two wait.
        lento = _insert(dbq, "lento", 4, {"wait_file": str(held)})
        # The other processo is not held back: all of it done meanwhile.
        rapido = _insert(dbq, "rapido", 40, {"sleep": 0.01})
        eventually(lambda: dbq.count("processo = 'rapido' AND status = 'sucesso'") == 40, 60,
                   message="processo sem limite executado")
        assert dbq.count("processo = 'lento' AND status = 'pendente'") >= 2
        held.touch()
        lento += _insert(dbq, "lento", 6, {"sleep": 0.3})
        eventually(lambda: dbq.count("processo = 'lento' AND status = 'sucesso'") == 10, 60,
                   message="processo limitado executado")
    assert len(rapido) == 40 and len(lento) == 10
    assert poller.samples and max(poller.samples) <= 2, max(poller.samples)
    assert 2 in poller.samples  # the limit is reached, not just respected
    _shown_in_status_metrics_and_dashboard(dbq)
    # The limit listed with what runs now; cleared, the workers go back to the usual claim.
    listed = admin.list_limits()
    assert [(r["processo"], r["maximo"], r["em_execucao"]) for r in listed] == [("lento", 2, 0)]
    admin.clear_limit("lento")
    assert admin.list_limits() == []
    # No limit any more: more than two at once (tasks that wait for a file; the batch
    # worker takes at most 3 of the 8, the others run visibly on the other workers).
    gate = tmp_path / "solta"
    _insert(dbq, "lento", 8, {"wait_file": str(gate)})
    eventually(lambda: dbq.count("processo = 'lento' AND status = 'processando'") > 2, 30,
               message="sem limite: mais de duas ao mesmo tempo")
    gate.touch()
    eventually(lambda: dbq.count("processo = 'lento' AND status = 'sucesso'") == 18, 30,
               message="sem limite")


def _shown_in_status_metrics_and_dashboard(q):
    res = run_python(["-m", "nsj_queue_lib", "status"], env=q.env(), timeout=60)
    assert "Limites de concorrência:    1" in res.stdout, res.stdout + res.stderr
    assert "lento: 0 de 2 em execução" in res.stdout
    res = run_python(["-m", "nsj_queue_lib", "status", "--json"], env=q.env(), timeout=60)
    assert json.loads(res.stdout)["limites"] == [
        {"processo": "lento", "maximo": 2, "em_execucao": 0}]
    from nsj_queue_lib.dashboard.data import DashboardData
    from nsj_queue_lib.dashboard.pages import queue_page
    from nsj_queue_lib.observability.metrics import QueueGauges

    gauges = QueueGauges(q.settings())
    try:
        families = {f[0]: f[3] for f in gauges.families({"queue": "q"})}
    finally:
        gauges.close_session()
    assert families["nsj_queue_limit"] == [({"queue": "q", "processo": "lento"}, 2)]
    assert families["nsj_queue_limit_running"] == [({"queue": "q", "processo": "lento"}, 0)]
    data = DashboardData(q.settings())
    try:
        summary = data.summary(q.table)
    finally:
        data.close()
    assert [(r["processo"], r["maximo"]) for r in summary["limites"]] == [("lento", 2)]
    assert 'data-limite="lento"' in queue_page(summary, [], None)


def test_batch_mode_takes_one_slot_per_task_and_frees_them_after_the_batch(each_db_queue):
    dbq = each_db_queue
    QueueAdmin(dbq.conn, dbq.table).set_limit("l", 1)
    dbq.start_ready_worker(QUEUE_BATCH_SIZE="4")
    dbq.start_ready_worker(QUEUE_BATCH_SIZE="4")
    _insert(dbq, "l", 4, {"sleep": 0.05})
    _insert(dbq, "r", 8, {"sleep": 0.01})
    # Each batch takes at most one 'l' (its only slot); the slots come back after each
    # batch, so every task runs.
    eventually(lambda: dbq.count("status = 'sucesso'") == 12, 60,
               message="lotes com limite executados")


def test_a_failing_limited_task_frees_its_slot_and_kill9_frees_it_too(each_db_queue, tmp_path):
    dbq = each_db_queue
    QueueAdmin(dbq.conn, dbq.table).set_limit("unico", 1)
    w1 = dbq.start_ready_worker()
    dbq.start_ready_worker()
    gate = tmp_path / "solta"
    started = tmp_path / "comecou"
    held = dbq.insert({"wait_file": str(gate), "started_file": str(started)}, processo="unico")
    eventually(lambda: started.exists(), 20, message="tarefa limitada em execução")
    runner = int(started.read_text())
    other = dbq.insert({"fail": True}, processo="unico")
    # The slot is taken: the second task of the processo waits.
    holds(lambda: dbq.row(other)["status"] == "pendente", 1.5, message="limite 1")
    victim = w1 if w1.pid == runner else dbq.workers[1]
    victim.kill9()  # its session ends: the slot is free, the failing task runs and retries
    eventually(lambda: dbq.count(f"coalesce(id_inicial, id) = {other} AND status = 'falha'")
               >= 2, 30, message="tarefa que falha, com novas tentativas")
    assert dbq.row(held)["status"] == "processando"  # (the rescue's, later)


def test_cli_set_list_clear_and_errors(each_db_queue):
    dbq = each_db_queue
    res = _cli(dbq, "set", "relatorios", "3")
    assert res.returncode == 0, res.stderr
    assert "Limite do processo relatorios: 3 tarefa(s)" in res.stdout
    res = _cli(dbq, "set", "relatorios", "5", "--json")
    assert json.loads(res.stdout) == {"processo": "relatorios", "maximo": 5, "em_execucao": 0}
    res = _cli(dbq, "list")
    assert res.returncode == 0 and "relatorios" in res.stdout and "5" in res.stdout
    rows = json.loads(_cli(dbq, "list", "--json").stdout)
    assert [(r["processo"], r["maximo"], r["alterado_por"] is not None) for r in rows] == [
        ("relatorios", 5, True)]
    res = _cli(dbq, "set", "relatorios", "0")
    assert res.returncode == 2 and "maior que zero" in res.stderr
    res = _cli(dbq, "clear", "relatorios")
    assert res.returncode == 0 and "removido" in res.stdout
    res = _cli(dbq, "clear", "relatorios")
    assert res.returncode == 1 and "não tem limite" in res.stderr
    admin = QueueAdmin(dbq.conn, dbq.table)
    with pytest.raises(ConfigError):
        admin.set_limit("x", 10001)
    with pytest.raises(ConfigError):
        admin.set_limit("", 1)
    with pytest.raises(NotFoundException):
        admin.clear_limit("nada")
    # The control row's flag follows the table (read by the workers with the pause flag).
    assert admin.pause_state().get("limites") in (None, False, 0)
    admin.set_limit("a", 1)
    assert bool(admin.pause_state()["limites"])
    admin.clear_limit("a")
    assert not admin.pause_state()["limites"]


def test_mixed_fleet_mode_refuses_limits(pg_queue):
    admin = QueueAdmin(pg_queue.conn, pg_queue.table)
    admin.compat_on(por="teste")
    with pytest.raises(FeatureUnavailable, match="modo misto"):
        admin.set_limit("p", 2)
    assert admin.list_limits() == []


def test_client_server_workers_claim_nothing_while_the_queue_has_limits(socket_queue):
    sq = socket_queue
    sq.start_server()
    QueueAdmin(sq.conn, sq.table).set_limit("p", 1)
    worker = sq.start_ready_worker()
    task = sq.insert({"return": "ok"}, processo="outro")
    eventually(lambda: "não aplica" in worker.log(), 20,
               message="recusa dos limites no log")
    holds(lambda: sq.row(task)["status"] == "pendente", 1.5, message="nada pego")
    QueueAdmin(sq.conn, sq.table).clear_limit("p")
    eventually(lambda: sq.row(task)["status"] == "sucesso", 20, message="sem limites")
