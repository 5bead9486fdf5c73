"""QUEUE_FAIR_TENANTS with real workers on PostgreSQL and MariaDB: among due tasks of equal
priority the claim rotates across tenants, so a tenant with 3 tasks is served long before
another tenant's backlog of 1,000 ends (plain and batch-mode workers)."""

from __future__ import annotations

import pytest

from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.process


@pytest.mark.parametrize("extra", [{}, {"QUEUE_BATCH_SIZE": "4"}], ids=["um", "lote"])
def test_a_small_tenant_is_served_before_a_large_backlog_ends(each_db_queue, extra):
    dbq = each_db_queue
    dbq.insert_many([{"return": "grande"}] * 1000, tenant=1)
    small = dbq.insert_many([{"return": "pequeno"}] * 3, tenant=2)
    dbq.start_ready_worker(QUEUE_FAIR_TENANTS="true", **extra)
    eventually(lambda: dbq.count("tenant = 2 AND status = 'sucesso'") == 3, 60,
               message="as 3 tarefas do tenant pequeno")
    served = dbq.count("tenant = 1 AND status = 'sucesso'")
    assert served < 100, served  # (FIFO would serve all 1,000 first)
    assert all(dbq.row(i)["status"] == "sucesso" for i in small)


def test_without_the_setting_the_claim_stays_in_order(each_db_queue):
    dbq = each_db_queue
    dbq.insert_many([{"return": "grande"}] * 30, tenant=1)
    dbq.insert_many([{"return": "pequeno"}] * 3, tenant=2)
    dbq.start_ready_worker()
    eventually(lambda: dbq.count("tenant = 2 AND status = 'sucesso'") == 3, 60,
               message="tudo executado")
    assert dbq.count("tenant = 1 AND status = 'sucesso'") == 30  # (FIFO: all of tenant 1 first)


def test_status_metrics_and_dashboard_count_the_tenants_with_due_tasks(each_db_queue):
    import json

    from nsj_queue_lib.dashboard.data import DashboardData
    from nsj_queue_lib.dashboard.pages import queue_page
    from nsj_queue_lib.observability.metrics import QueueGauges
    from tests.fixtures.processes import run_python

    dbq = each_db_queue
    dbq.insert_many([{}] * 3, tenant=1)
    dbq.insert_many([{}] * 2, tenant=2)
    dbq.insert_many([{}])  # (no tenant: one more)
    res = run_python(["-m", "nsj_queue_lib", "status"], env=dbq.env(), timeout=60)
    assert "Tenants com tarefas devidas: 3" in res.stdout, res.stdout + res.stderr
    res = run_python(["-m", "nsj_queue_lib", "status", "--json"], env=dbq.env(), timeout=60)
    assert json.loads(res.stdout)["ordenacao"]["tenants_devidos"] == 3
    gauges = QueueGauges(dbq.settings())
    try:
        families = {f[0]: f[3] for f in gauges.families({"queue": "q"})}
    finally:
        gauges.close_session()
    assert families["nsj_queue_due_tenants"] == [({"queue": "q"}, 3)]
    data = DashboardData(dbq.settings())
    try:
        summary = data.summary(dbq.table)
    finally:
        data.close()
    assert 'data-campo="tenants"' in queue_page(summary, [], None)
