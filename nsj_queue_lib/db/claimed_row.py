"""PostgreSQL: the claimed row as one JSON value, decoded into the usual `tarefa` dict.

psycopg2 builds a description entry, decodes a column name and converts a value for
each of the row's 26 columns: about a fifth of a worker's client CPU per task.  The
per-task claim (task_claim_locked) returns instead the row's id and one text column,
a JSON array in TAREFA_COLUMNS order (json.loads is native code), turned here into the
dict the column form gives, value for value: ints, strings, booleans and NULLs are the
same in JSON, and timestamps come back as the datetimes psycopg2 makes (with the
session's UTC offset, or naive for a column without time zone).

Only when every column has a type whose JSON form maps back exactly (`JSON_SAFE`,
checked once per session in the catalog); a table altered to another type (numeric,
say, which psycopg2 gives as Decimal) keeps the column form.  A value the parser does
not take (a timestamp 'infinity', a year before 1 or after 9999) raises ValueError:
the caller reads that row in the column form.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from typing import Iterable

from nsj_queue_lib.db.queries import TAREFA_COLUMNS, TAREFA_TIMESTAMPS

# Types (regtype text) whose values json_build_array writes in a form json.loads and
# fromisoformat turn into exactly what psycopg2 returns for the column.
JSON_SAFE = frozenset({
    "bigint", "integer", "smallint", "text", "character varying", "character", "boolean",
    "timestamp with time zone", "timestamp without time zone",
})

# The time and offset of PostgreSQL's JSON timestamps: a fraction of 1 to 6 digits (trailing
# zeros dropped) and an offset of hours, minutes and seconds, which fromisoformat before
# Python 3.11 takes only as 3 or 6 digits and +HH:MM[:SS].
_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?"
                        r"(?:([+-]\d\d)(:\d\d)?(:\d\d)?)?")


def json_safe(types: Iterable[tuple]) -> bool:
    """Whether the (column, type) pairs of the queue table give every TAREFA_COLUMNS
    column a JSON_SAFE type."""
    found = dict(types)
    return all(found.get(col) in JSON_SAFE for col in TAREFA_COLUMNS)


def timestamp(text: str) -> _dt.datetime:
    """A timestamp as PostgreSQL writes it in JSON, as psycopg2 would return it."""
    try:
        return _dt.datetime.fromisoformat(text)
    except ValueError:
        pass
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise ValueError(f"timestamp fora do formato ISO: {text!r}")
    when, fraction, hours, minutes, seconds = match.groups()
    offset = f"{hours}{minutes or ':00'}{seconds or ''}" if hours else ""
    return _dt.datetime.fromisoformat(f"{when}.{(fraction or '0').ljust(6, '0')}{offset}")


def tarefa_from_json(text: str) -> dict:
    """The `tarefa` dict of one claimed row's JSON array."""
    tarefa = dict(zip(TAREFA_COLUMNS, json.loads(text)))
    for col in TAREFA_TIMESTAMPS:
        value = tarefa[col]
        if value is not None:
            tarefa[col] = timestamp(value)
    return tarefa
