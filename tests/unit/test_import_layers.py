"""The package's import graph: no cycles, and layers that only import downwards.

The graph is read from the source (ast), so it counts what `import` would run:
imports at module level and inside functions, and the package `__init__` that importing
`pkg.mod` runs first.  Two things are not edges:
- imports under `if TYPE_CHECKING:`, which never run (they give the type checker
  names; a layer may name a type of a layer above it without importing it);
- the `__init__` of a package seen from its own submodules (always imported first).

Layers, top to bottom (a module may import its own layer and the layers below):
entry points and operator tools > public API > runtime > engine (one package per backend) > db
> settings > foundation.  KNOWN_UPWARD lists today's exceptions, like import-linter's
`ignore_imports`; the engine-seam work removes them, and this test fails when one is
gone (so the list only shrinks) or a new one appears.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "nsj_queue_lib"

# Names per layer, top first: the first component after nsj_queue_lib., or for a
# package that spans layers (observability, compat) its "package.module".
LAYERS: List[Set[str]] = [
    {"cli", "dashboard", "status", "health", "server", "client", "db_gen", "__main__",
     "worker_fila_teste", "worker_pub_sub_teste",
     "observability.status", "observability.health", "observability.metrics",
     "observability.loki", "observability.logging_setup", "multidb"},
    {"worker_base", "worker_pub_sub_base", "worker_webhook", "queue_client", "admin",
     "compat.coexistence"},
    {"runtime", "pubsub"},
    # periodic tasks: run by the runtime (a job) and managed by admin; above db only
    {"scheduling"},
    {"engine"},
    {"db"},
    {"config", "settings"},
    {"exceptions", "text", "version", "task_input", "observability", "compat",
     "compat.removed",
     "observability.logsafe", "observability.observe", "observability.logfields",
     "observability.http_guard", "backoff", "interrupt"},
]

# Upward imports that exist today (importer, imported).  Remove a line when its import
# goes; never add one without saying why in the commit.
KNOWN_UPWARD = {
    # config validates names with the db's identifier rules
    ("nsj_queue_lib.config", "nsj_queue_lib.db"),
    ("nsj_queue_lib.config", "nsj_queue_lib.db.identifiers"),
    ("nsj_queue_lib.config", "nsj_queue_lib.db.names"),
    # the supervisor wires
    # observability and the 1.2.2 watch
    ("nsj_queue_lib.runtime.router", "nsj_queue_lib.multidb"),
    ("nsj_queue_lib.runtime.supervisor", "nsj_queue_lib.compat.coexistence"),
    ("nsj_queue_lib.runtime.supervisor", "nsj_queue_lib.observability.health"),
    ("nsj_queue_lib.runtime.supervisor", "nsj_queue_lib.observability.logging_setup"),
    ("nsj_queue_lib.runtime.supervisor", "nsj_queue_lib.observability.metrics"),
    # WorkerBase.main parses the command line
    ("nsj_queue_lib.worker_base", "nsj_queue_lib.cli"),
    ("nsj_queue_lib.worker_base", "nsj_queue_lib.cli.worker_args"),
}


def _modules() -> Dict[str, Path]:
    found = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> Set[int]:
    skipped: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def import_graph() -> Dict[str, Set[str]]:
    """module -> the package modules importing it runs (see the module docstring)."""
    modules = _modules()

    def nearest(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: Dict[str, Set[str]] = defaultdict(set)
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".")[: None if is_package else -1]
                    base = base[: len(base) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                subs = [f"{source}.{a.name}" for a in node.names
                        if f"{source}.{a.name}" in modules]
                # `from pkg import submodule` runs pkg's __init__, then the submodule.
                targets = [*subs, source]
            for target in targets:
                if not target.startswith(PACKAGE):
                    continue
                found = nearest(target)
                parts = found.split(".")
                chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
                for step in chain:
                    own_parent = module == step or module.startswith(step + ".")
                    if step in modules and step != module and not own_parent:
                        graph[module].add(step)
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _layer(module: str) -> int:
    parts = module.split(".")[1:] or ["__init__"]
    for key in (".".join(parts[:2]), parts[0]):
        for depth, names in enumerate(LAYERS):
            if key in names:
                return len(LAYERS) - depth
    raise AssertionError(f"{module} não está em nenhuma camada de LAYERS: acrescente-o")


def upward_imports(graph: Dict[str, Set[str]]) -> Set[tuple]:
    return {(m, d) for m, deps in graph.items() if m != PACKAGE
            for d in deps if d != PACKAGE and _layer(d) > _layer(m)}


def test_the_graph_sees_function_level_and_package_imports():
    graph = import_graph()
    # inside a function (WorkerBase.main) and through a package's __init__
    assert "nsj_queue_lib.cli.worker_args" in graph["nsj_queue_lib.worker_base"]
    assert "nsj_queue_lib.cli" in graph["nsj_queue_lib.worker_base"]
    # a TYPE_CHECKING import is not an edge
    assert "nsj_queue_lib.db.repository" not in graph["nsj_queue_lib.engine.base"]
    # a toy cycle is found
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found == [], "ciclos de import: " + "; ".join(" <-> ".join(c) for c in found)


def test_every_module_has_a_layer():
    for module in _modules():
        if module != PACKAGE:
            _layer(module)


def test_layers_import_only_downwards_except_the_known_ones():
    upward = upward_imports(import_graph())
    new = sorted(upward - KNOWN_UPWARD)
    gone = sorted(KNOWN_UPWARD - upward)
    assert not new, "imports para uma camada de cima: " + ", ".join(f"{a} -> {b}" for a, b in new)
    assert not gone, "tire de KNOWN_UPWARD (já não existem): " + ", ".join(
        f"{a} -> {b}" for a, b in gone)
