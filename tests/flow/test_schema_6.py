"""Schema 6 (#26): `schema upgrade` brings a queue of schema 4/5 (no chave_unica, no
ix_unique, no <fila>_agenda) to 6 in place on PostgreSQL and MariaDB (the generated column
included), and the upgraded queue takes unique keys and schedules."""

from __future__ import annotations

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.schema import upgrade, verify


def _downgrade(q) -> None:
    """The queue as schema 4/5 left it."""
    agenda = q.qtable.replace(q.quote(q.fila), q.quote(q.fila + "_agenda"))
    q.sql(f"DROP TABLE {agenda}")
    if q.is_mysql:
        q.sql(f"ALTER TABLE {q.qtable} DROP INDEX {q.quote('ix_' + q.fila + '_unique')}, "
              "DROP COLUMN chave_unica_ativa, DROP COLUMN chave_unica")
        q.sql(f"ALTER TABLE {q.qtable} COMMENT = 'nsj_queue_lib schema 4 (000000000000)'")
    else:
        q.sql(f"DROP INDEX {q.quote(q.schema)}.{q.quote('ix_' + q.fila + '_unique')}")
        q.sql(f"ALTER TABLE {q.qtable} DROP COLUMN chave_unica")
        q.sql(f"COMMENT ON TABLE {q.qtable} IS 'nsj_queue_lib schema 4 (000000000000)'")


def test_upgrade_from_schema_4_adds_the_unique_key_and_the_schedules(each_db_queue):
    dbq = each_db_queue
    dialect = MYSQL if dbq.is_mysql else POSTGRES
    old = dbq.insert({"return": "antiga"})
    _downgrade(dbq)
    before = verify(dbq.conn, dialect, dbq.schema, dbq.fila)
    assert not before.ok
    assert {d.name.split(".")[-1] for d in before.differences} >= {
        dbq.fila + "_agenda", "chave_unica"}
    ran = upgrade(dbq.conn, dialect, dbq.schema, dbq.fila)
    assert ran and verify(dbq.conn, dialect, dbq.schema, dbq.fila).ok
    assert upgrade(dbq.conn, dialect, dbq.schema, dbq.fila) == []  # idempotent
    assert dbq.row(old)["chave_unica"] is None
    client = dbq.client()
    first = client.insert_task("t", "t", "t", None, "1", unique_key="depois")
    assert client.insert_task("t", "t", "t", None, "2", unique_key="depois") == first
    admin = QueueAdmin(dbq.conn, dbq.table)
    admin.add_schedule("depois", "t", every="5m")
    assert [s["nome"] for s in admin.list_schedules()] == ["depois"]
