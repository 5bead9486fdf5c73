"""Named SQL queries per dialect, loaded from `sql/<dialect>/queries.sql`."""

from __future__ import annotations

import re
from functools import cache, partial
from importlib import resources
from string import Formatter
from typing import Dict, Optional

from nsj_queue_lib.db.dialect import Dialect
from nsj_queue_lib.db.names import (
    admin_table_name,
    control_table_name,
    delivery_table_name,
    endpoint_table_name,
    limit_table_name,
    schedule_table_name,
)

# The 26 columns of the `tarefa` dict handed to user code (payload resolved from
# the first attempt, since retries do not repeat it).
TAREFA_COLUMNS = (
    "id", "id_inicial", "data_hora_inicial", "data_hora", "origem", "destino", "processo",
    "chave_externa", "proxima_tentativa", "tentativa", "status", "mensagem", "id_anterior",
    "data_hora_anterior", "status_anterior", "mensagem_anterior", "tenant",
    "grupo_empresarial", "payload", "payload_hash", "pub_sub", "publication_id",
    "subscriber_id", "dead", "live_id", "prioridade",
)

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
PART = "part_"  # prefix of the named blocks that are pieces of other blocks

def read_sql(dialect: Dialect, filename: str) -> str:
    """Text of a packaged SQL file of the dialect."""
    return (resources.files("nsj_queue_lib.db") / "sql" / dialect.name / filename).read_text(
        encoding="utf-8"
    )


def _common_sql(filename: str) -> str:
    path = resources.files("nsj_queue_lib.db") / "sql" / "common" / filename
    return path.read_text(encoding="utf-8") if path.is_file() else ""


@cache
def _raw_blocks(dialect: Dialect, filename: str) -> Dict[str, str]:
    text = _common_sql(filename) + "\n" + read_sql(dialect, filename)
    parts = _HEADER.split(text)
    out: Dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        if name in out:
            raise ValueError(f"consulta '{name}' definida duas vezes ({dialect.name}/{filename})")
        out[name] = "\n".join(lines).strip()
    return _with_variants(out, f"{dialect.name}/{filename}")


# The suffix of the statements used beside 1.2.2 workers (mixed-fleet mode, PostgreSQL).
# Such a statement differs from its plain one only by a clause or two, so it is written
# once: a part `part_X_compat` makes {part_X} a variant part, and every block holding one
# (directly or through other parts) is also made under its name plus the suffix, with
# {part_X_compat} in its place (parts holding variant parts get such twins too).  When
# `part_X` itself is not defined the part is optional: the plain block leaves out the
# line that holds {part_X} alone.  Done once, when the file is loaded.
VARIANT = "_compat"
_FIELD = re.compile(r"\{(\w+)\}")


def _fields(body: str) -> set:
    return {f for _, f, _, _ in Formatter().parse(body) if f}


def _variant_field(held: set, m: re.Match[str]) -> str:
    return "{" + m.group(1) + VARIANT + "}" if m.group(1) in held else m.group(0)


def _with_variants(blocks: Dict[str, str], where: str) -> Dict[str, str]:
    variant = {n[:-len(VARIANT)] for n in blocks if n.startswith(PART) and n.endswith(VARIANT)}
    if not variant:
        return blocks
    varying = set(variant)
    grown = True
    while grown:  # the blocks holding a variant part, directly or through other parts
        grown = False
        for name, body in blocks.items():
            if name not in varying and not name.endswith(VARIANT) and _fields(body) & varying:
                varying.add(name)
                grown = True
    out = dict(blocks)
    for name in sorted(varying - variant):
        if name + VARIANT in blocks:
            raise ValueError(f"consulta '{name}{VARIANT}' escrita à mão e derivada ({where})")
        body = blocks[name]
        held = _fields(body) & varying
        out[name + VARIANT] = _FIELD.sub(partial(_variant_field, held), body)
        for missing in held - set(blocks):  # optional parts: their line left out
            lines = body.splitlines()
            kept = [ln for ln in lines if ln.strip() != "{" + missing + "}"]
            if len(kept) == len(lines) or "{" + missing + "}" in "\n".join(kept):
                raise ValueError(f"parte opcional {{{missing}}} fora de uma linha só sua em "
                                 f"'{name}' ({where})")
            body = "\n".join(kept)
        out[name] = body
    return out


def raw_queries(dialect: Dialect, filename: str = "queries.sql") -> Dict[str, str]:
    """All named queries of a dialect's file plus those of `sql/common/<filename>`
    (bodies written once for every dialect, with DIALECT_WORDS), unrendered; without
    the pieces (`raw_parts`)."""
    return {name: body for name, body in _raw_blocks(dialect, filename).items()
            if not name.startswith(PART)}


def raw_parts(dialect: Dialect, filename: str = "queries.sql") -> Dict[str, str]:
    """The blocks named part_*: pieces written into other blocks as {part_...}."""
    return {name: body for name, body in _raw_blocks(dialect, filename).items()
            if name.startswith(PART)}


def _render_parts(raw: Dict[str, str], names: Dict[str, str]) -> Dict[str, str]:
    out: Dict[str, str] = {}

    def render(name: str) -> str:
        # a part may hold other parts ({part_...})
        if name not in out:
            body = raw[name]
            held = {f: render(f) for f in _fields(body) if f in raw}
            out[name] = body.format(**names, **held)
        return out[name]

    for name in raw:
        render(name)
    return out


# Columns of TAREFA_COLUMNS holding a timestamp (a JSON row carries them as text).
TAREFA_TIMESTAMPS = ("data_hora_inicial", "data_hora", "proxima_tentativa",
                     "data_hora_anterior")


def _tarefa_exprs(table: str) -> list:
    """(name, SQL expression) of each TAREFA_COLUMNS column of the row `t`."""
    payload = f"coalesce(t.payload, (SELECT i.payload FROM {table} i WHERE i.id = t.id_inicial))"
    return [(col, payload if col == "payload" else f"t.{col}") for col in TAREFA_COLUMNS]


def _tarefa_cols(dialect: Dialect, table: str) -> str:
    return ", ".join(expr if expr == f"t.{col}" else f"{expr} AS {col}"
                     for col, expr in _tarefa_exprs(table))


def _tarefa_json_items(table: str) -> str:
    """The arguments of _tarefa_json's JSON_ARRAY, in TAREFA_COLUMNS order (a statement
    that adds its own values after them: no other result column, whose metadata pymysql
    decodes)."""
    return ", ".join(expr for _, expr in _tarefa_exprs(table))


def _tarefa_json(table: str) -> str:
    """The row as one JSON array in TAREFA_COLUMNS order (MySQL): pymysql decodes the
    metadata of every result column in Python, which for the 26 columns cost more client
    time than the claim's other statements together; json.loads of one column is native
    code.  An array, not an object: MariaDB sets up and writes half the items (no keys),
    6% of the claim-ahead's server instructions (bench/README.md, session 15)."""
    return f"JSON_ARRAY({_tarefa_json_items(table)}) AS tarefa_json"


class Queries:
    """The named queries of one dialect rendered for one queue (done once, then cached)."""

    def __init__(self, dialect: Dialect, queue_table: str,
                 subscriber_table: Optional[str] = None, filename: str = "queries.sql") -> None:
        self.dialect = dialect
        table = dialect.quote_table(queue_table)
        sub = dialect.quote_table(subscriber_table) if subscriber_table else "<no_subscriber_table>"
        names = {"table": table, "sub_table": sub, "tarefa_cols": _tarefa_cols(dialect, table),
                 "tarefa_json": _tarefa_json(table),
                 "tarefa_json_items": _tarefa_json_items(table),
                 "control_table": dialect.quote_table(control_table_name(queue_table)),
                 "admin_table": dialect.quote_table(admin_table_name(queue_table)),
                 "endpoint_table": dialect.quote_table(endpoint_table_name(queue_table)),
                 "delivery_table": dialect.quote_table(delivery_table_name(queue_table)),
                 "schedule_table": dialect.quote_table(schedule_table_name(queue_table)),
                 "limit_table": dialect.quote_table(limit_table_name(queue_table)),
                 **dialect.words}
        # the rendered pieces (the repository swaps one for another: see task_claim_locked)
        self.parts = _render_parts(raw_parts(dialect, filename), names)
        names.update(self.parts)
        # PostgreSQL: the RETURNING list of the per-task claim, and what the repository
        # writes there instead when the row comes back as one JSON value (db/claimed_row.py)
        self.tarefa_cols = names["tarefa_cols"]
        self.claimed_json = (f"t.id, json_build_array({names['tarefa_json_items']})::text "
                             "AS tarefa_json")
        self._sql = {name: body.format(**names)
                     for name, body in raw_queries(dialect, filename).items()}

    def __getitem__(self, name: str) -> str:
        return self._sql[name]

    def names(self) -> set:
        return set(self._sql)
