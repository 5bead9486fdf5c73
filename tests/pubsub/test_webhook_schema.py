"""Schema 5 (webhook secrets, breaker and delivery-log tables) reached by `nsj-queue schema
upgrade` from a version-4 queue, on PostgreSQL and MariaDB; before the upgrade the webhook
worker keeps the old behaviour (unsigned, no breaker, no log) and says why."""

from __future__ import annotations

from nsj_queue_lib.db import schema
from tests.fixtures.processes import run_python
from tests.fixtures.waiting import eventually

WEBHOOK = "nsj_queue_lib.worker_webhook"


def make_version_4(queue) -> None:
    """What a version-4 queue lacks: the two tables and the three subscriber columns."""
    q = queue.quote
    for suffix in ("endpoints", "entregas"):
        queue.sql(f"DROP TABLE {q(queue.schema)}.{q(queue.fila + '_' + suffix)}")
    cols = ("segredo", "segredo_anterior", "segredo_anterior_expira")
    queue.sql(f"ALTER TABLE {queue.qsub_table} " + ", ".join(f"DROP COLUMN {c}" for c in cols))
    stamp = "nsj_queue_lib schema 4 (000000000000)"
    if queue.is_mysql:
        queue.sql(f"ALTER TABLE {queue.qtable} COMMENT = '{stamp}'")
    else:
        queue.sql(f"COMMENT ON TABLE {queue.qtable} IS '{stamp}'")


def test_version_4_queue_delivers_unsigned_then_upgrades_and_signs(each_db_queue, http_endpoint):
    queue = each_db_queue
    make_version_4(queue)
    queue.add_subscriber("antigo", url=http_endpoint.url + "/v4", method="POST")
    worker = queue.start_worker(WEBHOOK)
    queue.publish({"v": 4})
    eventually(lambda: http_endpoint.received("/v4"))
    queue.wait_idle()
    [req] = http_endpoint.received("/v4")
    assert not any(h.startswith("webhook-") for h in req.headers)
    assert "schema upgrade" in worker.log()
    worker.stop()

    env = queue.env()
    args = ["-m", "nsj_queue_lib", "schema", "upgrade", queue.schema, queue.fila]
    if queue.is_mysql:
        args.append("--mysql")
    res = run_python(args, env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "entregas" in res.stdout and "segredo" in res.stdout
    again = run_python(args, env=env, timeout=120)
    assert "nada a fazer" in again.stdout, again.stdout + again.stderr
    res = run_python(["-m", "nsj_queue_lib", "schema", "verify", queue.schema, queue.fila]
                     + (["--mysql"] if queue.is_mysql else []), env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert schema.SCHEMA_VERSION >= 5  # the upgrade brought it to the current version

    rot = run_python(["-m", "nsj_queue_lib", "subscriber", "rotate-secret", "antigo"],
                     env=env, timeout=60)
    assert rot.returncode == 0, rot.stderr
    secret = rot.stdout.split(": ", 1)[1].split()[0]
    queue.start_worker(WEBHOOK)
    queue.publish({"v": 5})
    eventually(lambda: len(http_endpoint.received("/v4")) == 2)
    from standardwebhooks.webhooks import Webhook

    assert Webhook(secret).verify(http_endpoint.received("/v4")[1].body,
                                  http_endpoint.received("/v4")[1].headers) == {"v": 5}
