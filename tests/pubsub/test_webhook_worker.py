"""The webhook worker (python -m nsj_queue_lib.worker_webhook) against a local HTTP server."""

from __future__ import annotations

import json
import time

from tests.fixtures.waiting import eventually

WEBHOOK = "nsj_queue_lib.worker_webhook"
SECRET = "segredo-do-header-8c1f"
BODY_MARK = "dado-sensivel-do-corpo-77aa"


def subscriber_rows(queue, pub_id, where="true"):
    return queue.rows(f"publication_id = %s AND ({where})", (pub_id,))


def test_post_put_get_delete_with_headers_body_and_content_type(pg_queue, http_endpoint):
    base = http_endpoint.url
    pg_queue.add_subscriber("post", url=base + "/post", method="post",
                   headers={"X-Token": SECRET, "X-Outro": "1"})
    pg_queue.add_subscriber("put", url=base + "/put", method="PUT", headers={"X-Token": SECRET})
    pg_queue.add_subscriber("put_ct", url=base + "/put_ct", method="Put",
                   headers={"content-type": "application/vnd.nsj+json"})
    pg_queue.add_subscriber("get", url=base + "/get?x=1", method="get",
                   headers={"X-Token": SECRET})
    pg_queue.add_subscriber("delete", url=base + "/delete", method="DELETE")
    publication = {"pedido": 1, "texto": BODY_MARK, "quando": "2024-01-01"}
    text = json.dumps(publication)
    pub_id = pg_queue.publish(publication)
    worker = pg_queue.start_worker(WEBHOOK)
    pg_queue.wait_status(pub_id, "sucesso")
    pg_queue.wait_idle()

    rows = {r["subscriber_id"]: r for r in subscriber_rows(pg_queue, pub_id)}
    assert set(rows) == {"post", "put", "put_ct", "get", "delete"}
    for sid, row in rows.items():
        assert row["status"] == "sucesso", row
        assert "200" in row["mensagem"] and f"/{sid}" in row["mensagem"]
        assert f"resposta 200 de /{sid}" in row["mensagem"]

    [post] = http_endpoint.received("/post")
    assert post.method == "POST"
    assert post.body == text.encode()
    assert post.headers["content-type"] == "application/json"
    assert post.headers["x-token"] == SECRET and post.headers["x-outro"] == "1"

    [put] = http_endpoint.received("/put")
    assert put.method == "PUT" and put.body == text.encode()
    assert put.headers["content-type"] == "application/json"

    [put_ct] = http_endpoint.received("/put_ct")
    assert put_ct.headers["content-type"] == "application/vnd.nsj+json"
    assert [n.lower() for n in put_ct.header_names].count("content-type") == 1

    [get] = http_endpoint.received("/get")
    assert get.method == "GET" and get.query == "x=1" and get.body == b""
    assert get.headers["x-token"] == SECRET
    assert "content-type" not in get.headers

    [delete] = http_endpoint.received("/delete")
    assert delete.method == "DELETE" and delete.body == b""

    log = worker.log()
    assert SECRET not in log
    assert BODY_MARK not in log


def test_connection_refused_retries_then_dead_letter(pg_queue, refused_url):
    pg_queue.add_subscriber("fora", url=refused_url, method="POST")
    pub_id = pg_queue.publish({"a": 1})
    pg_queue.start_worker(WEBHOOK, QUEUE_MAX_RETRY="2")
    eventually(lambda: subscriber_rows(pg_queue, pub_id, "dead AND status = 'sucesso'"))
    pg_queue.wait_idle()
    rows = subscriber_rows(pg_queue, pub_id)
    live = [r for r in rows if not r["dead"]]
    assert [(r["tentativa"], r["status"]) for r in live] == [(1, "falha"), (2, "falha")]
    for r in live:
        assert "falha de conexão" in r["mensagem"]
        assert "refused" in r["mensagem"].lower() or "recusad" in r["mensagem"].lower()
    assert "fila de mortos" in live[1]["mensagem"]


def test_server_slower_than_timeout_fails_by_timeout(pg_queue, http_endpoint):
    http_endpoint.script("/lento", [200], delay=5)
    pg_queue.add_subscriber("lento", url=http_endpoint.url + "/lento", method="GET")
    pg_queue.start_ready_worker(WEBHOOK, DEFAULT_WEBHOOK_TIMEOUT="1", QUEUE_MAX_RETRY="1")
    started = time.monotonic()
    pub_id = pg_queue.publish({"a": 1})
    row = eventually(lambda: next(iter(subscriber_rows(
        pg_queue, pub_id, "NOT dead AND status = 'falha'")), None))
    elapsed = time.monotonic() - started
    assert "tempo esgotado" in row["mensagem"] and "timeout" in row["mensagem"]
    assert elapsed < 4.5, elapsed
    assert len(http_endpoint.received("/lento")) == 1


def test_invalid_subscriptions_fail_clearly_and_the_worker_keeps_going(pg_queue, http_endpoint):
    pg_queue.add_subscriber("sem_metodo", processo="p1", url=http_endpoint.url + "/a")
    pg_queue.add_subscriber("patch", processo="p1", url=http_endpoint.url + "/a", method="PATCH")
    pg_queue.add_subscriber("sem_url", processo="p1", method="POST")
    pg_queue.add_subscriber("bom", processo="p2", url=http_endpoint.url + "/bom", method="POST")
    bad = pg_queue.publish({"a": 1}, processo="p1")
    worker = pg_queue.start_worker(WEBHOOK, QUEUE_MAX_RETRY="1")
    eventually(lambda: len(subscriber_rows(pg_queue, bad, "dead AND status = 'sucesso'")) == 3)
    failures = {r["subscriber_id"]: r["mensagem"]
                for r in subscriber_rows(pg_queue, bad, "NOT dead")}
    assert "sem http_method" in failures["sem_metodo"]
    assert "não suportado: PATCH" in failures["patch"]
    assert "sem url" in failures["sem_url"]
    good = pg_queue.publish({"b": 2}, processo="p2")
    eventually(lambda: subscriber_rows(pg_queue, good, "status = 'sucesso'"))
    assert worker.proc.poll() is None


def test_code_and_webhook_subscribers_in_one_worker(pg_queue, http_endpoint):
    pg_queue.add_subscriber("a")
    pg_queue.add_subscriber("hook", url=http_endpoint.url + "/hook", method="post")
    pub_id = pg_queue.publish("não é json")
    pg_queue.start_worker("tests.workers.pubsub_scripted")
    pg_queue.wait_status(pub_id, "sucesso")
    pg_queue.wait_idle()
    assert {r["subscriber_id"]: r["status"] for r in subscriber_rows(pg_queue, pub_id)} == {
        "a": "sucesso", "hook": "sucesso"}
    [req] = http_endpoint.received("/hook")
    assert req.body == "não é json".encode()
    assert "content-type" not in req.headers
    assert [(e["chave"], e["tipo"]) for e in pg_queue.effects()] == [("a", "execute")]


def test_example_worker_pub_sub_teste(pg_queue, http_endpoint):
    pg_queue.add_subscriber("teste")
    pg_queue.add_subscriber("teste_webhook", url=http_endpoint.url + "/exemplo", method="POST")
    ok = pg_queue.publish({"pedido": 1})
    pg_queue.start_worker("nsj_queue_lib.worker_pub_sub_teste", QUEUE_MAX_RETRY="1")
    pg_queue.wait_status(ok, "sucesso")
    pg_queue.wait_idle()
    assert {r["subscriber_id"]: r["status"] for r in subscriber_rows(pg_queue, ok)} == {
        "teste": "sucesso", "teste_webhook": "sucesso"}
    failing = pg_queue.publish({"falhar": True}, processo="proc")
    dead = eventually(lambda: subscriber_rows(
        pg_queue, failing, "subscriber_id = 'teste' AND dead AND status = 'sucesso'"))
    assert dead[0]["mensagem"].startswith(f"Tarefa morta {dead[0]['id']} do assinante teste")
    assert len(http_endpoint.received("/exemplo")) == 2


def test_one_webhook_process_with_concurrency_delivers_in_parallel(pg_queue, http_endpoint):
    """QUEUE_CONCURRENCY: 12 deliveries to an endpoint answering in 0.5 s, one process
    with 6 task threads: at least 6 requests in flight at once, each delivered once."""
    for i in range(12):
        http_endpoint.script(f"/lento/{i}", [200], delay=0.5)
        pg_queue.add_subscriber(f"lento{i:02d}", url=f"{http_endpoint.url}/lento/{i}",
                       method="POST")
    worker = pg_queue.start_worker(WEBHOOK, QUEUE_CONCURRENCY="6")
    pub_id = pg_queue.publish({"a": 1})
    eventually(lambda: len(subscriber_rows(pg_queue, pub_id, "status = 'processando'")) >= 6,
               timeout=15, message="6 deliveries running at once")
    pg_queue.wait_idle(timeout=30)
    rows = subscriber_rows(pg_queue, pub_id)
    assert len(rows) == 12 and all(r["status"] == "sucesso" for r in rows)
    assert sorted(r.path for r in http_endpoint.received()) == sorted(
        f"/lento/{i}" for i in range(12))
    assert worker.proc.poll() is None
