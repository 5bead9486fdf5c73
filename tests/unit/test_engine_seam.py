"""Ratchets of the engine seam: driver error codes stay in db/ and engine/, and the
runtime and the public API reach a backend only through the engine protocol.

The engine seam keeps driver knowledge in the backends: db/ (the driver helpers, the
per-dialect error mapping) and engine/ (one package per backend).  Everything else asks
what an error means (a fault class), never which SQLSTATE, MySQL error number or driver
exception class it is.  The source is read with ast; a site is
- an attribute `.pgcode`, `.pgerror`, `.sqlstate` or `.diag`, or `getattr(x, "pgcode")`
  (any of those names, or "errno", as a string);
- a call of the MySQL driver helpers `error_code(...)` / `error_classes(...)`;
- a driver exception class other than the base `Error` (`psycopg2.ProgrammingError`,
  `pymysql.err.OperationalError`, `MySQLdb.IntegrityError`...);
- the drivers' error-code modules (`psycopg2.errors`, `psycopg2.errorcodes`,
  `pymysql.constants.ER`, `pymysql.err`), imported or reached as attributes.
KNOWN lists today's sites per file (path relative to the package); the test fails when
one appears (classify the error in db/ or engine/ instead) or goes (lower KNOWN: the
list only shrinks).

The runtime, pub/sub, the periodic tasks and the public API (worker classes, QueueClient,
QueueAdmin) import engine.base, engine.select, engine.keys and engine.fleet_mode, never
a backend's package (engine.postgres, engine.mysql, engine.socket, engine.pooled):
KNOWN_BACKEND_IMPORTS lists today's exceptions, and only shrinks.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Dict, Set, Tuple

from tests.unit.test_import_layers import import_graph

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nsj_queue_lib"

# Where driver knowledge belongs.
OWNERS = ("db/", "engine/")

CODE_ATTRIBUTES = {"pgcode", "pgerror", "sqlstate", "diag"}
CODE_STRINGS = CODE_ATTRIBUTES | {"errno"}
HELPERS = {"error_code", "error_classes"}
DRIVERS = {"psycopg2", "pymysql", "MySQLdb", "mysql"}
CODE_MODULES = {"errors", "errorcodes", "ER", "err", "constants"}

# Sites per file.  Only shrinks.
KNOWN: Dict[str, int] = {}


def _root_name(node: ast.AST) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _sites(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in CODE_ATTRIBUTES:
                count += 1
            elif _root_name(node) in DRIVERS and (
                    node.attr in CODE_MODULES
                    or (node.attr.endswith("Error") and node.attr != "Error")):
                count += 1
        elif isinstance(node, ast.Call):
            func = node.func
            name = (func.id if isinstance(func, ast.Name)
                    else func.attr if isinstance(func, ast.Attribute) else "")
            if name in HELPERS:
                count += 1
            elif (name == "getattr" and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant)
                  and node.args[1].value in CODE_STRINGS):
                count += 1
        elif isinstance(node, ast.Import):
            count += sum(1 for a in node.names if a.name.split(".")[0] in DRIVERS
                         and set(a.name.split(".")[1:]) & CODE_MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            parts = node.module.split(".")
            if parts[0] in DRIVERS:
                if set(parts[1:]) & CODE_MODULES:
                    count += 1
                else:
                    count += sum(1 for a in node.names if a.name in CODE_MODULES
                                 or (a.name.endswith("Error") and a.name != "Error"))
    return count


def driver_code_sites() -> Dict[str, int]:
    found: Counter = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(OWNERS):
            continue
        n = _sites(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if n:
            found[rel] = n
    return dict(found)


def test_no_new_driver_error_code_test() -> None:
    found = driver_code_sites()
    grown = {f: (n, KNOWN.get(f, 0)) for f, n in found.items() if n > KNOWN.get(f, 0)}
    assert not grown, (
        "new tests of a driver's error code outside db/ and engine/ (found, allowed); "
        f"classify the error there instead: {grown}")


def test_known_list_only_shrinks() -> None:
    found = driver_code_sites()
    gone = {f: (found.get(f, 0), n) for f, n in KNOWN.items() if found.get(f, 0) < n}
    assert not gone, f"sites removed (found, listed): lower KNOWN to match: {gone}"


def test_detector_sees_the_forms() -> None:
    src = "\n".join([
        'a = getattr(exc, "pgcode", None) == "42P01"',        # 1
        "b = exc.pgcode",                                       # 2
        "c = error_code(exc) in (1146, 1054)",                 # 3
        'd = isinstance(exc, error_classes("OperationalError"))',  # 4
        "e = psycopg2.ProgrammingError",                       # 5
        "f = psycopg2.errors.UndefinedTable",                  # 6
        "from psycopg2 import errors",                          # 7
        "from pymysql.constants import ER",                     # 8
        "import psycopg2.errorcodes",                           # 9
        "g = psycopg2.Error",                                   # not a site: any driver error
        "h = exc.errno",                                        # not a site: OSError's too
        'i = getattr(exc, "pgcode_like", None)',               # not a site
    ])
    assert _sites(ast.parse(src)) == 9


BACKEND_PACKAGES = ("nsj_queue_lib.engine.postgres", "nsj_queue_lib.engine.mysql",
                    "nsj_queue_lib.engine.socket", "nsj_queue_lib.engine.pooled")
PROTOCOL_ONLY = ("runtime", "pubsub", "scheduling", "admin", "worker_base",
                 "worker_pub_sub_base", "worker_webhook", "queue_client")

# (importer, backend module).  Only shrinks.
KNOWN_BACKEND_IMPORTS: Set[Tuple[str, str]] = {
    # the process-wide listener (QUEUE_CONCURRENCY) waits in PostgreSQL's listener turn
    ("nsj_queue_lib.runtime.concurrency", "nsj_queue_lib.engine.postgres.listener_turn"),
    # QueueAdmin wakes the workers of a client/server queue through the server
    ("nsj_queue_lib.admin", "nsj_queue_lib.engine.socket.notifier"),
}


def backend_imports() -> Set[Tuple[str, str]]:
    found = set()
    for module, deps in import_graph().items():
        top = module.split(".")[1] if "." in module else ""
        if top not in PROTOCOL_ONLY:
            continue
        found.update((module, d) for d in deps
                     if d.startswith(BACKEND_PACKAGES) and d not in BACKEND_PACKAGES)
    return found


def test_runtime_and_api_reach_backends_only_through_the_protocol() -> None:
    found = backend_imports()
    new = sorted(found - KNOWN_BACKEND_IMPORTS)
    gone = sorted(KNOWN_BACKEND_IMPORTS - found)
    assert not new, f"imports of a backend's package (use the engine protocol): {new}"
    assert not gone, f"remove from KNOWN_BACKEND_IMPORTS (no longer imported): {gone}"
