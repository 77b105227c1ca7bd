"""The package stands on its dependencies' public API only, and each of its names means one
thing, read from its source with ``ast``:
no ``x._name`` of an object or module that is not the package's own, and no class of the
package that overrides a dependency class's ``_method``. A release of pykka, peewee, waitress,
urllib3, requests, falcon, psycopg, Jinja2, MarkupSafe or prometheus-client may change its
private names without warning; the bounds in setup.cfg guard only the public ones. Where the
package silences mypy, it says why on the same line."""

from __future__ import annotations

import ast
import builtins
import importlib
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ticket_dispatcher"
DEPENDENCIES = {"pykka", "peewee", "playhouse", "waitress", "urllib3", "requests", "falcon",
                "psycopg", "psycopg2", "psycopg_pool", "jinja2", "markupsafe", "prometheus_client",
                "http", "socketserver", "threading", "concurrent", "re2", "icalendar",
                "recurring_ical_events"}
# Public although they start with "_": documented so by their owners (peewee's ``Model._meta``
# and ``FieldDatabaseHook._db_hook``; ``os._exit``; the namedtuple and enum protocols).
DOCUMENTED = {"_meta", "_db_hook", "_exit", "_asdict", "_replace", "_fields", "_make",
              "_field_defaults", "_missing_", "_value_", "_name_", "_generate_next_value_",
              "_ignore_"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DOCUMENTED


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))}


def _own_names(trees: dict[Path, ast.Module]) -> set[str]:
    """Every name the package itself defines: functions, classes, attributes it assigns on
    ``self``/``cls``, variables and parameters."""
    own: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(node.attr)  # not ``db._timeout = ...``: that one is peewee's
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
    return own


def _imported(tree: ast.Module) -> dict[str, str]:
    """Local name -> ``module`` or ``module:name`` for what the module imports from a
    dependency."""
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module \
                and node.module.split(".")[0] in DEPENDENCIES:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in DEPENDENCIES:
                    imported[alias.asname or alias.name.split(".")[0]] = alias.name
    return imported


def _resolve(spec: str, attribute: str | None = None) -> object | None:
    module_name, _, name = spec.partition(":")
    try:
        found: object = importlib.import_module(module_name)
        for part in filter(None, (name, attribute)):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def private_attributes() -> list[str]:
    """``x._name`` where ``_name`` is nobody's in the package and ``x`` is not ``self``/``cls``."""
    trees = _trees()
    own = _own_names(trees)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr not in own:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: .{node.attr}")
    return found


def private_overrides() -> list[str]:
    """Methods ``_name`` of the package's classes that a dependency base class also has."""
    trees = _trees()
    dependency_bases: dict[str, list[object]] = {}
    own_bases: dict[str, list[str]] = {}
    classes: list[tuple[Path, ast.ClassDef]] = []
    for path, tree in trees.items():
        imported = _imported(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            classes.append((path, node))
            bases: list[object | None] = []
            own_bases[node.name] = []
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in imported:
                    bases.append(_resolve(imported[base.id]))
                elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) \
                        and base.value.id in imported:
                    bases.append(_resolve(imported[base.value.id], base.attr))
                elif isinstance(base, ast.Name):
                    own_bases[node.name].append(base.id)
            dependency_bases[node.name] = [base for base in bases if base is not None]

    def all_bases(name: str, seen: frozenset[str] = frozenset()) -> list[object]:
        found = list(dependency_bases.get(name, []))
        for base in own_bases.get(name, []):
            if base not in seen:
                found += all_bases(base, seen | {name})
        return found

    overrides = []
    for path, node in classes:
        bases = all_bases(node.name)
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and _private(item.name) \
                    and any(hasattr(base, item.name) for base in bases):
                overrides.append(f"{path.relative_to(PACKAGE.parent)}:{item.lineno}: "
                                 f"{node.name}.{item.name}")
    return overrides


def test_no_private_name_of_a_dependency_is_used():
    assert private_attributes() == []


def test_no_private_method_of_a_dependency_is_overridden():
    assert private_overrides() == []


# -- one name, one idea ---------------------------------------------------------------------------

# Overrides of the standard library's own API keep its name.
STANDARD_OVERRIDES = {("JsonFormatter", "format")}


def test_no_two_classes_of_the_package_share_a_name():
    """A name means one thing: two classes called ``Role`` make every reader ask which."""
    seen: dict[str, list[str]] = {}
    for path, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name != "Meta":  # peewee's idiom
                seen.setdefault(node.name, []).append(str(path.relative_to(PACKAGE.parent)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def _is_property(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A read-only attribute (a protocol's ``type``), not a method one calls."""
    return any(isinstance(d, ast.Name) and d.id == "property" for d in function.decorator_list)


def test_no_method_shadows_a_builtin():
    shadowing = []
    for path, tree in _trees().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and item.name in vars(builtins) \
                        and not _is_property(item) \
                        and (node.name, item.name) not in STANDARD_OVERRIDES:
                    shadowing.append(f"{path.relative_to(PACKAGE.parent)}: "
                                     f"{node.name}.{item.name}")
    assert shadowing == []


def test_messages_between_actors_carry_no_bare_outcome_strings():
    """What one actor answers another is an enum or a typed record: a function of
    ``actors/`` that returns a word literal ("retry", "signalled") would make every caller
    compare strings that no type checker can hold to the answering side."""
    words = []
    for path, tree in _trees().items():
        if path.parent.name != "actors":
            continue
        for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
            for node in ast.walk(function):
                value = node.value if isinstance(node, ast.Return) else None
                parts = value.elts if isinstance(value, ast.Tuple) else [value]
                words += [f"{path.name}:{node.lineno} {function.name} returns {part.value!r}"
                          for part in parts if isinstance(part, ast.Constant)
                          and isinstance(part.value, str) and part.value.isidentifier()
                          and function.name not in METRIC_LABELS]
    assert not words, "\n".join(words)


# Functions that name a metric's label value, which is a string by prometheus-client's API.
METRIC_LABELS = {"_call_outcome"}


# -- silenced checks say why --------------------------------------------------------------------

_TYPE_IGNORE = re.compile(r"type:\s*ignore")
# The pragma, its optional codes, then a comment of its own with the reason.
_TYPE_IGNORE_WITH_REASON = re.compile(r"type:\s*ignore(?:\[[^\]]*\])?\s*#\s*\w")


def unexplained_type_ignores(source: str) -> list[int]:
    """The lines of ``source`` whose ``# type: ignore`` has no reason after it on the line,
    read from its comments (a string that mentions the pragma is no pragma)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [token.start[0] for token in tokens if token.type == tokenize.COMMENT
            and _TYPE_IGNORE.search(token.string)
            and not _TYPE_IGNORE_WITH_REASON.search(token.string)]


def test_unexplained_type_ignores_are_found():
    source = ("a = f()  # type: ignore[misc]\n"
              "b = g()  # type: ignore\n"
              "c = h()  # type: ignore[arg-type]  # not in the stubs\n"
              "d = '# type: ignore'\n")

    assert unexplained_type_ignores(source) == [1, 2]


def test_every_type_ignore_says_why_on_its_line():
    """A silenced type error outlives the reason it was silenced for unless the reason is
    written next to it, where the next reader can check whether it still holds."""
    unexplained = [f"{path.relative_to(PACKAGE.parent)}:{line}"
                   for path in sorted(PACKAGE.rglob("*.py"))
                   for line in unexplained_type_ignores(path.read_text(encoding="utf-8"))]
    assert unexplained == []
