"""Schema 8 (#26 item 4): `schema upgrade` brings a queue of schema 7 (no <fila>_limites,
PostgreSQL: no `limites` column in the control table) to 8 in place on PostgreSQL and
MariaDB, and the upgraded queue takes concurrency limits."""

from __future__ import annotations

from nsj_queue_lib.admin import QueueAdmin
from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
from nsj_queue_lib.db.schema import upgrade, verify


def _downgrade(q) -> None:
    """The queue as schema 7 left it."""
    limites = q.qtable.replace(q.quote(q.fila), q.quote(q.fila + "_limites"))
    q.sql(f"DROP TABLE {limites}")
    if q.is_mysql:
        q.sql(f"ALTER TABLE {q.qtable} COMMENT = 'nsj_queue_lib schema 7 (000000000000)'")
    else:
        controle = q.qtable.replace(q.quote(q.fila), q.quote(q.fila + "_controle"))
        q.sql(f"ALTER TABLE {controle} DROP COLUMN limites")
        q.sql(f"COMMENT ON TABLE {q.qtable} IS 'nsj_queue_lib schema 7 (000000000000)'")


def test_upgrade_from_schema_7_adds_the_limits(each_db_queue):
    dbq = each_db_queue
    dialect = MYSQL if dbq.is_mysql else POSTGRES
    old = dbq.insert({"return": "antiga"})
    _downgrade(dbq)
    admin = QueueAdmin(dbq.conn, dbq.table)
    # A schema-7 queue: the workers' read of the control row still works (no limits).
    assert not admin.pause_state().get("limites")
    before = verify(dbq.conn, dialect, dbq.schema, dbq.fila)
    assert not before.ok
    assert dbq.fila + "_limites" in {d.name.split(".")[-1] for d in before.differences}
    ran = upgrade(dbq.conn, dialect, dbq.schema, dbq.fila)
    assert ran and verify(dbq.conn, dialect, dbq.schema, dbq.fila).ok
    assert upgrade(dbq.conn, dialect, dbq.schema, dbq.fila) == []  # idempotent
    assert dbq.row(old)["status"] == "pendente"
    assert admin.set_limit("depois", 2)["maximo"] == 2
    assert [r["processo"] for r in admin.list_limits()] == ["depois"]
    assert bool(admin.pause_state()["limites"])
