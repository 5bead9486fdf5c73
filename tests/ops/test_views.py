"""Monitoring views <fila>_cadeias and <fila>_resumo on real PostgreSQL and MariaDB."""

from __future__ import annotations

import pytest

from tests.mysql.conftest import make_settings
from tests.ops import scenario

SETTINGS = {"QUEUE_MAX_RETRY": "2", "QUEUE_BASE_INTERVAL_RETRY": "5"}


def _check(rows_cadeias, rows_resumo, history):
    expected = scenario.expected_chains(history)
    chains = {r["id_inicial"]: r for r in map(scenario.normalize, rows_cadeias)}
    assert set(chains) == set(expected)
    for chain_id, want in expected.items():
        got = {k: chains[chain_id][k] for k in want}
        assert got == want, f"cadeia {chain_id}"
    # The other columns come from the chain's attempts.
    ok = chains[history.ids["to_dead"]]
    assert ok["mensagem"].startswith(f"erro {history.attempts['to_dead'][1]}")
    assert ok["morta_mensagem"] == f"ok {history.attempts['to_dead_dead'][1]}"
    assert ok["data_hora_ultima"] >= ok["data_hora_inicial"]
    assert chains[history.ids["s1"]]["chave_externa"] == "pub"
    summary = {(r["processo"], r["tipo"], r["status"]): r["cadeias"]
               for r in map(scenario.normalize, rows_resumo)}
    assert summary == scenario.EXPECTED_SUMMARY
    tentativas = {(r["processo"], r["tipo"], r["status"]): int(r["tentativas"])
                  for r in rows_resumo}
    assert tentativas[("proc", "tarefa", "sucesso")] == 3  # ok (1) + retry_ok (2)


def test_views_postgres(pg_queue):
    driver = scenario.Driver(pg_queue.settings(**SETTINGS))
    try:
        history = scenario.build(driver)
    finally:
        driver.close()
    cadeias = pg_queue.sql(f'SELECT * FROM "{pg_queue.schema}"."{pg_queue.fila}_cadeias"')
    resumo = pg_queue.sql(f'SELECT * FROM "{pg_queue.schema}"."{pg_queue.fila}_resumo"')
    _check(cadeias, resumo, history)
    # The queries of docs/conceitos/status.md.
    pend = pg_queue.sql(f'SELECT processo, sum(cadeias) AS n FROM "{pg_queue.schema}".'
                        f'"{pg_queue.fila}_resumo" WHERE status IN (\'pendente\', \'agendada\') '
                        "GROUP BY processo ORDER BY processo")
    assert [(r["processo"], int(r["n"])) for r in pend] == [("proc", 2), ("pub", 1)]
    mortas = pg_queue.sql(f'SELECT id_inicial, morta_status FROM "{pg_queue.schema}".'
                          f'"{pg_queue.fila}_cadeias" WHERE enviada_fila_mortos ORDER BY '
                          f'id_inicial')
    assert [r["id_inicial"] for r in mortas] == [history.ids["to_dead"], history.ids["s2"]]


@pytest.mark.mysql
def test_views_mariadb(mariadb_queue):
    driver = scenario.Driver(make_settings(mariadb_queue, **SETTINGS))
    try:
        history = scenario.build(driver)
    finally:
        driver.close()
    cadeias = mariadb_queue.sql(f"SELECT * FROM "
                                f"`{mariadb_queue.database}`.`{mariadb_queue.fila}_cadeias`")
    resumo = mariadb_queue.sql(f"SELECT * FROM "
                               f"`{mariadb_queue.database}`.`{mariadb_queue.fila}_resumo`")
    _check(cadeias, resumo, history)
    mortas = mariadb_queue.sql(f"SELECT id_inicial FROM "
                               f"`{mariadb_queue.database}`.`{mariadb_queue.fila}_cadeias`"
                         " WHERE enviada_fila_mortos ORDER BY id_inicial")
    assert [r["id_inicial"] for r in mortas] == [history.ids["to_dead"], history.ids["s2"]]


def test_view_names_are_quoted_and_shortened():
    from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
    from nsj_queue_lib.db.schema import object_name, render_schema

    long_fila = "f" * 60
    ddl = render_schema(POSTGRES, "public", long_fila)
    name = object_name(long_fila, "cadeias")
    assert len(name) <= 63
    assert f'CREATE OR REPLACE VIEW "public"."{name}" AS' in ddl
    assert f'FROM "public"."{name}"' in ddl  # resumo reads cadeias
    assert "CREATE OR REPLACE VIEW `s`.`fila_resumo` AS" in render_schema(MYSQL, "s", "fila")
