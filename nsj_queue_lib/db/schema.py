"""Render the DDL of a queue (table, subscriber table, indexes, trigger) per dialect."""

from __future__ import annotations

from importlib import resources

from nsj_queue_lib.config import validate_identifier
from nsj_queue_lib.db.dialect import Dialect
from nsj_queue_lib.db.names import object_name
from nsj_queue_lib.db.queries import read_sql

__all__ = ["object_name", "render_schema"]


def render_schema(dialect: Dialect, schema: str, fila: str) -> str:
    """DDL for queue `fila` in `schema` (both validated as plain identifiers)."""
    validate_identifier(schema, "schema")
    validate_identifier(fila, "fila")
    q = dialect.quote

    def qualified(name: str) -> str:
        return f"{q(schema)}.{q(name)}"

    names = {
        "schema": schema,
        "fila": fila,
        "table": qualified(fila),
        "sub_table": qualified(object_name(fila, "subscriber")),
        "control_table": qualified(object_name(fila, "controle")),
        "function": qualified(object_name("notify", fila, "insert")),
        "trigger": q(object_name("trigger_insert", fila)),
        "view_cadeias": qualified(object_name(fila, "cadeias")),
        "view_resumo": qualified(object_name(fila, "resumo")),
    }
    for ix in ("claim", "due", "running", "data_hora", "chain", "equivalent", "publication",
               "live", "sub"):
        names[f"ix_{ix}"] = q(object_name("ix", fila, ix))
    views = (resources.files("nsj_queue_lib.db") / "sql" / "views.sql").read_text("utf-8")
    ddl = read_sql(dialect, "schema.sql") + "\n" + views
    return ddl.format(**names)
