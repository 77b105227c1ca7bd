"""The package's layering, read from its imports with ``ast``: data flows http → actors → domain
→ integrations/store, nothing imports upward (docs/design.md, "The parts"), and the database
drivers are the store's alone."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ticket_dispatcher"

# Imported by every layer: the error hierarchy, time, safe JSON parsing, the package's version.
LEAVES = {"errors", "clock", "timeutil", "safejson", "ticket_dispatcher"}
# What each part may import besides itself and the leaves. Parts not named here (service, cli,
# __main__, the package root) are the composition root and may import anything.
ALLOWED: dict[str, set[str]] = {
    "domain": set(),
    "config": {"domain", "settings"},
    "settings": {"domain"},
    "logging": set(),
    "store": {"domain", "config"},
    "integrations": {"domain", "config", "logging"},
    "metrics": {"domain"},
    "actors": {"domain", "config", "store", "integrations", "logging", "metrics"},
    "http": {"domain", "config", "settings", "store", "actors", "logging", "metrics"},
    "sandbox": {"domain"},
    "console": {"domain", "config", "settings", "store", "actors", "http", "logging", "metrics"},
    "calendars": {"domain", "config", "store", "integrations", "logging", "metrics"},
}
for leaf in LEAVES:
    ALLOWED.setdefault(leaf, set())
# Driver errors never leave the store: everything else sees StoreUnavailable and Conflict.
DATABASE_LIBRARIES = {"peewee", "playhouse", "psycopg2", "psycopg", "sqlite3"}


def _part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "ticket_dispatcher":
        return None
    return parts[1] if len(parts) > 1 else "ticket_dispatcher"


def _imported_modules() -> list[tuple[str, str, str]]:
    """(part, imported module, where) for every absolute import, nested ones too."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        source = relative.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            found += [(source, module, f"{relative}:{node.lineno}") for module in modules]
    return found


def _imports() -> dict[str, set[tuple[str, str]]]:
    """part → {(imported part, where)} for every ``ticket_dispatcher`` import, nested ones too."""
    found: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for source, module, where in _imported_modules():
        target = _part(module)
        if target is not None and target != source:
            found[source].add((target, where))
    return found


def test_no_part_imports_a_layer_above_it():
    wrong = sorted(
        f"{where}: {source} imports {target}"
        for source, targets in _imports().items() if source in ALLOWED
        for target, where in targets
        if target not in ALLOWED[source] | LEAVES
    )

    assert wrong == []


def test_the_parts_import_each_other_without_a_cycle():
    graph = {source: {target for target, _ in targets}
             for source, targets in _imports().items()}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        assert node not in visiting, "import cycle: " + " → ".join(visiting + [node])
        if node in done:
            return
        visiting.append(node)
        for target in sorted(graph.get(node, ())):
            visit(target)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_only_the_composition_root_imports_the_sandbox():
    importers = sorted({source for source, targets in _imports().items()
                        for target, _ in targets if target == "sandbox"})

    assert set(importers) <= {"service", "examples"}


def test_only_the_store_imports_a_database_library():
    outside = sorted(f"{where}: {module}" for source, module, where in _imported_modules()
                     if source != "store" and module.split(".")[0] in DATABASE_LIBRARIES)

    assert outside == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, set[str]]:
    """module → the package's modules it imports, nested and type-checking imports too (an
    import moved into a function or under ``TYPE_CHECKING`` to dodge a circle still is one).
    ``from a import b`` imports ``a``, and ``a.b`` when that is a module."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            targets.update(found for name in names if (found := known(name)) is not None)
        graph[module] = targets - {module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_module_imports_itself_through_others():
    assert _circles(_module_graph()) == []
