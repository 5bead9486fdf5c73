"""Schema 9 (#26 item 3): `schema upgrade` brings a queue of schema 8 (no chave_ordem, no
ix_ordem; PostgreSQL: no `ordenacao_desde` in the control table) to 9 in place on
PostgreSQL and MariaDB, and the upgraded queue takes ordered tasks."""

from __future__ import annotations

from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.schema import upgrade, verify


def _downgrade(q) -> None:
    """The queue as schema 8 left it."""
    if q.is_mysql:
        q.sql(f"ALTER TABLE {q.qtable} DROP INDEX {q.quote('ix_' + q.fila + '_ordem')}, "
              "DROP COLUMN chave_ordem")
        q.sql(f"ALTER TABLE {q.qtable} COMMENT = 'nsj_queue_lib schema 8 (000000000000)'")
    else:
        controle = q.qtable.replace(q.quote(q.fila), q.quote(q.fila + "_controle"))
        q.sql(f"DROP INDEX {q.quote(q.schema)}.{q.quote('ix_' + q.fila + '_ordem')}")
        q.sql(f"ALTER TABLE {q.qtable} DROP COLUMN chave_ordem")
        q.sql(f"ALTER TABLE {controle} DROP COLUMN ordenacao_desde")
        q.sql(f"COMMENT ON TABLE {q.qtable} IS 'nsj_queue_lib schema 8 (000000000000)'")


def test_upgrade_from_schema_8_adds_the_ordering_key(each_db_queue):
    dbq = each_db_queue
    dialect = MYSQL if dbq.is_mysql else POSTGRES
    old = dbq.insert({"return": "antiga"})
    _downgrade(dbq)
    before = verify(dbq.conn, dialect, dbq.schema, dbq.fila)
    assert not before.ok
    assert "chave_ordem" in {d.name.split(".")[-1] for d in before.differences}
    ran = upgrade(dbq.conn, dialect, dbq.schema, dbq.fila)
    assert ran and verify(dbq.conn, dialect, dbq.schema, dbq.fila).ok
    assert upgrade(dbq.conn, dialect, dbq.schema, dbq.fila) == []  # idempotent
    assert dbq.row(old)["chave_ordem"] is None
    conn = dbq.new_conn()
    try:
        task = dbq.client(conn).insert_task("t", "t", "t", None, "{}", ordering_key="k")
        conn.commit()
    finally:
        conn.close()
    assert dbq.row(task)["chave_ordem"] == "k"
