"""The dashboard's list of recent failures and its retry button, with real workers on a
real PostgreSQL: a chain that ended in failure gets a new attempt, a chain waiting for
its next attempt after a failure has it run now; the POST is guarded like every
dashboard action (session cookie, the page's CSRF field, same origin)."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Dict, Optional, Tuple

from tests.dashboard.conftest import start_dashboard
from tests.fixtures.waiting import eventually

TOKEN = "segredo-de-teste-123"


class Browser:
    """urllib with a cookie jar: what a signed-in browser sends."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> Tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=15) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def post(self, path: str, fields: Dict[str, object],
             headers: Optional[Dict[str, str]] = None) -> Tuple[int, str, str]:
        """(status, final url, page) after following the 303."""
        data = urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(self.base + path, data=data, method="POST",
                                         headers=headers or {})
        try:
            with self.opener.open(request, timeout=15) as resp:
                return resp.status, resp.url, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, "", exc.read().decode()


def _failure_rows(page: str) -> Dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in
            re.finditer(r'<tr data-falha="(\d+)" data-situacao="(\w+)">', page)}


def _row_html(page: str, root: int) -> str:
    start = page.index(f'<tr data-falha="{root}"')
    return page[start:page.index("</tr>", start)]


def test_recent_failures_are_listed_and_retried_from_the_dashboard(pg_queue, tmp_path):
    # A chain that ends in failure (one attempt allowed)...
    one_shot = pg_queue.start_ready_worker(QUEUE_MAX_RETRY="1")
    ended = pg_queue.insert({"efeito": "terminou", "fail_until": 2}, processo="faturar")
    eventually(lambda: pg_queue.count(f"id = {ended} AND status = 'falha'") == 1, timeout=30,
               message="cadeia terminada em falha")
    assert one_shot.stop() == 0
    # ...and one waiting ten minutes for its second attempt after a failure.
    pg_queue.start_ready_worker(QUEUE_MAX_RETRY="3", QUEUE_BASE_INTERVAL_RETRY="10")
    waiting = pg_queue.insert({"efeito": "aguarda", "fail_until": 2}, processo="cobrar")
    eventually(lambda: pg_queue.count(f"id_inicial = {waiting} AND status = 'agendada'") == 1,
               timeout=30, message="segunda tentativa agendada")
    next_attempt = pg_queue.value(f"SELECT id FROM {pg_queue.table} WHERE id_inicial = {waiting}")
    assert pg_queue.value(f"SELECT data_hora > now() + interval '5 minutes' FROM {pg_queue.table} "
                          f"WHERE id = {next_attempt}") is True
    fine = pg_queue.insert({"efeito": "ok"})
    pg_queue.wait_status(fine, "sucesso")

    dash = start_dashboard(pg_queue, tmp_path, token=TOKEN)
    fila = urllib.parse.urlencode({"f": pg_queue.table})
    browser = Browser(dash.base)
    status, page = browser.get(f"/fila?{fila}")
    assert status == 200 and "Falhas recentes" in page
    assert _failure_rows(page) == {waiting: "aguardando", ended: "falha"}
    assert list(_failure_rows(page)) == [waiting, ended]  # newest first
    ended_row, waiting_row = _row_html(page, ended), _row_html(page, waiting)
    assert "falha programada na tentativa 1" in ended_row and "faturar" in ended_row
    assert "falha programada na tentativa 1" in waiting_row and "cobrar" in waiting_row
    assert "aguardando nova tentativa" in waiting_row and "tentativa 2 prevista" in waiting_row
    assert "data-acao" not in page  # not signed in: no buttons

    # signed in: the page carries a retry button and the CSRF field for each failure
    assert browser.post("/entrar", {"token": TOKEN})[0] == 200
    page = browser.get(f"/fila?{fila}")[1]
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page).group(1)
    assert 'data-acao="retry">Tentar agora' in _row_html(page, waiting)
    assert 'data-acao="retry">Reenfileirar' in _row_html(page, ended)

    # without the CSRF field, or from another site, the retry is refused
    fields = {"op": "retry", "f": pg_queue.table, "id": waiting, "csrf": csrf}
    assert browser.post("/acao", {**fields, "csrf": ""})[0] == 403
    assert browser.post("/acao", {**fields, "csrf": "0" * 64})[0] == 403
    assert browser.post("/acao", fields, {"Origin": "http://evil.example"})[0] == 403
    assert browser.post("/acao", fields, {"Referer": "http://evil.example/fila"})[0] == 403
    assert Browser(dash.base).post("/acao", fields)[0] == 403  # no session cookie
    assert pg_queue.value(f"SELECT data_hora > now() + interval '5 minutes' FROM {pg_queue.table} "
                          f"WHERE id = {next_attempt}") is True
    assert pg_queue.count(f"id_inicial = {ended}") == 0

    # the waiting chain: its next attempt is due now (no new attempt) and a worker runs it
    status, where, page = browser.post("/acao", fields,
                                       {"Origin": dash.base, "Referer": dash.base + "/fila"})
    assert status == 200 and "/cadeia?" in where
    assert f"Próxima tentativa #{next_attempt} antecipada" in page
    row = pg_queue.wait_status(next_attempt, "sucesso", timeout=30)
    assert row["tentativa"] == 2
    assert pg_queue.count(f"id_inicial = {waiting}") == 1

    # the ended chain: a new attempt, linked to the failed one, run by the worker
    status, where, page = browser.post("/acao", {**fields, "id": ended})
    assert status == 200
    new = pg_queue.value(f"SELECT id FROM {pg_queue.table} WHERE id_inicial = {ended}")
    assert new is not None and f"Cadeia reenfileirada: nova tentativa #{new}" in page
    row = pg_queue.wait_status(new, "sucesso", timeout=30)
    assert row["tentativa"] == 2 and row["id_anterior"] == ended
    assert pg_queue.row(ended)["reenfileirado"] is True

    # neither is a failure any more
    page = browser.get(f"/fila?{fila}")[1]
    assert _failure_rows(page) == {} and "Nenhuma falha recente" in page
    # a second retry of a succeeded chain is refused with a message, not a 500
    status, _, page = browser.post("/acao", {**fields, "id": ended})
    assert status == 409 and "sucesso" in page
    assert "Traceback" not in dash.proc.log()
