"""Webhook request mapping (pure) and deliver() against a local server, in-process."""

from __future__ import annotations

import pytest

from nsj_queue_lib.pubsub.webhook import (
    WebhookConfigError,
    WebhookError,
    build_request,
    deliver,
    safe_url,
)


def sub(**kw):
    base = {"id": "s1", "url": "http://h.example/x", "http_method": "post", "headers": None}
    base.update(kw)
    return base


def test_post_json_gets_content_type_and_verbatim_body():
    req = build_request(sub(headers={"X-Token": "abc", "X-N": 5}), '{"a": 1}')
    assert req.method == "POST"
    assert req.body == b'{"a": 1}'
    assert req.headers == {"X-Token": "abc", "X-N": "5", "Content-Type": "application/json"}


def test_subscription_content_type_wins_case_insensitively():
    req = build_request(sub(http_method="PuT", headers={"content-TYPE": "text/x"}), '{"a": 1}')
    assert req.method == "PUT"
    assert req.headers == {"content-TYPE": "text/x"}


def test_non_json_body_gets_no_content_type():
    req = build_request(sub(), "texto simples")
    assert req.body == b"texto simples"
    assert "Content-Type" not in req.headers


@pytest.mark.parametrize("method", ["get", "DELETE", "Delete"])
def test_get_and_delete_carry_no_body(method):
    req = build_request(sub(http_method=method, headers='{"X-A": "1"}'), '{"a": 1}')
    assert req.method == method.upper()
    assert req.body is None
    assert req.headers == {"X-A": "1"}


@pytest.mark.parametrize("kw, fragment", [
    ({"url": None}, "sem url"),
    ({"url": "  "}, "sem url"),
    ({"url": "ftp://h/x"}, "http://"),
    ({"url": "http://u:senha@[::1/x?k=v"}, "url do webhook inválida (<url inválida>)"),
    ({"http_method": None}, "sem http_method"),
    ({"http_method": "patch"}, "não suportado: PATCH"),
    ({"headers": "[1, 2]"}, "objeto JSON"),
    ({"headers": "{ruim"}, "JSON válido"),
    ({"headers": {"X": "a\r\nY: b"}}, "quebra de linha"),
])
def test_invalid_subscriptions_fail_clearly(kw, fragment):
    with pytest.raises(WebhookConfigError, match="'s1'") as info:
        build_request(sub(**kw), "{}")
    assert fragment in str(info.value)


def test_repr_and_urls_hide_secrets():
    req = build_request(sub(url="https://u:senha@h.example/x?q=1",
                            headers={"Authorization": "Bearer SEGREDO"}), '{"cpf": "123"}')
    text = repr(req)
    assert "SEGREDO" not in text and "senha" not in text and "cpf" not in text
    # credentials and the query string (which may carry tokens) never reach logs/messages
    assert safe_url("https://u:senha@h.example:8443/x?token=abc") == "https://h.example:8443/x"


def test_deliver_success_and_failures(http_endpoint, refused_url):
    http_endpoint.script("/ok", [201], body="criado\ncom sucesso")
    message = deliver(build_request(sub(url=http_endpoint.url + "/ok"), '{"a": 1}'), 5)
    assert "POST" in message and "/ok" in message and "201" in message
    assert "criado com sucesso" in message

    http_endpoint.script("/erro", [503], body="indisponível agora")
    with pytest.raises(WebhookError) as info:
        deliver(build_request(sub(url=http_endpoint.url + "/erro"), "{}"), 5)
    assert info.value.status == 503
    assert "HTTP 503" in str(info.value) and "indisponível agora" in str(info.value)

    with pytest.raises(WebhookError, match="falha de conexão") as info:
        deliver(build_request(sub(url=refused_url), "{}"), 5)
    assert info.value.status is None

    http_endpoint.script("/lento", [200], delay=2)
    with pytest.raises(WebhookError, match="tempo esgotado"):
        deliver(build_request(sub(url=http_endpoint.url + "/lento", http_method="GET"), None),
                0.5)


def test_long_response_body_is_cut(http_endpoint):
    http_endpoint.script("/grande", [500], body="x" * 100_000)
    with pytest.raises(WebhookError) as info:
        deliver(build_request(sub(url=http_endpoint.url + "/grande"), "{}"), 5)
    assert len(str(info.value)) < 450


def test_worker_session_keeps_no_cookies_between_calls(http_endpoint):
    from nsj_queue_lib.worker_webhook import WorkerWebhook

    http_endpoint.script("/c", [200], headers={"Set-Cookie": "sessao=abc; Path=/"})
    worker = WorkerWebhook()
    for _ in range(2):
        worker.deliver_webhook("{}", sub(url=http_endpoint.url + "/c"), {})
    assert [r.headers.get("cookie") for r in http_endpoint.received("/c")] == [None, None]


def test_worker_session_follows_the_proxy_variables_on_every_call(http_endpoint, monkeypatch):
    """The session remembers the environment per host: HTTP_PROXY and NO_PROXY still
    apply to every call, each host on its own (http_endpoint is the proxy here)."""
    from nsj_queue_lib.worker_webhook import WorkerWebhook
    from tests.fixtures.http import RecordingServer

    for name in ("http_proxy", "no_proxy", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", http_endpoint.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    target = RecordingServer().start()
    try:
        worker = WorkerWebhook()
        for _ in range(2):
            worker.deliver_webhook("{}", sub(url="http://via-proxy.invalid/p"), {})
            worker.deliver_webhook("{}", sub(url=target.url + "/direct"), {})
    finally:
        target.close()
    assert [r.headers["host"] for r in http_endpoint.received()] == ["via-proxy.invalid"] * 2
    assert [r.path for r in target.received()] == ["/direct"] * 2


def test_make_request_accepts_the_original_payload_shape(http_endpoint):
    import json

    from nsj_queue_lib.worker_webhook import WorkerWebhook

    original = json.dumps({"publication": '{"order": 1}',
                           "subscription": sub(url=http_endpoint.url + "/orig",
                                               headers={"X-Test": "1"})})
    message = WorkerWebhook().make_request(original)
    assert "200" in message
    message = WorkerWebhook().make_request(
        {"publication": {"order": 2}, "subscription": sub(url=http_endpoint.url + "/orig")})
    [first, second] = http_endpoint.received("/orig")
    assert first.body == b'{"order": 1}' and first.headers["x-test"] == "1"
    assert json.loads(second.body) == {"order": 2}
    assert second.headers["content-type"] == "application/json"
