"""Names of the database objects derived from a queue's name (shared by DDL and queries)."""

from __future__ import annotations

import hashlib

MAX_IDENTIFIER = 63  # PostgreSQL's limit; MySQL allows 64


def object_name(*parts: str) -> str:
    """Join parts with '_' and keep it within 63 characters (hash suffix when cut)."""
    name = "_".join(parts)
    if len(name) <= MAX_IDENTIFIER:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_IDENTIFIER - 9]}_{digest}"


def control_table_name(queue_table: str) -> str:
    """The control table (pause state) of a queue table: 'schema.fila' -> 'schema.fila_controle'."""
    *schema, table = queue_table.split(".")
    return ".".join([*schema, object_name(table, "controle")])


def admin_table_name(queue_table: str) -> str:
    """The admin jobs' last runs of a queue table: 'schema.fila' -> 'schema.fila_rotinas'."""
    *schema, table = queue_table.split(".")
    return ".".join([*schema, object_name(table, "rotinas")])


def endpoint_table_name(queue_table: str) -> str:
    """Circuit breakers of a queue's webhook endpoints: 'schema.fila' -> 'schema.fila_endpoints'."""
    *schema, table = queue_table.split(".")
    return ".".join([*schema, object_name(table, "endpoints")])


def delivery_table_name(queue_table: str) -> str:
    """Webhook delivery log of a queue: 'schema.fila' -> 'schema.fila_entregas'."""
    *schema, table = queue_table.split(".")
    return ".".join([*schema, object_name(table, "entregas")])


def schedule_table_name(queue_table: str) -> str:
    """The periodic tasks of a queue table: 'schema.fila' -> 'schema.fila_agenda'."""
    *schema, table = queue_table.split(".")
    return ".".join([*schema, object_name(table, "agenda")])


def limit_table_name(queue_table: str) -> str:
    """The concurrency limits of a queue table: 'schema.fila' -> 'schema.fila_limites'."""
    *schema, table = queue_table.split(".")
    return ".".join([*schema, object_name(table, "limites")])
