"""Contract, 1.2.2 mixed-fleet compatibility, where the backend offers it (capability
`legacy_fleet`: PostgreSQL coordinated by the database): real 1.2.2 workers beside 2.x
workers on one queue in mixed-fleet mode, a 2.x worker killed with SIGKILL mid-run; every
task's effect exactly once.  (The upgrade procedure itself, pub/sub, webhooks and batch
mode beside 1.2.2: tests/compat.)"""

from __future__ import annotations

from nsj_queue_lib.admin import QueueAdmin
from tests.compat.mixed import LEGACY_PLAIN, Fleet
from tests.fixtures.waiting import eventually

TOTAL = 300


def test_1_2_2_and_2x_workers_on_one_queue_run_every_task_once(each_backend_queue, legacy,
                                                               tmp_path):
    each_backend_queue.require("legacy_fleet")
    QueueAdmin(each_backend_queue.conn, each_backend_queue.table).compat_on(por="contrato")
    fleet = Fleet(legacy, each_backend_queue.server.env(), each_backend_queue.schema,
                  each_backend_queue.fila, tmp_path,
                  {"TEST_TASK_SLEEP": "0.02"})
    try:
        fleet.start_legacy(LEGACY_PLAIN, "v1")
        victim = fleet.start_v2("tests.compat.worker_v2", "v2")
        fleet.start_v2("tests.compat.worker_v2", "v2-b")
        keys = [f"k{i:04d}" for i in range(TOTAL)]
        each_backend_queue.insert_many(keys)
        eventually(lambda: each_backend_queue.count("status = 'sucesso'") > TOTAL // 4, 60,
                   interval=0.1,
                   message="um quarto feito")
        victim.kill9()
        fleet.start_v2("tests.compat.worker_v2", "v2-restart")  # rescues at start
        try:
            eventually(lambda: (each_backend_queue.count(
                "status IN ('pendente', 'agendada', 'processando')") == 0
                and len({e["chave"] for e in each_backend_queue.effects()}) == TOTAL),
                       120, interval=0.2, message="fila mista concluída")
        except AssertionError:
            print(fleet.logs())
            raise
        effects = each_backend_queue.effects()
        counts = {}
        for e in effects:
            counts[e["chave"]] = counts.get(e["chave"], 0) + 1
        assert counts == {k: 1 for k in keys}, fleet.logs()
        assert {e["tipo"] for e in effects} == {"v1", "v2"}  # both versions did work
        assert each_backend_queue.count("dead") == 0
        assert each_backend_queue.count("status = 'sucesso'") == TOTAL
    finally:
        fleet.stop()
