"""Schema lifecycle on real PostgreSQL/MariaDB: idempotent DDL, verify, in-place upgrade,
generic over what schema.sql declares."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from nsj_queue_lib.db import schema
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.exceptions import ConfigError
from tests.fixtures.database import require_mysql
from tests.fixtures.processes import run_python


@pytest.fixture
def scratch(pg_server):
    name = f"s_{uuid.uuid4().hex[:10]}"
    conn = pg_server.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{name}"')
    yield conn, name
    with conn.cursor() as cur:
        cur.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    conn.close()


def _sql(conn, text, params=None):
    with conn.cursor() as cur:
        cur.execute(text, params)
        return cur.fetchall() if cur.description else None


def test_render_applied_twice_is_a_no_op_and_verifies(scratch):
    conn, s = scratch
    ddl = schema.render(POSTGRES, s, "fila")
    _sql(conn, ddl)
    _sql(conn, f'INSERT INTO "{s}".fila (payload) VALUES (%s)', ("x",))
    _sql(conn, ddl)  # no "relation already exists"
    assert _sql(conn, f'SELECT count(*) FROM "{s}".fila') == [(1,)]
    result = schema.verify(conn, POSTGRES, s, "fila")
    assert result.ok, result.differences
    assert result.version == schema.version_stamp(POSTGRES)[len(schema.VERSION_PREFIX):]
    assert schema.upgrade_statements(conn, POSTGRES, s, "fila") == []


def test_verify_lists_differences_and_upgrade_repairs_them_idempotently(scratch):
    conn, s = scratch
    schema.apply(conn, POSTGRES, s, "fila")
    _sql(conn, f'DROP INDEX "{s}".ix_fila_claim')
    _sql(conn, f'DROP VIEW "{s}".fila_resumo')
    _sql(conn, f'ALTER TABLE "{s}".fila ALTER COLUMN prioridade SET DEFAULT 10')
    _sql(conn, f'ALTER TABLE "{s}".fila DROP COLUMN live_id CASCADE')
    _sql(conn, f'CREATE OR REPLACE TRIGGER trigger_insert_fila AFTER INSERT ON "{s}".fila '
               f'FOR EACH ROW EXECUTE FUNCTION "{s}".notify_fila_insert()')
    _sql(conn, f'COMMENT ON TABLE "{s}".fila IS NULL')
    result = schema.verify(conn, POSTGRES, s, "fila")
    found = {(d.kind, d.name, d.problem) for d in result.differences}
    assert {("index", "ix_fila_claim", "ausente"), ("view", "fila_resumo", "ausente"),
            ("column", "fila.prioridade", "diferente"), ("column", "fila.live_id", "ausente"),
            ("trigger", "trigger_insert_fila", "diferente"),
            ("version", "fila", "diferente")} <= found
    assert not result.ok and result.version is None
    ran = schema.upgrade(conn, POSTGRES, s, "fila")
    assert ran[-1].startswith("COMMENT ON TABLE")  # version recorded last
    assert schema.verify(conn, POSTGRES, s, "fila").ok
    assert schema.upgrade_statements(conn, POSTGRES, s, "fila") == []


def test_upgrade_and_verify_cover_objects_added_to_the_source(scratch, monkeypatch):
    """Helpers add objects to schema.sql (a control table, storage parameters): they are
    verified and upgraded without this module knowing them."""
    conn, s = scratch
    schema.apply(conn, POSTGRES, s, "fila")
    original = schema._template

    def extended(dialect):
        return original(dialect) + (
            "\nCREATE TABLE IF NOT EXISTS {schema_sql}.\"{fila}_ctl\" (\n"
            "    fila varchar(100) PRIMARY KEY, pausada boolean NOT NULL DEFAULT false);\n"
            "ALTER TABLE {table} SET (toast_tuple_target = 256);\n")

    monkeypatch.setattr(schema, "_template", extended)
    result = schema.verify(conn, POSTGRES, s, "fila")
    found = {(d.kind, d.name) for d in result.differences}
    assert ("table", "fila_ctl") in found and ("options", "fila") in found
    schema.upgrade(conn, POSTGRES, s, "fila")
    assert schema.verify(conn, POSTGRES, s, "fila").ok

    def options():
        return _sql(conn, "SELECT reloptions FROM pg_class WHERE oid = %s::regclass",
                    (f'"{s}".fila',))[0][0] or []

    assert "toast_tuple_target=256" in options()
    monkeypatch.setattr(schema, "_template", original)
    # Back to the plain source: the extra table stays (noted), the options are reset.
    result = schema.verify(conn, POSTGRES, s, "fila")
    assert {(d.kind, d.name) for d in result.differences} >= {("options", "fila")}
    schema.upgrade(conn, POSTGRES, s, "fila")
    assert schema.verify(conn, POSTGRES, s, "fila").ok
    assert "toast_tuple_target=256" not in options()


def test_db_gen_cli_verify_upgrade_apply(scratch, pg_server):
    conn, s = scratch
    env = pg_server.env()
    res = run_python(["-m", "nsj_queue_lib.db_gen", s, "Fila_Cli", "--verify"], env=env)
    assert res.returncode == 1, res.stderr
    assert "table fila_cli: ausente" in res.stdout
    res = run_python(["-m", "nsj_queue_lib.db_gen", s, "Fila_Cli", "--apply"], env=env)
    assert res.returncode == 0, res.stderr
    # Unquoted names fold to lower case, as PostgreSQL does.
    assert _sql(conn, "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND "
                      "tablename = 'fila_cli'", (s,)) == [(1,)]
    res = run_python(["-m", "nsj_queue_lib.db_gen", s, "fila_cli", "--verify"], env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_python(["-m", "nsj_queue_lib.db_gen", s, "fila_cli", "--upgrade"], env=env)
    assert res.returncode == 0 and "nada a fazer" in res.stdout


def test_quoted_names_keep_case_and_control_characters_are_rejected():
    ddl = schema.render(POSTGRES, "public", '"Fila_Teste"')
    assert 'CREATE TABLE IF NOT EXISTS "public"."Fila_Teste"' in ddl
    assert "pg_notify('Fila_Teste'" in ddl
    assert 'CREATE TABLE IF NOT EXISTS "public"."fila_teste"' in schema.render(
        POSTGRES, "public", "Fila_Teste")
    for bad in ("fila\n", "fi\tla", '"fila\n"', "", "1fila", 'fi"la', "a" * 64):
        with pytest.raises(ConfigError):
            schema.render(POSTGRES, "public", bad)
    res = run_python(["-m", "nsj_queue_lib.db_gen", "public", "fila\n"])
    assert res.returncode == 2 and res.stdout == ""
    assert "caracteres de controle" in res.stderr


@pytest.mark.mysql
def test_mysql_ddl_applies_twice():
    mysql_conn = require_mysql().connect(database=None)
    db = f"s_{uuid.uuid4().hex[:10]}"
    stmts = schema.split_statements(schema.render(MYSQL, db, "fila"))
    try:
        with contextlib.closing(mysql_conn.cursor()) as cur:
            for _ in range(2):
                for stmt in stmts:
                    cur.execute(stmt)
            cur.execute(f"SELECT table_comment FROM information_schema.tables "
                        f"WHERE table_schema = '{db}' AND table_name = 'fila'")
            assert schema.parse_stamp(cur.fetchone()[0])
    finally:
        with contextlib.closing(mysql_conn.cursor()) as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        mysql_conn.close()


@pytest.mark.mysql
def test_mysql_verify_and_upgrade_repair_a_queue_in_place():
    conn = require_mysql().connect(database=None)
    db = f"s_{uuid.uuid4().hex[:10]}"
    try:
        schema.apply(conn, MYSQL, db, "fila")
        assert schema.verify(conn, MYSQL, db, "fila").ok
        with contextlib.closing(conn.cursor()) as cur:
            cur.execute(f"INSERT INTO `{db}`.fila (payload) VALUES ('x')")
            cur.execute(f"ALTER TABLE `{db}`.fila DROP INDEX ix_fila_claim, DROP COLUMN live_id, "
                        "MODIFY COLUMN prioridade INT NOT NULL DEFAULT 10, COMMENT = ''")
            cur.execute(f"DROP VIEW `{db}`.fila_resumo")
        result = schema.verify(conn, MYSQL, db, "fila")
        found = {(d.kind, d.name, d.problem) for d in result.differences}
        assert {("index", "fila.ix_fila_claim", "ausente"), ("column", "fila.live_id", "ausente"),
                ("column", "fila.prioridade", "diferente"), ("view", "fila_resumo", "ausente"),
                ("version", "fila", "diferente")} <= found, found
        ran = schema.upgrade(conn, MYSQL, db, "fila")
        assert ran[-1].upper().startswith("ALTER TABLE") and "COMMENT" in ran[-1]
        after = schema.verify(conn, MYSQL, db, "fila")
        assert after.ok, after.differences
        assert schema.upgrade_statements(conn, MYSQL, db, "fila") == []
        with contextlib.closing(conn.cursor()) as cur:
            cur.execute(f"SELECT payload, prioridade FROM `{db}`.fila")
            assert cur.fetchall() == (("x", 50),)  # rows kept
    finally:
        with contextlib.closing(conn.cursor()) as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()
