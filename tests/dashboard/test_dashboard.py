"""The web dashboard in a real browser, against a real PostgreSQL with real workers."""

from __future__ import annotations

import datetime as _dt
import http.cookiejar
import urllib.error
import urllib.parse
import urllib.request

from tests.dashboard.conftest import start_dashboard
from tests.fixtures.waiting import eventually

TOKEN = "segredo-de-teste-123"


def _cell(browser, css: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, css).text.strip()


def _make_dead(queue) -> int:
    """A task whose chain and dead-letter chain both fail; succeeds on attempt 4 (redrive)."""
    task = queue.insert({"efeito": "morta", "fail_until": 4, "fail_dead": True},
                        processo="faturar")
    eventually(lambda: queue.count(f"live_id = {task} AND dead AND status = 'falha' "
                                   "AND NOT reenfileirado") == 1,
               timeout=40, message="cadeia da fila de mortos esgotada")
    return task


def test_pages_show_the_numbers_of_the_database(pg_queue, dashboard, browser, artifacts):
    pg_queue.start_ready_worker()
    ok = [pg_queue.insert({"efeito": f"ok{i}"}, processo="faturar") for i in range(5)]
    dead_live = _make_dead(pg_queue)
    future = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=2)
    later = [pg_queue.insert({"efeito": "depois"}, data_hora=future) for _ in range(2)]
    for i in ok:
        pg_queue.wait_status(i, "sucesso")

    browser.get(dashboard.url("/"))
    assert "Filas deste banco" in browser.page_source
    row = f'tr[data-fila="{pg_queue.table}"]'
    want = {
        "pendente": pg_queue.count("status = 'pendente'"),
        "agendada": pg_queue.count("status = 'agendada'"),
        "processando": pg_queue.count("status = 'processando'"),
        "devidas": pg_queue.count("status IN ('pendente', 'agendada') AND data_hora <= now()"),
        "mortas": pg_queue.count("live_id IS NOT NULL AND dead AND NOT reenfileirado "
                                 "AND status <> 'sucesso'"),
    }
    assert want["pendente"] == len(later) and want["mortas"] == 1
    got = {k: int(_cell(browser, f'{row} [data-campo="{k}"]')) for k in want}
    assert got == want
    browser.save_screenshot(str(artifacts / "visao-geral.png"))

    browser.get(dashboard.url("/fila?" + urllib.parse.urlencode({"f": pg_queue.table})))
    got = {k: int(_cell(browser, f'.grade [data-campo="{k}"]')) for k in want}
    assert got == want
    # A new queue is out of mixed-fleet mode, unless its worker saw, at start, a session
    # that looks like a 1.2.2 worker in this database (then it put the queue back in it).
    mixed = pg_queue.value(f"SELECT compat_1_2_2 FROM {pg_queue.table}_controle")
    assert _cell(browser, '[data-campo="frota-mista"]') == ("ligado" if mixed else "desligado")
    chart = browser.find_element("css selector", 'svg[data-campo="grafico"]')
    finished = pg_queue.count("status = 'sucesso' AND data_hora > now() - interval '1 hour'")
    failed = pg_queue.count("status = 'falha' AND data_hora > now() - interval '1 hour'")
    assert int(chart.get_attribute("data-sucesso")) == finished == 5
    assert int(chart.get_attribute("data-falha")) == failed == 6  # 3 live + 3 dead attempts
    dead_root = pg_queue.value(f"SELECT id FROM {pg_queue.table} WHERE live_id = {dead_live} "
                               "AND dead AND id_inicial IS NULL")
    dead_row = browser.find_element("css selector", f'tr[data-morta="{dead_root}"]')
    assert "falha programada na tentativa 3" in dead_row.text  # the live chain's last error
    assert "falha programada na fila de mortos" in dead_row.text
    # read-only until signed in: no action buttons
    assert not browser.find_elements("css selector", "button[data-acao]")
    browser.set_window_size(412, 915)  # a phone
    browser.save_screenshot(str(artifacts / "fila-celular.png"))
    browser.set_window_size(1200, 1000)

    browser.get(dashboard.url("/cadeia?" + urllib.parse.urlencode({"f": pg_queue.table,
                                                                   "id": dead_live})))
    attempts = browser.find_elements("css selector", "tr[data-tentativa]")
    assert [int(a.get_attribute("data-tentativa")) for a in attempts] == \
        [r["id"] for r in pg_queue.chain(dead_live)]
    assert len(attempts) == 3 and _cell(browser, '[data-campo="status"]') == "falha"
    assert f"#{dead_root}" in browser.page_source  # link to its dead-letter chain
    browser.save_screenshot(str(artifacts / "cadeia.png"))


def _sign_in(browser, dashboard) -> None:
    browser.get(dashboard.url("/entrar"))
    browser.find_element("name", "token").send_keys(dashboard.token)
    browser.find_element("css selector", "form button[type=submit]").click()
    eventually(lambda: "Ações habilitadas neste navegador" in browser.page_source,
               message="entrou")


def test_redrive_button_requeues_a_dead_task_that_a_worker_runs(pg_queue, dashboard, browser,
                                                                 artifacts):
    pg_queue.start_ready_worker()
    live = _make_dead(pg_queue)
    dead_root = pg_queue.value(f"SELECT id FROM {pg_queue.table} WHERE live_id = {live} "
                               "AND dead AND id_inicial IS NULL")
    _sign_in(browser, dashboard)
    browser.get(dashboard.url("/fila?" + urllib.parse.urlencode({"f": pg_queue.table})))
    button = browser.find_element("css selector",
                                  f'tr[data-morta="{dead_root}"] button[data-acao="retry"]')
    browser.save_screenshot(str(artifacts / "fila-com-acoes.png"))
    button.click()
    eventually(lambda: "Cadeia reenfileirada" in browser.page_source, message="aviso")
    new = pg_queue.value(f"SELECT max(id) FROM {pg_queue.table} WHERE id_inicial = {live}")
    assert f"#{new}" in browser.page_source
    row = pg_queue.wait_status(new, "sucesso", timeout=30)  # a worker ran the redriven attempt
    assert row["tentativa"] == 4 and row["id_anterior"] is not None
    assert [e["chave"] for e in pg_queue.effects(f"tarefa_id = {new}")] == ["morta"]
    # the dead letter is resolved: no longer listed nor counted
    browser.get(dashboard.url("/fila?" + urllib.parse.urlencode({"f": pg_queue.table})))
    assert not browser.find_elements("css selector", f'tr[data-morta="{dead_root}"]')
    assert _cell(browser, '.grade [data-campo="mortas"]') == "0"

    # pause and resume from the page
    browser.find_element("css selector", 'button[data-acao="pause"]').click()
    eventually(lambda: "Fila pausada" in browser.page_source, message="pausada")
    assert pg_queue.value(f"SELECT pausada FROM {pg_queue.table}_controle") is True
    assert _cell(browser, '[data-campo="pausa"]') == "pausada"
    browser.save_screenshot(str(artifacts / "fila-pausada.png"))
    browser.find_element("css selector", 'button[data-acao="resume"]').click()
    eventually(lambda: "Fila retomada" in browser.page_source, message="retomada")
    assert pg_queue.value(f"SELECT pausada FROM {pg_queue.table}_controle") is False

    # cancel a waiting task from its chain page
    future = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=1)
    waiting = pg_queue.insert({"efeito": "nunca"}, data_hora=future)
    browser.get(dashboard.url("/cadeia?" + urllib.parse.urlencode({"f": pg_queue.table,
                                                                   "id": waiting})))
    browser.find_element("css selector", 'button[data-acao="cancel"]').click()
    eventually(lambda: "Tarefa cancelada" in browser.page_source, message="cancelada")
    assert pg_queue.row(waiting)["status"] == "cancelada"


def _post(url: str, fields: dict, opener=None, headers=None) -> int:
    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers=headers or {})
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_actions_without_the_token_are_refused(pg_queue, dashboard, tmp_path):
    task = pg_queue.insert({"efeito": "x"}, data_hora=_dt.datetime.now(_dt.timezone.utc)
                           + _dt.timedelta(hours=1))
    acao = dashboard.url("/acao")
    fields = {"op": "cancel", "f": pg_queue.table, "id": task}
    assert _post(acao, fields) == 403                              # no cookie, no csrf
    assert _post(acao, {**fields, "csrf": "x" * 64}) == 403        # a made-up csrf
    assert _post(dashboard.url("/entrar"), {"token": "errado"}) == 403
    # a signed-in session still needs the page's CSRF value
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    assert _post(dashboard.url("/entrar"), {"token": TOKEN}, opener) == 200  # 303 followed
    assert any(c.name == "nsjq_painel" for c in jar)
    assert _post(acao, fields, opener) == 403
    # a form posted from another site is refused even with a valid session
    assert _post(acao, {**fields, "op": "pause"}, opener,
                 headers={"Origin": "http://malicioso.example"}) == 403
    assert pg_queue.row(task)["status"] == "pendente"
    assert pg_queue.value(f"SELECT count(*) FROM {pg_queue.table}_controle WHERE pausada") == 0
    # a dashboard without DASHBOARD_TOKEN is read-only
    readonly = start_dashboard(pg_queue, tmp_path, token="")
    assert _post(readonly.url("/entrar"), {"token": ""}) == 403
    assert _post(readonly.url("/acao"), fields) == 403
    assert pg_queue.row(task)["status"] == "pendente"
    # a Host header that is not the loopback is refused (DNS rebinding)
    request = urllib.request.Request(dashboard.url("/"), headers={"Host": "evil.example"})
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("Host estranho aceito")
    except urllib.error.HTTPError as exc:
        assert exc.code == 421
