"""The life of a queue's schema, from one source: the dialect's schema.sql (+ views.sql).

* `render` prints the DDL; every statement is idempotent (IF NOT EXISTS / OR REPLACE),
  so applying it twice is safe.
* `apply` runs that DDL on a connection.
* `verify` compares the queue's objects in the database (tables, columns, defaults,
  storage parameters, indexes, triggers, functions, views, the version stamp) with
  what the current source declares, and lists the differences.
* `upgrade_statements` / `upgrade` bring an existing queue (created by 1.2.2 or by an
  earlier 2.x) to the current version, in place; running them again does nothing.

Nothing here knows the list of objects: the expected side is obtained by applying
the rendered DDL to a scratch schema inside a transaction that is rolled back, and
reading the catalog of both sides with the same queries.  Whatever schema.sql
declares is therefore covered by verify and upgrade.

After editing schema.sql or views.sql, regenerate what derives from them:
``NSJQ_UPDATE_README=1 pytest tests/compat/test_schema_upgrade.py`` (the README's
migration SQL) and the dumps under database/ (``python -m nsj_queue_lib.db_gen``).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import uuid
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Dict, Iterator, List, Optional, Tuple

from nsj_queue_lib.db.dialect import MYSQL, POSTGRES, Dialect
from nsj_queue_lib.db.identifiers import resolve_identifier
from nsj_queue_lib.db.names import object_name
from nsj_queue_lib.db.queries import raw_queries, read_sql

# Bumped when the declared objects change meaning; the stamp also carries a digest of
# the source text, so any edit of schema.sql/views.sql is seen by verify.
SCHEMA_VERSION = 9
VERSION_PREFIX = "nsj_queue_lib schema "
# Indexes the original 1.2.2 db_gen created (idx_<fila>_...): replaced by the
# current ones and dropped by upgrade.
_LEGACY_INDEX = "idx_{fila}_"



def _template(dialect: Dialect) -> str:
    views = (resources.files("nsj_queue_lib.db") / "sql" / "views.sql").read_text("utf-8")
    return read_sql(dialect, "schema.sql") + "\n" + views


def version_stamp(dialect: Dialect) -> str:
    """The text recorded on the queue table (its comment): version + source digest."""
    digest = hashlib.sha256(_template(dialect).encode("utf-8")).hexdigest()[:12]
    return f"{VERSION_PREFIX}{SCHEMA_VERSION} ({digest})"


def parse_stamp(comment: Optional[str]) -> Optional[str]:
    """The version recorded in a table comment, or None (a 1.2.2 table has none)."""
    if comment and comment.startswith(VERSION_PREFIX):
        return comment[len(VERSION_PREFIX):].strip()
    return None


def resolve_names(dialect: Dialect, schema: str, fila: str) -> Tuple[str, str]:
    """schema and fila as the database stores them (PostgreSQL folds unquoted names)."""
    return (resolve_identifier(schema, "schema", dialect.name),
            resolve_identifier(fila, "fila", dialect.name))


def render(dialect: Dialect, schema: str, fila: str) -> str:
    """Idempotent DDL of queue `fila` in `schema` (SQL identifiers: unquoted parts fold
    to lower case on PostgreSQL, quoted ones keep their case)."""
    schema, fila = resolve_names(dialect, schema, fila)
    q = dialect.quote

    def qualified(name: str) -> str:
        return f"{q(schema)}.{q(name)}"

    names = {
        "schema": schema,
        "fila": fila,
        "schema_sql": q(schema),
        "fila_sql": q(fila),
        "fila_literal": fila.replace("'", "''"),
        "table": qualified(fila),
        "table_literal": qualified(fila).replace("'", "''"),
        "sub_table": qualified(object_name(fila, "subscriber")),
        "control_table": qualified(object_name(fila, "controle")),
        "admin_table": qualified(object_name(fila, "rotinas")),
        "endpoint_table": qualified(object_name(fila, "endpoints")),
        "delivery_table": qualified(object_name(fila, "entregas")),
        "schedule_table": qualified(object_name(fila, "agenda")),
        "limit_table": qualified(object_name(fila, "limites")),
        "function": qualified(object_name("notify", fila, "insert")),
        "trigger": q(object_name("trigger_insert", fila)),
        "view_cadeias": qualified(object_name(fila, "cadeias")),
        "view_resumo": qualified(object_name(fila, "resumo")),
        "version_comment": version_stamp(dialect),
    }
    for ix in ("claim", "due", "running", "data_hora", "chain", "equivalent", "publication",
               "live", "sub", "delivery_sub", "delivery_chain", "delivery_data_hora",
               "unique", "ordem"):
        names[f"ix_{ix}"] = q(object_name("ix", fila, ix))
    return _template(dialect).format(**names)


# Kept for callers of 2.0.0.
render_schema = render


def split_statements(sql: str) -> List[str]:
    """Split SQL text into statements on ';' outside quotes, $$ bodies and comments.
    Comment-only fragments are dropped; each statement keeps its leading comments."""
    out: List[str] = []
    buf: List[str] = []
    i, n = 0, len(sql)
    state = ""  # '', "'", '"', '`', '$tag$'
    while i < n:
        ch = sql[i]
        if state:
            if state.startswith("$"):
                if sql.startswith(state, i):
                    buf.append(state)
                    i += len(state)
                    state = ""
                    continue
            elif ch == state:
                state = ""
            buf.append(ch)
            i += 1
            continue
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            buf.append(sql[i:end])
            i = end
            continue
        if ch in ("'", '"', "`"):
            state = ch
        elif ch == "$":
            m = re.match(r"\$[A-Za-z_]*\$", sql[i:])
            if m:
                state = m.group(0)
                buf.append(state)
                i += len(state)
                continue
        elif ch == ";":
            _flush(buf, out)
            buf = []
            i += 1
            continue
        buf.append(ch)
        i += 1
    _flush(buf, out)
    return out


def _flush(buf: List[str], out: List[str]) -> None:
    text = "".join(buf).strip()
    body = "\n".join(ln for ln in text.splitlines() if not ln.strip().startswith("--")).strip()
    if body:
        out.append(text)


def _code(stmt: str) -> str:
    """The statement without its comment lines (for classification)."""
    return "\n".join(ln for ln in stmt.splitlines() if not ln.strip().startswith("--")).strip()


_NAME = r'(?:"[^"]+"|`[^`]+`|[\w$]+)'
_QNAME = rf"(?:{_NAME}\.)?(?P<name>{_NAME})"
_KINDS = (
    ("table", re.compile(rf"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_QNAME}", re.I)),
    ("index", re.compile(rf"CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:CONCURRENTLY\s+)?"
                         rf"(?:IF\s+NOT\s+EXISTS\s+)?{_QNAME}\s+ON", re.I)),
    ("function", re.compile(rf"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+{_QNAME}\s*\(", re.I)),
    ("trigger", re.compile(rf"CREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER\s+{_QNAME}", re.I)),
    ("view", re.compile(rf"CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+{_QNAME}", re.I)),
    ("comment", re.compile(rf"COMMENT\s+ON\s+TABLE\s+{_QNAME}", re.I)),
    ("table_alter", re.compile(rf"ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?{_QNAME}",
                               re.I)),
    # Rows a new queue starts with: never written by upgrade (an existing queue has its own).
    ("seed", re.compile(rf"INSERT\s+INTO\s+{_QNAME}", re.I)),
)


def classify(stmt: str) -> Tuple[str, str]:
    """(kind, object name) of a DDL statement; kind 'other' when not recognised."""
    code = _code(stmt)
    for kind, rx in _KINDS:
        m = rx.match(code)
        if m:
            name = m.group("name")
            if name[0] in ('"', "`"):
                name = name[1:-1]
            return kind, name
    return "other", ""


@dataclass(frozen=True)
class Difference:
    """One object that differs from the current version."""

    kind: str  # table, column, index, trigger, function, view, options, version
    name: str
    problem: str  # "ausente", "diferente", "inválido", "obsoleto"
    expected: Optional[str] = None
    actual: Optional[str] = None

    def __str__(self) -> str:
        text = f"{self.kind} {self.name}: {self.problem}"
        if self.problem == "diferente":
            text += f" (esperado: {self.expected}; encontrado: {self.actual})"
        return text


@dataclass
class VerifyResult:
    """Outcome of `verify`: `ok` when nothing differs; `notes` never make it fail."""

    schema: str
    fila: str
    version: Optional[str]  # version recorded in the database (None: 1.2.2 or unknown)
    differences: List[Difference] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


# -- catalog snapshots (PostgreSQL) ----------------------------------------------------

@dataclass
class _Snapshot:
    relations: Dict[str, dict] = field(default_factory=dict)
    columns: Dict[str, Dict[str, dict]] = field(default_factory=dict)
    indexes: Dict[str, dict] = field(default_factory=dict)
    triggers: Dict[str, dict] = field(default_factory=dict)
    functions: Dict[str, str] = field(default_factory=dict)
    views: Dict[str, str] = field(default_factory=dict)


def _rows(cur: Any, sql: str, params: dict) -> List[dict]:
    cur.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _snapshot(cur: Any, schema: str, names: Optional[List[str]],
              functions: Optional[List[str]]) -> _Snapshot:
    """Catalog of `schema` (all of it when names is None), with the schema name replaced
    by '{schema}' so that two schemas compare equal."""
    sql = raw_queries(POSTGRES, "catalog.sql")
    cur.execute(sql["catalog_quote_ident"], {"name": schema})
    prefix = cur.fetchone()[0] + "."

    def norm(text: Optional[str]) -> Any:  # str, or None for None
        return None if text is None else text.replace(prefix, "{schema}.")

    snap = _Snapshot()
    every = names is None
    for r in _rows(cur, sql["catalog_relations"],
                   {"schema": schema, "all": every, "names": names or []}):
        snap.relations[r["name"]] = {"kind": r["kind"], "options": sorted(r["options"] or []),
                                     "comment": r["comment"]}
    tables = [n for n, r in snap.relations.items() if r["kind"] in ("r", "p")]
    for r in _rows(cur, sql["catalog_columns"], {"schema": schema, "names": tables}):
        snap.columns.setdefault(r["table_name"], {})[r["name"]] = {
            "type": r["type"], "not_null": r["not_null"], "default": norm(r["default_expr"])}
    for r in _rows(cur, sql["catalog_indexes"], {"schema": schema, "names": tables}):
        definition = norm(r["definition"]).replace(f"INDEX {r['name']} ON", "INDEX ON", 1)
        snap.indexes[r["name"]] = {"table": r["table_name"], "definition": definition,
                                   "valid": r["valid"], "primary": r["is_primary"]}
    for r in _rows(cur, sql["catalog_triggers"], {"schema": schema, "names": tables}):
        snap.triggers[r["name"]] = {"table": r["table_name"], "definition": norm(r["definition"])}
    for r in _rows(cur, sql["catalog_functions"],
                   {"schema": schema, "all": functions is None, "names": functions or []}):
        snap.functions[r["name"]] = norm(r["definition"])
    views = [n for n, r in snap.relations.items() if r["kind"] in ("v", "m")]
    for r in _rows(cur, sql["catalog_views"], {"schema": schema, "names": views}):
        snap.views[r["name"]] = norm(r["definition"])
    return snap


@contextlib.contextmanager
def _autocommit(conn: Any) -> Iterator[Any]:
    raw = getattr(conn, "conn", conn)
    if not isinstance(getattr(type(raw), "autocommit", None), property) and callable(
            getattr(raw, "autocommit", None)):  # pymysql: DDL commits implicitly anyway
        yield raw
        return
    previous = raw.autocommit
    if not previous:
        raw.rollback()  # the connection must not hold an open transaction of the caller
        raw.autocommit = True
    try:
        yield raw
    finally:
        if not previous:
            raw.autocommit = False


def _expected(raw: Any, dialect: Dialect, fila: str) -> Tuple[_Snapshot, str]:
    """Apply the rendered DDL to a scratch schema in a rolled-back transaction."""
    scratch = f"nsjq_verify_{uuid.uuid4().hex[:10]}"
    with contextlib.closing(raw.cursor()) as cur:
        cur.execute("BEGIN")
        try:
            cur.execute(f"CREATE SCHEMA {scratch}")
            for stmt in split_statements(render(dialect, scratch, _quoted(dialect, fila))):
                cur.execute(stmt)
            cur.execute("SET LOCAL search_path = ''")
            snap = _snapshot(cur, scratch, None, None)
        finally:
            cur.execute("ROLLBACK")
    return snap, scratch


def _quoted(dialect: Dialect, name: str) -> str:
    """A resolved name written so that resolve_identifier gives it back unchanged."""
    return dialect.quote(name)


def _actual(raw: Any, schema: str, expected: _Snapshot) -> _Snapshot:
    with contextlib.closing(raw.cursor()) as cur:
        cur.execute("BEGIN")
        try:
            cur.execute("SET LOCAL search_path = ''")
            return _snapshot(cur, schema, list(expected.relations), list(expected.functions))
        finally:
            cur.execute("ROLLBACK")


def _mysql_snapshot(cur: Any, schema: str, names: Optional[List[str]]) -> _Snapshot:
    """MySQL/MariaDB catalog of database `schema` (index names as 'table.index')."""
    sql = raw_queries(MYSQL, "catalog.sql")
    prefix = f"`{schema}`."

    def norm(text: Optional[str]) -> Any:  # str, or None for None
        return None if text is None else text.replace(prefix, "{schema}.")

    snap = _Snapshot()
    for r in _rows(cur, sql["catalog_tables"], {"schema": schema}):
        if names is not None and r["name"] not in names:
            continue
        kind = "v" if "VIEW" in str(r["kind"]).upper() else "r"
        snap.relations[r["name"]] = {"kind": kind, "options": [],
                                     "comment": (r["comment"] or None) if kind == "r" else None}
    tables = [n for n, r in snap.relations.items() if r["kind"] == "r"]
    for r in _rows(cur, sql["catalog_columns"], {"schema": schema}):
        if r["table_name"] not in tables:
            continue
        default = r["default_expr"]
        if default is not None and str(default).upper() == "NULL":
            default = None
        type_ = str(r["type"])
        if r.get("generated"):  # a generated column: its expression is part of its type
            type_ += f" AS ({r['generated']}) STORED"
            default = None
        snap.columns.setdefault(r["table_name"], {})[r["name"]] = {
            "type": type_, "not_null": r["is_nullable"] == "NO",
            "default": None if default is None else str(default)}
    parts: Dict[str, List[str]] = {}
    meta: Dict[str, dict] = {}
    for r in _rows(cur, sql["catalog_indexes"], {"schema": schema}):
        if r["table_name"] not in tables:
            continue
        key = f"{r['table_name']}.{r['name']}"
        col = f"`{r['column_name']}`" + (f"({r['sub_part']})" if r["sub_part"] else "")
        parts.setdefault(key, []).append(col + (" DESC" if r["collation"] == "D" else ""))
        meta[key] = {"table": r["table_name"], "unique": not int(r["non_unique"]),
                     "primary": r["name"] == "PRIMARY"}
    for key, cols in parts.items():
        m = meta[key]
        definition = ("UNIQUE " if m["unique"] and not m["primary"] else "") + \
            f"INDEX ({', '.join(cols)})"
        snap.indexes[key] = {"table": m["table"], "definition": definition, "valid": True,
                             "primary": m["primary"]}
    for r in _rows(cur, sql["catalog_views"], {"schema": schema}):
        if r["name"] in snap.relations:
            snap.views[r["name"]] = norm(r["definition"])
    return snap


def _mysql_inspect(conn: Any, schema: str, fila: str) -> Tuple[_Snapshot, _Snapshot]:
    raw = getattr(conn, "conn", conn)
    scratch = f"nsjq_verify_{uuid.uuid4().hex[:10]}"
    with contextlib.closing(raw.cursor()) as cur:
        try:
            for stmt in split_statements(render(MYSQL, _quoted(MYSQL, scratch),
                                                _quoted(MYSQL, fila))):
                cur.execute(stmt)
            expected = _mysql_snapshot(cur, scratch, None)
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS `{scratch}`")
        actual = _mysql_snapshot(cur, schema, list(expected.relations))
    return expected, actual


def _compare(exp: _Snapshot, act: _Snapshot, fila: str) -> Tuple[List[Difference], List[str]]:
    diffs: List[Difference] = []
    notes: List[str] = []
    for name, rel in exp.relations.items():
        kind = "table" if rel["kind"] in ("r", "p") else "view"
        got = act.relations.get(name)
        if got is None:
            diffs.append(Difference(kind, name, "ausente"))
            continue
        if kind == "table":
            if rel["options"] != got["options"]:
                diffs.append(Difference("options", name, "diferente",
                                        ", ".join(rel["options"]) or "(nenhum)",
                                        ", ".join(got["options"]) or "(nenhum)"))
            if rel["comment"] != got["comment"]:
                diffs.append(Difference("version", name, "diferente", rel["comment"],
                                        got["comment"]))
            exp_cols, act_cols = exp.columns.get(name, {}), act.columns.get(name, {})
            for col, spec in exp_cols.items():
                have = act_cols.get(col)
                if have is None:
                    diffs.append(Difference("column", f"{name}.{col}", "ausente"))
                elif have != spec:
                    diffs.append(Difference("column", f"{name}.{col}", "diferente",
                                            _col_text(spec), _col_text(have)))
            for col in act_cols.keys() - exp_cols.keys():
                notes.append(f"coluna {name}.{col} não é declarada pela versão atual (mantida)")
    for name, ix in exp.indexes.items():
        got = act.indexes.get(name)
        if got is None:
            diffs.append(Difference("index", name, "ausente"))
        elif got["definition"] != ix["definition"]:
            diffs.append(Difference("index", name, "diferente", ix["definition"],
                                    got["definition"]))
        elif not got["valid"]:
            diffs.append(Difference("index", name, "inválido"))
    legacy = _LEGACY_INDEX.format(fila=fila)
    for name, ix in sorted(act.indexes.items()):  # catalog order varies: keep output stable
        if name in exp.indexes:
            continue
        if name.startswith(legacy):
            diffs.append(Difference("index", name, "obsoleto", None, ix["definition"]))
        else:
            notes.append(f"índice {name} não é declarado pela versão atual (mantido)")
    for label, exp_map, act_map in (("trigger", exp.triggers, act.triggers),
                                    ("function", exp.functions, act.functions),
                                    ("view", exp.views, act.views)):
        definition: Any  # a trigger's dict, or a function's or view's text
        for name, definition in exp_map.items():
            found: Any = act_map.get(name)
            if label == "trigger":
                definition = definition["definition"]
                found = found and found["definition"]
            if found is None:
                if label != "view" or name in act.relations:
                    diffs.append(Difference(label, name, "ausente"))
            elif found != definition:
                diffs.append(Difference(label, name, "diferente", str(definition), str(found)))
        if label == "trigger":
            for name in act_map.keys() - exp_map.keys():
                notes.append(f"trigger {name} não é declarada pela versão atual (mantida)")
    return diffs, notes


def _col_text(spec: dict) -> str:
    text = spec["type"]
    if spec["default"] is not None:
        text += f" DEFAULT {spec['default']}"
    return text + (" NOT NULL" if spec["not_null"] else "")


def _inspect(conn: Any, dialect: Dialect, schema: str, fila: str
             ) -> Tuple[_Snapshot, _Snapshot, str, str]:
    schema, fila = resolve_names(dialect, schema, fila)
    # (a dialect branch kept in db/: each database's catalog is read by its own code)
    if dialect is MYSQL:
        expected, actual = _mysql_inspect(conn, schema, fila)
        return expected, actual, schema, fila
    with _autocommit(conn) as raw:
        expected, _ = _expected(raw, dialect, fila)
        actual = _actual(raw, schema, expected)
    return expected, actual, schema, fila


def verify(conn: Any, dialect: Dialect, schema: str, fila: str) -> VerifyResult:
    """Compare queue `fila` in `schema` with the current version; `.ok` when equal.

    `conn` is a DB-API connection (psycopg2) outside a transaction; nothing is
    changed in the database.
    """
    expected, actual, schema_r, fila_r = _inspect(conn, dialect, schema, fila)
    diffs, notes = _compare(expected, actual, fila_r)
    table = actual.relations.get(fila_r)
    version = parse_stamp(table["comment"]) if table else None
    return VerifyResult(schema_r, fila_r, version, diffs, notes)


def upgrade_statements(conn: Any, dialect: Dialect, schema: str, fila: str) -> List[str]:
    """The statements that bring queue `fila` in `schema` to the current version
    (empty when it already is).  Each one runs on its own, outside a transaction
    (indexes are built CONCURRENTLY, so workers and producers keep running)."""
    expected, actual, schema_r, fila_r = _inspect(conn, dialect, schema, fila)
    diffs, _ = _compare(expected, actual, fila_r)
    if not diffs:
        return []
    # (a dialect branch kept in db/: MySQL's upgrade is ALTER TABLE of its own DDL, see
    # _mysql_upgrade; PostgreSQL's below builds indexes CONCURRENTLY)
    if dialect is MYSQL:
        return _mysql_upgrade(diffs, expected, actual, schema_r, fila_r)
    q = dialect.quote
    changed = {(d.kind, d.name.split(".")[0]) for d in diffs}
    out: List[str] = []
    for d in diffs:
        if d.kind == "index" and d.problem == "obsoleto":
            out.append(f"DROP INDEX CONCURRENTLY IF EXISTS {q(schema_r)}.{q(d.name)}")
    stamps: List[str] = []
    for kind, name, code in _source(dialect, schema_r, fila_r):
        if kind == "table":
            if ("table", name) in changed:
                out.append(code)
            else:
                out.extend(_alter_table(diffs, expected, schema_r, name, q))
        elif kind == "index":
            if ("index", name) in changed:
                if name in actual.indexes:
                    out.append(f"DROP INDEX CONCURRENTLY IF EXISTS {q(schema_r)}.{q(name)}")
                out.append(re.sub(r"^CREATE\s+(UNIQUE\s+)?INDEX\s+(?!CONCURRENTLY)",
                                  lambda m: f"CREATE {m.group(1) or ''}INDEX CONCURRENTLY ",
                                  code, flags=re.I))
        elif kind in ("function", "trigger", "view"):
            if (kind, name) in changed:
                out.append(code)
        elif kind == "comment":
            if ("version", name) in changed or ("table", name) in changed:
                stamps.append(code)
        elif kind == "table_alter":
            if ("options", name) in changed or ("table", name) in changed:
                out.append(code)
        elif kind == "seed":
            continue
        else:
            out.append(code)  # unknown kinds are idempotent by contract: always re-run
    # The version is recorded last: only once everything else went through.
    return out + stamps


def _source(dialect: Dialect, schema: str, fila: str) -> Iterator[Tuple[str, str, str]]:
    """(kind, name, code) of each statement of the queue's DDL for resolved names."""
    for stmt in split_statements(render(dialect, _quoted(dialect, schema), _quoted(dialect, fila))):
        kind, name = classify(stmt)
        yield kind, name, _code(stmt)


def _mysql_upgrade(diffs: List[Difference], expected: _Snapshot, actual: _Snapshot,
                   schema: str, fila: str) -> List[str]:
    """MySQL: missing tables and views from the source; per existing table one ALTER TABLE
    with its column and index changes; the version comment last."""
    q = MYSQL.quote
    changed = {(d.kind, d.name) for d in diffs}
    out: List[str] = []
    stamps: List[str] = []
    for kind, name, code in _source(MYSQL, schema, fila):
        if kind == "table":
            if ("table", name) in changed:
                out.append(code)
                continue
            actions: List[str] = []
            for col, spec in expected.columns.get(name, {}).items():
                problem = next((d.problem for d in diffs if d.kind == "column"
                                and d.name == f"{name}.{col}"), None)
                if problem is None:
                    continue
                text = f"{q(col)} {spec['type']}"
                if " AS (" not in spec["type"]:  # (a generated column takes neither)
                    text += " NOT NULL" if spec["not_null"] else " NULL"
                if spec["default"] is not None:
                    text += f" DEFAULT {spec['default']}"
                actions.append(("ADD COLUMN " if problem == "ausente" else "MODIFY COLUMN ")
                               + text)
            for key, ix in expected.indexes.items():
                if ix["table"] != name or ix["primary"]:
                    continue
                if ("index", key) in changed:
                    index = key.split(".", 1)[1]
                    if key in actual.indexes:
                        actions.append(f"DROP INDEX {q(index)}")
                    unique, _, cols = ix["definition"].rpartition("INDEX ")
                    actions.append(f"ADD {unique}INDEX {q(index)} {cols}")
            if actions:
                out.append(f"ALTER TABLE {q(schema)}.{q(name)}\n    "
                           + ",\n    ".join(actions))
        elif kind == "view":
            if ("view", name) in changed:
                out.append(code)
        elif kind == "table_alter" and "COMMENT" in code.upper():
            if ("version", name) in changed or ("table", name) in changed:
                stamps.append(code)
        elif kind == "other" and code.upper().startswith("CREATE DATABASE"):
            continue
        else:
            out.append(code)
    return out + stamps


def _alter_table(diffs: List[Difference], expected: _Snapshot, schema: str, table: str,
                 q: Any) -> List[str]:
    """One UPDATE (NULLs of columns becoming NOT NULL) and one ALTER TABLE with every
    column change of `table`: one lock and at most one rewrite/scan."""
    target = f"{q(schema)}.{q(table)}"
    out: List[str] = []
    actions: List[str] = []
    fills: List[Tuple[str, str]] = []
    cols = expected.columns.get(table, {})
    for d in diffs:
        if d.kind == "options" and d.name == table:
            opts = expected.relations[table]["options"]
            present = [] if d.actual == "(nenhum)" else (d.actual or "").split(", ")
            extra = sorted({o.split("=")[0] for o in present} - {o.split("=")[0] for o in opts})
            if extra:
                actions.append(f"RESET ({', '.join(extra)})")
            if opts:
                actions.append(f"SET ({', '.join(opts)})")
        if d.kind != "column" or not d.name.startswith(table + "."):
            continue
        col = d.name[len(table) + 1:]
        spec = cols[col]
        default = (spec["default"] or "").replace("{schema}.", f"{q(schema)}.") or None
        if d.problem == "ausente":
            text = f"ADD COLUMN IF NOT EXISTS {q(col)} {spec['type']}"
            if default:
                text += f" DEFAULT {default}"
            if spec["not_null"]:
                text += " NOT NULL"
            actions.append(text)
            continue
        have = _parse_col(d.actual or "")
        if have["type"] != spec["type"]:
            using = (f"convert_from({q(col)}, 'UTF8')" if have["type"] == "bytea"
                     else f"{q(col)}::{spec['type']}")
            actions.append(f"ALTER COLUMN {q(col)} TYPE {spec['type']} USING {using}")
        if have["default"] != spec["default"]:
            actions.append(f"ALTER COLUMN {q(col)} "
                           + (f"SET DEFAULT {default}" if default else "DROP DEFAULT"))
        if have["not_null"] != spec["not_null"]:
            if spec["not_null"]:
                if default:
                    fills.append((col, default))
                actions.append(f"ALTER COLUMN {q(col)} SET NOT NULL")
            else:
                actions.append(f"ALTER COLUMN {q(col)} DROP NOT NULL")
    if fills:
        sets = ", ".join(f"{q(c)} = coalesce({q(c)}, {dflt})" for c, dflt in fills)
        where = " OR ".join(f"{q(c)} IS NULL" for c, _ in fills)
        out.append(f"UPDATE {target} SET {sets} WHERE {where}")
    if actions:
        # ALTER TABLE waits for an exclusive lock and every statement on the table queues
        # behind it: give up after 10 s (run again later) instead of stalling the queue.
        # The CONCURRENTLY index builds take no such lock and may wait as long as needed.
        # SET LOCAL in a transaction of its own: nothing is left on the session, so the
        # upgrade also runs through a transaction pooler (DB_POOL_MODE=transaction).
        out.append("BEGIN")
        out.append("SET LOCAL lock_timeout = '10s'")
        out.append(f"ALTER TABLE {target}\n    " + ",\n    ".join(actions))
        out.append("COMMIT")
    return out


def _parse_col(text: str) -> dict:
    not_null = text.endswith(" NOT NULL")
    if not_null:
        text = text[: -len(" NOT NULL")]
    type_, _, default = text.partition(" DEFAULT ")
    return {"type": type_, "default": default or None, "not_null": not_null}


def apply_statements(conn: Any, statements: List[str]) -> None:
    """Run statements one by one in autocommit (as CREATE INDEX CONCURRENTLY needs)."""
    with _autocommit(conn) as raw, contextlib.closing(raw.cursor()) as cur:
        for stmt in statements:
            cur.execute(stmt)


def apply(conn: Any, dialect: Dialect, schema: str, fila: str) -> None:
    """Create the queue's objects that do not exist yet (the idempotent DDL of `render`)."""
    stmts = split_statements(render(dialect, schema, fila))
    # (a dialect branch kept in db/: PostgreSQL's DDL runs in autocommit, below)
    if dialect is MYSQL:
        apply_statements(conn, stmts)
        return
    with _autocommit(conn) as raw, contextlib.closing(raw.cursor()) as cur:
        cur.execute("BEGIN")
        try:
            for stmt in stmts:
                cur.execute(stmt)
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")


def upgrade(conn: Any, dialect: Dialect, schema: str, fila: str) -> List[str]:
    """Bring the queue to the current version in place; return what was run."""
    stmts = upgrade_statements(conn, dialect, schema, fila)
    apply_statements(conn, stmts)
    return stmts


def format_statements(statements: List[str]) -> str:
    """Statements as a script (one per paragraph, ';'-terminated)."""
    return "".join(f"{s};\n" for s in statements)


__all__ = [
    "SCHEMA_VERSION",
    "Difference",
    "VerifyResult",
    "apply",
    "apply_statements",
    "classify",
    "format_statements",
    "object_name",
    "parse_stamp",
    "render",
    "render_schema",
    "resolve_names",
    "split_statements",
    "upgrade",
    "upgrade_statements",
    "verify",
    "version_stamp",
]
