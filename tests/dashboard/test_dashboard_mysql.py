"""The dashboard's pages on MariaDB (HTTP, the same named queries in the MySQL dialect)."""

from __future__ import annotations

import re
import urllib.parse
import urllib.request

from tests.dashboard.conftest import start_dashboard


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def _fields(page: str) -> dict:
    return {k: v for k, v in re.findall(r'data-campo="([\w-]+)">([0-9+]+)<', page)}


def test_pages_on_mariadb_match_the_table(mariadb_queue, tmp_path):
    t = mariadb_queue.table
    q = mariadb_queue.sql
    q(f"INSERT INTO {t} (processo, status, data_hora) VALUES ('p', 'pendente', "
      "UTC_TIMESTAMP(6)), ('p', 'pendente', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR), "
      "('p', 'agendada', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND), ('p', 'sucesso', "
      "UTC_TIMESTAMP(6) - INTERVAL 5 MINUTE)")
    q(f"INSERT INTO {t} (processo, status, mensagem, estouro_tentativas) "
      "VALUES ('p', 'falha', 'erro <b>original</b>', TRUE)")
    live = q(f"SELECT max(id) AS id FROM {t}")[0]["id"]
    q(f"INSERT INTO {t} (processo, status, mensagem, dead, live_id) "
      f"VALUES ('p', 'falha', 'erro na fila de mortos', TRUE, {live})")
    dashboard = start_dashboard(None, tmp_path,
                                db_env=mariadb_queue.server.env(mariadb_queue.database))

    overview = _get(dashboard.url("/"))
    assert f'data-fila="{t}"' in overview
    page = _get(dashboard.url("/fila?" + urllib.parse.urlencode({"f": t})))
    got = _fields(page)
    assert {k: int(got[k]) for k in ("pendente", "agendada", "processando", "devidas",
                                     "mortas", "hora-sucesso")} == {
        "pendente": mariadb_queue.count("status = 'pendente'"),
        "agendada": mariadb_queue.count("status = 'agendada'"),
        "processando": 0,
        "devidas": mariadb_queue.count("status IN ('pendente', 'agendada') "
                                       "AND data_hora <= UTC_TIMESTAMP(6)"),
        "mortas": 1, "hora-sucesso": 1}
    assert "erro &lt;b&gt;original&lt;/b&gt;" in page  # the live chain's error, escaped
    oldest = q(f"SELECT id FROM {t} WHERE status IN ('pendente', 'agendada') "
               "AND data_hora <= UTC_TIMESTAMP(6) ORDER BY data_hora, id LIMIT 1")[0]["id"]
    assert re.search(rf'data-campo="mais-antiga">Devida mais antiga: <a [^>]*>#{oldest}<', page)
    chain = _get(dashboard.url("/cadeia?" + urllib.parse.urlencode({"f": t, "id": live})))
    assert f'data-tentativa="{live}"' in chain and "Fila de mortos" in chain
