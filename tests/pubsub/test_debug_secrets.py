"""LOG_DEBUG=true never leaks a secret of a URL: a real webhook worker process, a real
local HTTP server for the webhooks and a real local Loki stand-in.

Secrets sit where real deployments put them: webhook URLs with `?api_key=...` (200, 500
and connection refused), GRAFANA_URL with user:password and a query string.  None may
reach the worker's stdout/stderr, a Loki line or a queue row; the Loki push itself
keeps its query string and sends the credentials as basic auth.
"""

from __future__ import annotations

import base64
import json

import pytest

from tests.fixtures.waiting import eventually
from tests.ops.lokiserver import FakeLoki

WEBHOOK = "nsj_queue_lib.worker_webhook"
HOOK_KEYS = ("api-key-ok-5a1e", "api-key-500-77c2", "api-key-recusa-90d3")
LOKI_PASSWORD = "loki-senha-31f0"
LOKI_QUERY = "loki-org-query-c4b2"
SECRETS = (*HOOK_KEYS, LOKI_PASSWORD, LOKI_QUERY)


@pytest.fixture
def loki():
    server = FakeLoki()
    yield server
    server.close()


@pytest.mark.parametrize("dependencies", [False, True], ids=["lib", "dependencies-too"])
def test_debug_logs_keep_url_secrets_out_of_stdout_loki_and_rows(pg_queue, http_endpoint, loki,
                                                                 refused_url, dependencies):
    http_endpoint.script("/falha", [500])
    pg_queue.add_subscriber("ok", url=f"{http_endpoint.url}/ok?api_key={HOOK_KEYS[0]}",
                   method="POST")
    pg_queue.add_subscriber("falha", url=f"{http_endpoint.url}/falha?api_key={HOOK_KEYS[1]}",
                   method="POST")
    pg_queue.add_subscriber("recusa", url=f"{refused_url}/x?api_key={HOOK_KEYS[2]}",
                   method="GET")
    grafana = loki.url.replace("http://", f"http://lokiuser:{LOKI_PASSWORD}@")
    grafana += f"?X-Scope-OrgID={LOKI_QUERY}"
    pub_id = pg_queue.publish({"pedido": 1})
    worker = pg_queue.start_worker(WEBHOOK, LOG_DEBUG="true", QUEUE_MAX_RETRY="1",
                                   LOG_DEBUG_DEPENDENCIES=str(dependencies).lower(),
                                   GRAFANA_URL=grafana)
    pg_queue.wait_status(pub_id, "sucesso")
    pg_queue.wait_idle()
    rows = {r["subscriber_id"]: r for r in pg_queue.rows("NOT dead AND subscriber_id IS NOT NULL")}
    assert {k: (r["status"]) for k, r in rows.items()} == {
        "ok": "sucesso", "falha": "falha", "recusa": "falha"}
    assert [r.query for r in http_endpoint.received("/ok")] == [f"api_key={HOOK_KEYS[0]}"]
    eventually(lambda: any("Tarefa" in line for line in loki.lines()), 15,
               message="linhas das tarefas no Loki")
    worker.stop()

    log = worker.log()  # stdout and stderr of the process
    # Debug really was on (so the test proves something), for the library only unless
    # the dependencies were opted in.
    assert " DEBUG " in log
    assert ("urllib3" in log) is dependencies
    loki_text = json.dumps([loki.entries(), loki.streams()])
    rows_text = json.dumps(pg_queue.rows(), default=str)
    for secret in SECRETS:
        assert secret not in log, f"{secret} no stdout/stderr"
        assert secret not in loki_text, f"{secret} no Loki"
        assert secret not in rows_text, f"{secret} numa linha da fila"
    # The URLs still identify the endpoints, without their query strings.
    assert "/falha" in rows["falha"]["mensagem"] and "500" in rows["falha"]["mensagem"]
    assert "Logs enviados ao Loki em http://127.0.0.1" in log
    # The push URL keeps its query string; the credentials go as basic auth.
    assert loki.paths and all(p == f"/loki/api/v1/push?X-Scope-OrgID={LOKI_QUERY}"
                              for p in loki.paths)
    expected = base64.b64encode(f"lokiuser:{LOKI_PASSWORD}".encode()).decode()
    assert {h.get("Authorization") for h in loki.headers} == {f"Basic {expected}"}


def test_a_url_the_http_library_cannot_parse_leaves_no_secret_in_rows_or_logs(pg_queue):
    # Fails before the fix: requests' InvalidURL quotes the whole URL ("Failed to parse:
    # http://user:password@host:99999/x?api_key=..."), and that text went into the task's
    # mensagem and the worker's log.
    password, key = "senha-webhook-6b1d", "api-key-porta-e4a7"
    pg_queue.add_subscriber("porta", url=f"http://hookuser:{password}@127.0.0.1:99999/x"
                                      f"?api_key={key}", method="POST")
    pub_id = pg_queue.publish({"pedido": 2})
    worker = pg_queue.start_worker(WEBHOOK, LOG_DEBUG="true", QUEUE_MAX_RETRY="1")
    pg_queue.wait_status(pub_id, "sucesso")
    pg_queue.wait_idle()
    [row] = pg_queue.rows("NOT dead AND subscriber_id = 'porta' AND status = 'falha'")
    assert "requisição inválida" in row["mensagem"], row["mensagem"]
    assert "127.0.0.1:99999/x?…" in row["mensagem"], row["mensagem"]  # still identified
    worker.stop()
    log = worker.log()
    assert "requisição inválida" in log
    rows_text = json.dumps(pg_queue.rows(), default=str)
    for secret in (password, key):
        assert secret not in rows_text, f"{secret} numa linha da fila"
        assert secret not in log, f"{secret} no stdout/stderr"
