"""Scenario 7: pub/sub fan-out and webhooks under kill -9 of workers.

Each publication fans out (one statement, in the publication's transaction)
to two subscribers: "codigo", whose handler writes one effect through
bd_conn, and "hook", a webhook to a local endpoint that answers 500 to 25% of
the calls.  A random worker is killed every ~1.5 s and replaced at once.

Asserted: every publication and subscriber task done once (no lost, no
duplicated fan-out, one committed handler effect each), every successful
webhook task backed by a 2xx answer.  A webhook call is not transactional: a
worker killed after the endpoint answered 2xx but before its commit calls it
again (at least once), so 2xx repeats are counted ("redelivered") and bounded
by the number of kills, not required to be zero.
"""

from __future__ import annotations

import json

import pytest

from tests.chaos import report
from tests.chaos.harness import ChaosRun
from tests.fixtures.http import FlakyWebhook

TARGETS = [pytest.param("postgres", "db", id="postgres"),
           pytest.param("mariadb", "cs", id="mariadb-cs", marks=pytest.mark.mysql)]


@pytest.mark.parametrize("kind,mode", TARGETS)
def test_pubsub_and_webhook_under_kill9(make_queue, kind, mode):
    q = make_queue(kind, mode)
    hook = FlakyWebhook(failure_rate=0.25).start()
    try:
        sub_table = f"{q.quote(q.schema)}.{q.quote(q.fila + '_subscriber')}"
        for sub_id, url, method in (("codigo", None, None), ("hook", hook.url, "POST")):
            q.db.sql(f"INSERT INTO {sub_table} (id, processo, url, http_method, headers, ativo) "
                     "VALUES (%s, 'chaos', %s, %s, %s, TRUE)",
                     (sub_id, url, method, json.dumps({"X-Chaos": "1"})))
        if mode == "cs":
            q.start_server()
        run = ChaosRun(q, "7. pub/sub + webhook (25% HTTP 500) under kill -9 every ~1.5 s",
                       module="tests.workers.chaos_pubsub", pub_sub=True)
        run.deliveries = hook.delivered
        run.start_workers(3)
        run.start_producer(run.items(sleep=(0.02, 0.06), fail_fraction=0.0))
        for _ in run.faults(every=1.5):
            run.restart_worker(run.rng.choice(q.workers))
            run.healed()
        outcome = run.finish()
        run.assert_workers_alive()
        report.ROWS[-1]["notes"] += (f"; webhook calls={len(hook.answers)} "
                                     f"(500s={hook.failed()}); 2xx redelivered after a "
                                     f"kill={outcome.redelivered}")
        report.write()
        outcome.assert_clean()
        assert outcome.redelivered <= outcome.faults
        assert hook.failed() > 0
    finally:
        hook.close()
