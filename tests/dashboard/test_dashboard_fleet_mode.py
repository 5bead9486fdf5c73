"""The dashboard shows the queue's mixed-fleet mode with 1.2.2 beside its pause state."""

from __future__ import annotations

import re
import urllib.parse
import urllib.request

import pytest

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.dashboard import pages
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.observability.status import fleet_state


def _get(dashboard, path: str) -> str:
    with urllib.request.urlopen(dashboard.url(path), timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def _tag(page: str) -> str:
    m = re.search(r'<span class="tag[^"]*" data-campo="frota-mista"[^>]*>([^<]*)</span>', page)
    assert m, page
    return m.group(1)


def test_queue_page_and_overview_show_the_mode(pg_queue, dashboard):
    fila = "/fila?" + urllib.parse.urlencode({"f": pg_queue.table})
    page = _get(dashboard, fila)
    assert _tag(page) == "desligado"
    assert "Modo de frota mista com a 1.2.2:" in page and "(só workers 2.x)" in page
    # The overview flags only the queues in mixed-fleet mode.
    row = re.search(rf'<tr data-fila="{re.escape(pg_queue.table)}">.*?</tr>', _get(dashboard, "/"))
    assert row and "frota-mista" not in row.group(0)

    admin = QueueAdmin.from_settings(pg_queue.settings())
    try:
        admin.compat_on(por="painel-teste")
    finally:
        admin.close()
    page = _get(dashboard, fila)  # (read on every request: no cache)
    assert _tag(page) == "ligado"
    assert "(workers 1.2.2 podem usar a fila) desde " in page and "por painel-teste" in page
    row = re.search(rf'<tr data-fila="{re.escape(pg_queue.table)}">.*?</tr>', _get(dashboard, "/"))
    assert row and _tag(row.group(0)) == "frota mista 1.2.2"


@pytest.mark.parametrize("dialect, pause, want", [
    (MYSQL, {"pausada": False, "compat_1_2_2": None}, ""),
    (POSTGRES, {"pausada": False, "controle": False}, "ligado"),
    (POSTGRES, {"pausada": False, "compat_1_2_2": False}, "desligado"),
])
def test_fleet_line_per_database(dialect, pause, want):
    line = pages.fleet_line(fleet_state(dialect, pause))
    if not want:
        assert line == ""  # MySQL: 1.2.2 never ran natively there
    else:
        assert _tag(line) == want
