"""The dashboard's webhook page in a real browser: subscriptions with their breaker and
last deliveries, redelivery by a signed-in operator (CSRF and origin checks apply)."""

from __future__ import annotations

import urllib.parse

from nsj_queue_lib.admin import QueueAdmin
from tests.dashboard.test_dashboard import _post, _sign_in
from tests.fixtures.waiting import eventually

WEBHOOK = "nsj_queue_lib.worker_webhook"


def test_webhook_page_lists_subscriptions_and_redelivers(pg_queue, dashboard, browser,
                                                         http_endpoint, artifacts):
    http_endpoint.script("/hook", statuses=[500, 200], body="<script>x()</script>")
    with QueueAdmin.from_settings(pg_queue.settings()) as admin:
        secret = admin.subscriber_add("painel", "proc", http_endpoint.url + "/hook?token=abc",
                                      headers={"Authorization": "Bearer zz9"},
                                      generate_secret=True)
    pg_queue.start_worker(WEBHOOK)
    pg_queue.publish({"p": 1})
    eventually(lambda: len(http_endpoint.received("/hook")) == 2, timeout=30)
    pg_queue.wait_idle()

    page = dashboard.url("/webhooks?" + urllib.parse.urlencode({"f": pg_queue.table}))
    browser.get(page)
    section = browser.find_element("css selector", 'section[data-assinatura="painel"]')
    text = section.text
    assert "assinada" in text and "POST" in text and "/hook" in text
    assert len(browser.find_elements("css selector", "tr[data-entrega]")) == 2
    source = browser.page_source
    assert secret not in source and "zz9" not in source and "token=abc" not in source
    assert "<script>x()" not in source  # the receiver's answer is escaped
    assert not browser.find_elements("css selector", 'button[data-acao="redeliver"]')

    with QueueAdmin.from_settings(pg_queue.settings()) as admin:
        newest = admin.subscriber_deliveries("painel")[0]
    fields = {"op": "redeliver", "f": pg_queue.table, "id": newest["id"]}
    assert _post(dashboard.url("/acao"), fields) == 403  # no session, no CSRF field

    _sign_in(browser, dashboard)
    browser.get(page)
    browser.save_screenshot(str(artifacts / "webhooks.png"))
    browser.find_element(
        "css selector",
        f'tr[data-entrega="{newest["id"]}"] button[data-acao="redeliver"]').click()
    eventually(lambda: "Entrega reenfileirada" in browser.page_source, message="aviso")
    eventually(lambda: len(http_endpoint.received("/hook")) == 3, timeout=30)
    first, _, again = http_endpoint.received("/hook")
    assert again.headers["webhook-id"] == first.headers["webhook-id"]


def test_redelivery_on_a_queue_without_schema_5_is_refused_with_409(pg_queue, dashboard,
                                                                    browser):
    from tests.pubsub.test_webhook_schema import make_version_4

    make_version_4(pg_queue)
    _sign_in(browser, dashboard)
    browser.get(dashboard.url("/fila?" + urllib.parse.urlencode({"f": pg_queue.table})))
    # A crafted POST (the page offers no redelivery here), with the session's CSRF field.
    browser.execute_script("""
        const csrf = document.querySelector('input[name="csrf"]').value;
        const form = document.createElement('form');
        form.method = 'POST'; form.action = '/acao';
        for (const [k, v] of Object.entries({op: 'redeliver', f: arguments[0], id: '1',
                                               csrf: csrf})) {
            const input = document.createElement('input');
            input.type = 'hidden'; input.name = k; input.value = v; form.appendChild(input);
        }
        document.body.appendChild(form); form.submit();""", pg_queue.table)
    eventually(lambda: "Operação recusada" in browser.page_source, message="recusa")
    assert "schema upgrade" in browser.page_source
    assert "Erro interno" not in browser.page_source
