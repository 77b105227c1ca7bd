"""Only the place that picks the engine imports an engine module, read from the imports with
``ast``: an import inside a function counts as much as one at the top. (No module of the
package imports itself through others: tests/test_layering.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

STORE = Path(__file__).resolve().parents[2] / "ticket_dispatcher" / "store"
PACKAGE = "ticket_dispatcher.store"


def _imported(path: Path) -> set[str]:
    """The store's modules ``path`` imports (``from ticket_dispatcher.store import x`` names
    the module ``x`` when there is one)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            names.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            names |= {alias.name.split(".")[2] for alias in node.names
                      if alias.name.startswith(PACKAGE + ".")}
    return {name for name in names if (STORE / f"{name}.py").is_file()} - {path.stem}


def test_the_engine_modules_are_imported_only_where_the_engine_is_picked():
    importers = {path.stem for path in STORE.glob("*.py")
                 if {"sqlite", "postgres"} & _imported(path)}

    assert importers <= {"connect", "cluster"}  # cluster.py: PostgreSQL's own link
