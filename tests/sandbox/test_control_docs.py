"""ops/examples/README.md documents every control endpoint the sandbox serves: one table row
per path, with exactly the methods the app answers. The routes come from the mounted app, so a
new control without a row (or a row for a control that is gone) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import falcon
import falcon.inspect

from ticket_dispatcher.sandbox import PREFIX, Sandbox, mount_sandbox

README = Path(__file__).resolve().parents[2] / "ops" / "examples" / "README.md"
CONTROL = f"{PREFIX}/_control"
# | `/issues/{key}` | GET, PATCH | what |
_ROW = re.compile(r"^\|\s*`(/[^`]*)`\s*\|\s*([A-Z, ]+?)\s*\|")


def served_controls() -> dict[str, set[str]]:
    """Path under /sandbox/_control → the methods its resource answers."""
    app = falcon.App()
    mount_sandbox(app, Sandbox())
    return {
        route.path.removeprefix(CONTROL): {m.method for m in route.methods if not m.internal}
        for route in falcon.inspect.inspect_routes(app)
        if route.path.startswith(CONTROL + "/")
    }


def documented_controls(text: str) -> dict[str, set[str]]:
    """The README's control table: path → methods."""
    rows: dict[str, set[str]] = {}
    for line in text.split("## The control API", 1)[1].splitlines():
        if m := _ROW.match(line):
            assert m[1] not in rows, f"{m[1]} has two rows"
            rows[m[1]] = {method.strip() for method in m[2].split(",")}
    return rows


def test_the_sandbox_serves_control_routes():
    served = served_controls()

    assert {"/issues/{key}/rearm", "/oncall/outcome", "/lark/messages/{message_id}/reads"} \
        <= set(served)
    assert served["/oncall/outcome"] == {"GET", "PUT", "DELETE"}


def test_examples_readme_documents_every_control_route_with_its_methods():
    documented = documented_controls(README.read_text(encoding="utf-8"))

    assert documented == served_controls()


def test_control_table_reader_takes_paths_and_methods():
    text = ("## The control API\n| path | methods | what |\n| --- | --- | --- |\n"
            "| `/faults` | GET, POST, DELETE | faults |\n| `/pages` | GET | pages |\n")

    assert documented_controls(text) == {"/faults": {"GET", "POST", "DELETE"},
                                         "/pages": {"GET"}}
