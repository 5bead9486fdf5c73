"""A subscriber table of 1.2.2's shape (QUEUE_SUBSCRIBER_TABLE, without the secret
columns): the webhook worker delivers unsigned as before, and the subscriber commands
work on it, refusing only what needs the new columns."""

from __future__ import annotations

import json

from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually

WEBHOOK = "nsj_queue_lib.worker_webhook"


def test_a_1_2_2_shaped_subscriber_table_keeps_working(pg_queue, http_endpoint):
    table = f"{pg_queue.quote(pg_queue.schema)}.assinantes_antigos"
    pg_queue.sql(f"CREATE TABLE {table} (id varchar(100) PRIMARY KEY, tenant int8, "
                 "grupo_empresarial varchar(40), processo varchar(250) NOT NULL, "
                 "url varchar(2048), http_method varchar(8), headers json, "
                 "ativo boolean NOT NULL DEFAULT true, created_at timestamptz DEFAULT now())")
    env = pg_queue.env(QUEUE_SUBSCRIBER_TABLE=f"{pg_queue.schema}.assinantes_antigos")

    def cli(*args):
        return run_python(["-m", "nsj_queue_lib", "subscriber", *args], env=env, timeout=60)

    added = cli("add", "velho", "--processo", "proc", "--url", http_endpoint.url + "/velho")
    assert added.returncode == 0, added.stderr
    refused = cli("add", "novo", "--processo", "proc", "--url", http_endpoint.url,
                  "--generate-secret")
    assert refused.returncode == 1 and "schema upgrade" in refused.stderr
    listed = json.loads(cli("list", "--json").stdout)
    assert [(r["id"], r["assinada"]) for r in listed] == [("velho", False)]

    pg_queue.start_worker(WEBHOOK, QUEUE_SUBSCRIBER_TABLE=f"{pg_queue.schema}.assinantes_antigos")
    pg_queue.publish({"antigo": True})
    eventually(lambda: http_endpoint.received("/velho"))
    [req] = http_endpoint.received("/velho")
    assert json.loads(req.body) == {"antigo": True}
    assert not any(h.startswith("webhook-") for h in req.headers)
