"""db_gen --mysql: the DDL applies to MariaDB and the shipped SingleStore file is its output."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stdout

from nsj_queue_lib.cli import db_gen
from nsj_queue_lib.db.dialect import MYSQL
from nsj_queue_lib.db.queries import TAREFA_COLUMNS, Queries
from nsj_queue_lib.db.schema import render_schema
from tests.fixtures.database import split_statements
from tests.fixtures.processes import ROOT

SHIPPED = ROOT / "database" / "0001 - fila teste SingleStore.sql"


def _db_gen(*argv: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert db_gen.main(list(argv)) == 0
    return out.getvalue()


def test_shipped_singlestore_file_is_db_gen_output_for_test_fila_teste():
    assert SHIPPED.read_text(encoding="utf-8") == _db_gen("test", "fila_teste", "--mysql")


def test_db_gen_module_prints_the_mysql_dialect():
    proc = subprocess.run([sys.executable, "-m", "nsj_queue_lib.db_gen", "test", "fila_teste",
                           "--mysql"], capture_output=True, text=True, cwd=str(ROOT), check=True)
    assert proc.stdout == render_schema(MYSQL, "test", "fila_teste")
    assert "`test`.`fila_teste`" in proc.stdout
    # The monitoring views (queries, not indexes) may filter with WHERE.
    statements = "\n".join(s for s in split_statements(proc.stdout)
                           if not s.upper().startswith("CREATE OR REPLACE VIEW")).upper()
    for absent in ("TRIGGER", "FUNCTION", "FOREIGN KEY", "REFERENCES", "WHERE"):
        assert absent not in statements


def test_schema_applies_with_the_expected_columns_and_indexes(mariadb_queue):
    cols = mariadb_queue.sql(
        "SELECT column_name AS c, column_type AS t FROM information_schema.columns WHERE"
        " table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (mariadb_queue.database, mariadb_queue.fila))
    types = {r["c"]: r["t"] for r in cols}
    assert len(types) == 31  # schema 6: chave_unica, chave_unica_ativa; schema 9: chave_ordem
    assert types["id"].startswith("bigint")
    assert types["data_hora"] == types["data_hora_inicial"] == "datetime(6)"
    assert types["payload"] == "longtext"
    assert types["payload_hash"] == "varchar(64)"
    assert types["mensagem"] == "varchar(500)"
    assert types["pub_sub"] == types["dead"] == "tinyint(1)"
    indexes = {r["k"] for r in mariadb_queue.sql(
        "SELECT DISTINCT index_name AS k FROM information_schema.statistics"
        " WHERE table_schema = %s AND table_name = %s", (mariadb_queue.database,
                                                         mariadb_queue.fila))}
    assert {f"ix_{mariadb_queue.fila}_{s}" for s in ("claim", "due", "running", "chain")} <= indexes
    assert mariadb_queue.sql("SELECT * FROM information_schema.triggers WHERE trigger_schema = %s",
                             (mariadb_queue.database,)) == []
    sub_cols = {r["c"] for r in mariadb_queue.sql(
        "SELECT column_name AS c FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = %s",
        (mariadb_queue.database, f"{mariadb_queue.fila}_subscriber"))}
    assert sub_cols == {"id", "tenant", "grupo_empresarial", "processo", "url", "http_method",
                        "headers", "ativo", "created_at", "segredo", "segredo_anterior",
                        "segredo_anterior_expira"}


def test_shipped_file_applies_to_an_empty_database(mysql_server):
    conn = mysql_server.connect()
    name = "nsjq_shipped_schema"
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            ddl = SHIPPED.read_text(encoding="utf-8").replace("`test`", f"`{name}`")
            for stmt in split_statements(ddl):
                cur.execute(stmt)
            cur.execute(f"SHOW FULL TABLES FROM `{name}`")
            kinds = {r[0]: r[1] for r in cur.fetchall()}
            assert kinds == {"fila_teste": "BASE TABLE", "fila_teste_subscriber": "BASE TABLE",
                             "fila_teste_controle": "BASE TABLE",
                             "fila_teste_rotinas": "BASE TABLE",
                             "fila_teste_endpoints": "BASE TABLE",
                             "fila_teste_entregas": "BASE TABLE",
                             "fila_teste_agenda": "BASE TABLE",
                             "fila_teste_limites": "BASE TABLE",
                             "fila_teste_cadeias": "VIEW", "fila_teste_resumo": "VIEW"}
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


def test_native_claim_and_probe_read_the_indexes_db_gen_writes(mariadb_queue):
    # A queue in use: 2,000 finished tasks, 500 due, 1,000 of a higher priority scheduled
    # for tomorrow.
    table = f"`{mariadb_queue.database}`.`{mariadb_queue.fila}`"
    for status, count, priority, when in (
            ("sucesso", 2000, 50, "- INTERVAL 1 HOUR"), ("pendente", 500, 50, ""),
            ("pendente", 1000, 90, "+ INTERVAL 1 DAY")):
        mariadb_queue.sql(f"INSERT INTO {table} (processo, status, prioridade, data_hora) "
                          f"SELECT 'x', %s, %s, UTC_TIMESTAMP(6) {when} FROM "
                          f"information_schema.columns a, information_schema.columns b LIMIT "
                          f"{count}",
                          (status, priority))
    mariadb_queue.sql(f"ANALYZE TABLE {table}")
    q = Queries(MYSQL, mariadb_queue.table)
    # The probe: one min() per status, answered from the first entry of ix_due.
    assert list(mariadb_queue.sql(q["task_has_due"])[0].values()) == [1]
    plan = mariadb_queue.sql("EXPLAIN " + q["task_has_due"])
    assert {r["Extra"] for r in plan if r["table"] is None} <= {
        "No tables used", "Select tables optimized away", "No matching min/max row"}, plan
    assert all(r["table"] is None for r in plan), plan  # no index range read at all
    # The claim: one ordered range of ix_claim per waiting status, index only, then the
    # rows by primary key.
    plan = mariadb_queue.sql("EXPLAIN " + q["task_claim_skip_locked"], {"limit": 1,
                                                                        "candidates": 16})
    ranges = [r for r in plan if r["table"] == mariadb_queue.fila]
    assert [r["key"] for r in ranges] == [f"ix_{mariadb_queue.fila}_claim"] * 2, plan
    assert all("Using index" in r["Extra"] for r in ranges), plan
    assert {r["key"] for r in plan if r["table"] == "t"} == {"PRIMARY"}, plan
    # The claim-ahead (each task's path in a backlog): one ordered range of ix_claim read
    # into the row locks, no derived table, temporary table nor sort; the 'agendada'
    # check answered from ix_due alone (i: the payload of a retry, by primary key, read
    # only when the row has none).  Its answer: the first due task, none scheduled.
    claim_ahead = q["task_claim_ahead_pending"]
    plan = mariadb_queue.sql("EXPLAIN " + claim_ahead, {"limit": 1})
    assert [(r["table"], r["key"]) for r in plan if r["table"] is not None] == [
        ("t", f"ix_{mariadb_queue.fila}_claim"), ("i", "PRIMARY")], plan
    assert not any("temporary" in (r["Extra"] or "") or "filesort" in (r["Extra"] or "")
                   for r in plan), plan
    assert {r["Extra"] for r in plan if r["table"] is None} <= {
        "Select tables optimized away", "No matching min/max row"}, plan
    mariadb_queue.sql("BEGIN")
    try:
        [row] = mariadb_queue.sql(claim_ahead, {"limit": 1})
    finally:
        mariadb_queue.sql("ROLLBACK")
    assert list(row) == ["tarefa_json"]  # one column (pymysql decodes each one's metadata)
    # A JSON array, the row's values in TAREFA_COLUMNS order, then the 'agendada' check
    # (no keys: MariaDB sets up and writes half the items of an object's).
    values = json.loads(row["tarefa_json"])
    assert isinstance(values, list) and len(values) == len(TAREFA_COLUMNS) + 1, values
    tarefa = dict(zip(TAREFA_COLUMNS, values))
    assert tarefa["prioridade"] == 50 and tarefa["status"] == "pendente"
    assert values[-1] is False  # no 'agendada' task due
