"""Circuit breaker per endpoint and delivery log, with real webhook workers and a real
local HTTP server (PostgreSQL and MariaDB native)."""

from __future__ import annotations

import json
import time

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.observability.metrics import QueueGauges, render
from nsj_queue_lib.observability.status import read_status, render_text
from tests.fixtures.http import RecordingServer
from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually

WEBHOOK = "nsj_queue_lib.worker_webhook"
BREAKER_ENV = {"WEBHOOK_BREAKER_FAILURES": "3", "WEBHOOK_BREAKER_COOLDOWN": "2",
               "QUEUE_MAX_RETRY": "5"}


def endpoint_state(queue):
    with QueueAdmin.from_settings(queue.settings()) as admin:
        return {r["endpoint"]: r for r in admin.webhook_endpoints()}


@pytest.mark.parametrize("batch", [None, "4"], ids=["por-tarefa", "lote"])
def test_breaker_opens_defers_without_spending_attempts_and_closes_after_recovery(
        each_db_queue, http_endpoint, batch):
    """Also in batch mode (QUEUE_BATCH_SIZE > 1): a deferral spends no attempt and the
    failed attempts reach the breaker and the delivery log (the batch's followups)."""
    queue = each_db_queue
    mode = {"QUEUE_BATCH_SIZE": batch} if batch else {}
    healthy = RecordingServer().start()  # another endpoint (another port)
    try:
        http_endpoint.script("/down", statuses=[503])
        queue.add_subscriber("down", url=http_endpoint.url + "/down", method="POST")
        queue.add_subscriber("up", url=healthy.url + "/up", method="POST")
        down_ep = f"http://127.0.0.1:{http_endpoint.httpd.server_address[1]}"
        worker = queue.start_worker(WEBHOOK, QUEUE_CONCURRENCY="2", **BREAKER_ENV, **mode)
        pubs = [queue.publish({"n": n}) for n in range(8)]

        # Open after 3 consecutive failures, then the probe fails too: pause doubled.
        eventually(lambda: endpoint_state(queue).get(down_ep, {}).get("pausa", 0) >= 4,
                   timeout=30, message="disjuntor aberto e sonda falhou")
        state = endpoint_state(queue)[down_ep]
        assert state["estado"] in ("aberto", "meio-aberto") and state["falhas"] >= 4
        assert len(http_endpoint.received("/down")) >= 4
        shown = read_status(queue.settings())
        [b] = [b for b in shown["disjuntores"]["endpoints"] if b["endpoint"] == down_ep]
        assert b["estado"] != "fechado" and shown["disjuntores"]["abertos"] == 1
        assert f"{down_ep} " in render_text(shown)
        gauges = QueueGauges(queue.settings(), interval=0)
        try:
            text = render(gauges.families({"fila": "f"}))
        finally:
            gauges.close_session()
        assert f'endpoint="{down_ep}"}} 1' in text
        assert 'nsj_queue_webhook_breakers_open{fila="f"} 1' in text

        # Meanwhile the healthy endpoint got every delivery.
        eventually(lambda: len(healthy.received("/up")) == 8, timeout=20)
        http_endpoint.script("/down", statuses=[200])
        recovered_at = time.monotonic()

        for pub in pubs:  # every delivery to the endpoint that was down arrives
            eventually(lambda pub=pub: any(
                r["status"] == "sucesso" for r in queue.rows(
                    "publication_id = %s AND subscriber_id = 'down'", (pub,))), timeout=40)
        queue.wait_idle()
        assert all(r.at < recovered_at for r in healthy.received("/up"))
        rows = queue.rows("subscriber_id = 'down'")
        assert not [r for r in rows if r["dead"]]  # no dead letter: attempts not spent
        failed = [r for r in rows if r["status"] == "falha"]
        # Only real calls cost attempts: every failed attempt is one 503 answer (the 8
        # other calls are the successes).  Their number is bounded by what the breaker
        # lets through: the calls before it opened (the 3rd failure, plus one per other
        # task already past the check: 2 threads, each with a batch under way) and one per
        # failed probe (each logged; how many fail depends on when the endpoint recovered).
        failing_calls = len(http_endpoint.received("/down")) - 8
        probes_failed = worker.log().count("a sonda falhou")
        in_flight = 2 * int(batch or 1) - 1
        assert probes_failed >= 1
        assert len(failed) == failing_calls <= 3 + in_flight + probes_failed
        assert max(r["tentativa"] for r in rows) < 5  # (QUEUE_MAX_RETRY: none spent out)
        assert endpoint_state(queue)[down_ep]["estado"] == "fechado"
        assert "adiada" in worker.log() and "disjuntor" in worker.log()

        # Delivery log: one row per HTTP attempt, with status, duration and answer.
        with QueueAdmin.from_settings(queue.settings()) as admin:
            log = admin.subscriber_deliveries("down", limit=100)
            up_log = admin.subscriber_deliveries("up", limit=100)
        assert len(log) == failing_calls + 8 and len(up_log) == 8
        assert sorted({(r["status_http"], r["sucesso"]) for r in log}) == [
            (200, True), (503, False)]
        assert all(r["duracao_ms"] is not None for r in log)
        assert {r["resposta"] for r in log} == {"resposta 503 de /down",
                                               "resposta 200 de /down"}
    finally:
        healthy.close()


def test_delivery_log_bounds_the_answer_and_redelivery_keeps_the_webhook_id(pg_queue,
                                                                            http_endpoint):
    long_answer = "<b>x</b>\n" * 200
    http_endpoint.script("/log", statuses=[201], body=long_answer)
    with QueueAdmin.from_settings(pg_queue.settings()) as admin:
        secret = admin.subscriber_add("logado", "proc", http_endpoint.url + "/log",
                                      generate_secret=True)
    pg_queue.start_worker(WEBHOOK)
    pub = pg_queue.publish({"a": 1})
    eventually(lambda: http_endpoint.received("/log"))
    pg_queue.wait_idle()
    env = pg_queue.env()
    listed = run_python(["-m", "nsj_queue_lib", "subscriber", "deliveries", "logado",
                         "--json"], env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["status_http"] == 201 and row["sucesso"] is True
    assert len(row["resposta"]) <= 512 and "\n" not in row["resposta"]
    text = run_python(["-m", "nsj_queue_lib", "subscriber", "deliveries", "logado"],
                      env=env, timeout=60)
    assert f"{row['id']:>8}" in text.stdout and "201" in text.stdout
    again_cli = run_python(["-m", "nsj_queue_lib", "subscriber", "redeliver", str(row["id"]),
                            "--json"], env=env, timeout=60)
    assert again_cli.returncode == 0, again_cli.stderr
    new_id = json.loads(again_cli.stdout)["id"]
    eventually(lambda: len(http_endpoint.received("/log")) == 2)
    pg_queue.wait_idle()
    first, again = http_endpoint.received("/log")
    assert first.headers["webhook-id"] == again.headers["webhook-id"]
    from standardwebhooks.webhooks import Webhook

    assert Webhook(secret).verify(again.body, again.headers) == {"a": 1}
    assert pg_queue.row(new_id)["status"] == "sucesso"
    assert pg_queue.row(new_id)["publication_id"] == pub


def test_endpoint_listing_is_bounded_with_the_open_ones_first(each_db_queue):
    from nsj_queue_lib.dashboard.webhooks_page import webhooks_page
    from nsj_queue_lib.pubsub.breaker import ENDPOINTS_LISTED

    queue = each_db_queue
    table = f"{queue.quote(queue.schema)}.{queue.quote(queue.fila + '_endpoints')}"
    values = ", ".join(f"('http://h{n:03d}.exemplo:80', 1)" for n in range(ENDPOINTS_LISTED + 5))
    queue.sql(f"INSERT INTO {table} (endpoint, falhas) VALUES {values}")
    later = ("UTC_TIMESTAMP(6) + INTERVAL 1 HOUR" if queue.is_mysql
             else "now() + interval '1 hour'")
    queue.sql(f"UPDATE {table} SET falhas = 3, pausa = 30, aberto_ate = {later} "
              "WHERE endpoint = 'http://h204.exemplo:80'")
    with QueueAdmin.from_settings(queue.settings()) as admin:
        listed = admin.webhook_endpoints()
        assert len(admin.webhook_endpoints(limit=3)) == 3
    assert len(listed) == ENDPOINTS_LISTED
    assert listed[0]["endpoint"] == "http://h204.exemplo:80" and listed[0]["estado"] == "aberto"
    page = webhooks_page(queue.table, {"assinaturas": [], "entregas": {},
                                       "disjuntores": listed}, None)
    assert f"Só os primeiros {ENDPOINTS_LISTED} endpoints" in page
