"""Ratchet: the places that branch on a dialect's name.

db/dialect.py promises named capabilities instead of scattered ifs, so the runtime,
batch, maintenance and admin code depend on the dialect object's attributes (or on a
per-dialect session/repository class), never on whether it is "postgres" or "mysql".
The source is read with ast; a site is a comparison (==, !=, in, not in, is, is not)
where one side is
- an attribute `.name` of something called dialect (`dialect.name`, `self.dialect.name`,
  `session.dialect.name`) or a variable named `dialect`/`dialect_name`, or
- a dialect name as a string ("postgres", "mysql"; "POSTGRES", "MYSQL":
  the DB_DRIVER values) or a dialect constant (POSTGRES, MYSQL).
KNOWN lists today's sites per file; the test fails when one appears (use a capability of
Dialect instead) or goes (remove it from KNOWN: the list only shrinks).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Dict

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nsj_queue_lib"

DIALECT_STRINGS = {"postgres", "mysql", "POSTGRES", "MYSQL"}
DIALECT_CONSTANTS = {"POSTGRES", "MYSQL"}

# Sites per file (path relative to the package).  Only shrinks.
KNOWN: Dict[str, int] = {
    # what picks the dialect object from DB_DRIVER
    "db/dialect.py": 1,
    # each database's catalog inspection, upgrade and DDL application (commented there)
    "db/schema.py": 3,
}


def _dialectish(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in DIALECT_STRINGS
    if isinstance(node, ast.Name):
        return node.id in DIALECT_CONSTANTS or node.id in ("dialect", "dialect_name")
    if isinstance(node, ast.Attribute):
        if node.attr in DIALECT_CONSTANTS:
            return True
        if node.attr == "name":
            owner = node.value
            name = (owner.attr if isinstance(owner, ast.Attribute)
                    else owner.id if isinstance(owner, ast.Name) else "")
            return "dialect" in name.lower()
        return node.attr in ("dialect", "dialect_name")
    return False


def _sites(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            if any(_dialectish(side) for side in [node.left, *node.comparators]):
                count += 1
    return count


def dialect_name_sites() -> Dict[str, int]:
    found: Counter = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        n = _sites(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if n:
            found[path.relative_to(PACKAGE).as_posix()] = n
    return dict(found)


def test_no_new_dialect_name_comparison() -> None:
    found = dialect_name_sites()
    grown = {f: (n, KNOWN.get(f, 0)) for f, n in found.items() if n > KNOWN.get(f, 0)}
    assert not grown, (
        "new comparisons with a dialect name (found, allowed); use a capability of "
        f"db/dialect.py's Dialect instead: {grown}")


def test_known_list_only_shrinks() -> None:
    found = dialect_name_sites()
    gone = {f: (found.get(f, 0), n) for f, n in KNOWN.items() if found.get(f, 0) < n}
    assert not gone, f"sites removed (found, listed): lower KNOWN to match: {gone}"


def test_detector_sees_the_forms() -> None:
    src = ('a = d.dialect.name == "postgres"\nb = dialect is MYSQL\n'
           'c = self.dialect.name != "mysql"\nd = x.name == "other"\ne = mode == "postgres"\n')
    assert _sites(ast.parse(src)) == 5 - 1


def test_what_remains_is_inside_db():
    """The runtime, batch, maintenance, admin and tools use capabilities only."""
    assert all(path.startswith("db/") for path in KNOWN)


def test_a_session_is_made_as_its_dialect_class():
    """DbSession(conn, dialect) is the dialect's session class (no method branches on
    the dialect); neither constructor talks to the connection."""
    from dataclasses import fields

    from nsj_queue_lib.db.dialect import MYSQL, POSTGRES
    from nsj_queue_lib.db.session import DbSession, MysqlSession, PostgresSession

    pg, my = DbSession(object(), POSTGRES), DbSession(object(), MYSQL)
    assert type(pg) is PostgresSession and type(my) is MysqlSession
    assert isinstance(pg, DbSession) and isinstance(my, DbSession)
    assert pg.dialect is POSTGRES and my.dialect is MYSQL
    assert (pg._keep, my._keep) == (True, False)
    assert my.prepared_text("x", {}) is None and pg.prepared_text("x", {}) is None
    # every capability is a named flag, set on both dialects
    flags = [f.name for f in fields(POSTGRES) if f.type in (bool, "bool")]
    assert len(flags) >= 10
    assert all(isinstance(getattr(d, f), bool) for d in (POSTGRES, MYSQL) for f in flags)
