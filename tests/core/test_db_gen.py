"""db_gen: its output is the committed dump and builds a working queue on PostgreSQL."""

from __future__ import annotations

import uuid

from tests.fixtures.processes import ROOT, run_python

DUMP = ROOT / "database" / "dump" / "0001 - fila teste.sql"


def test_db_gen_output_equals_committed_dump():
    res = run_python(["-m", "nsj_queue_lib.db_gen", "public", "fila_teste"])
    assert res.returncode == 0, res.stderr
    assert res.stdout == DUMP.read_text(encoding="utf-8")


def test_db_gen_usage_error_without_arguments():
    res = run_python(["-m", "nsj_queue_lib.db_gen"])
    assert res.returncode == 2
    assert res.stdout == ""
    assert "schema" in res.stderr


def test_db_gen_output_applies_cleanly_to_an_empty_schema(pg_server):
    schema = f"g_{uuid.uuid4().hex[:10]}"
    res = run_python(["-m", "nsj_queue_lib.db_gen", schema, "fila_gerada"])
    assert res.returncode == 0, res.stderr
    conn = pg_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE SCHEMA "{schema}"')
            cur.execute(res.stdout)
            cur.execute("SELECT table_name FROM information_schema.tables "
                        "WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY 1",
                        (schema,))
            assert [r[0] for r in cur.fetchall()] == ["fila_gerada", "fila_gerada_agenda",
                                                   "fila_gerada_controle",
                                                   "fila_gerada_endpoints",
                                                   "fila_gerada_entregas",
                                                   "fila_gerada_limites",
                                                   "fila_gerada_rotinas",
                                                   "fila_gerada_subscriber"]
            cur.execute("SELECT count(*) FROM information_schema.columns "
                        "WHERE table_schema = %s AND table_name = 'fila_gerada'", (schema,))
            assert cur.fetchone()[0] == 32  # (2.x: + chave_unica; 7: the leases; 9: chave_ordem)
            # Storage settings of the queue table (reasons in schema.sql).
            cur.execute("SELECT c.reloptions FROM pg_class c JOIN pg_namespace n "
                        "ON n.oid = c.relnamespace WHERE n.nspname = %s "
                        "AND c.relname = 'fila_gerada'", (schema,))
            options = set(cur.fetchone()[0])
            assert {"fillfactor=70", "autovacuum_vacuum_scale_factor=0.01",
                    "autovacuum_vacuum_threshold=1000"} <= options
            cur.execute("SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = %s AND NOT t.tgisinternal", (schema,))
            assert [r[0] for r in cur.fetchall()] == ["trigger_insert_fila_gerada"]
            # The trigger notifies the channel named after the queue, on commit.
            cur.execute('LISTEN "fila_gerada"')
            cur.execute(f'INSERT INTO "{schema}".fila_gerada (payload) VALUES (%s) RETURNING id',
                        ("x",))
            conn.poll()
            assert [n.channel for n in conn.notifies] == ["fila_gerada"]
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()
