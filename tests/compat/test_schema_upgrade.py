"""A table made by the real 1.2.2 db_gen: upgraded in place, idempotently, version recorded;
the migration guide's SQL (docs/howto/migrar-1.2.2.md) is exactly what the upgrade prints."""

from __future__ import annotations

import os
import re
import uuid

import pytest

from nsj_queue_lib.db import schema
from nsj_queue_lib.db.dialect import POSTGRES
from tests.fixtures.processes import ROOT

GUIDE = ROOT / "docs" / "howto" / "migrar-1.2.2.md"
BEGIN = "<!-- upgrade-1.2.2:inicio -->"
END = "<!-- upgrade-1.2.2:fim -->"


@pytest.fixture
def legacy_table(pg_server, legacy):
    s = f"l_{uuid.uuid4().hex[:10]}"
    conn = pg_server.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{s}"')
        cur.execute(legacy.db_gen(s, "fila_teste"))
    yield conn, s
    with conn.cursor() as cur:
        cur.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
    conn.close()


def guide_block(statements):
    return schema.format_statements(statements)


def test_upgrade_of_a_1_2_2_table_is_in_place_idempotent_and_recorded(legacy_table):
    conn, s = legacy_table
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {s}.fila_teste (payload, payload_hash) VALUES ('p', 'abc')")
    before = schema.verify(conn, POSTGRES, s, "fila_teste")
    assert not before.ok and before.version is None
    kinds = {d.kind for d in before.differences}
    assert {"index", "trigger", "function", "view", "column", "version"} <= kinds
    schema.upgrade(conn, POSTGRES, s, "fila_teste")
    after = schema.verify(conn, POSTGRES, s, "fila_teste")
    assert after.ok, after.differences
    assert after.version == schema.version_stamp(POSTGRES)[len(schema.VERSION_PREFIX):]
    assert schema.upgrade_statements(conn, POSTGRES, s, "fila_teste") == []
    with conn.cursor() as cur:  # rows kept, the hash text readable as text
        cur.execute(f"SELECT payload, payload_hash FROM {s}.fila_teste")
        assert cur.fetchall() == [("p", "abc")]


def test_migration_guide_sql_is_the_upgrade_output(legacy_table):
    conn, s = legacy_table
    generated = guide_block(schema.upgrade_statements(conn, POSTGRES, s, "fila_teste"))
    generated = generated.replace(f'"{s}".', '"public".')
    text = GUIDE.read_text(encoding="utf-8")
    if os.environ.get("NSJQ_UPDATE_DOCS"):
        new = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END),
                     lambda _: f"{BEGIN}\n```sql\n{generated}```\n{END}", text, flags=re.S)
        GUIDE.write_text(new, encoding="utf-8")
        text = new
    m = re.search(re.escape(BEGIN) + r"\n```sql\n(.*?)```\n" + re.escape(END), text, re.S)
    assert m, f"{GUIDE.name} sem o bloco de migração gerado"
    assert m.group(1) == generated, (
        f"{GUIDE.name} desatualizado: rode NSJQ_UPDATE_DOCS=1 pytest "
        "tests/compat/test_schema_upgrade.py")
