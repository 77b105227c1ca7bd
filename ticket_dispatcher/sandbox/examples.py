"""Loading the sandbox's world from ``ops/examples/sandbox.json`` (ops/examples/README.md):
people, Core groups, Oncall teams and Jira issues, on every start of ``serve --sandbox``.

The entries are the control API's bodies (``control.py`` parses both). Writing the example
engineers and policy into the database is the service's job, not the sandbox's (``seeding.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.safejson import read_json_file
from ticket_dispatcher.sandbox.control import (
    build_issue,
    parse_emails,
    parse_issue,
    parse_world,
    put_members,
    put_user,
)
from ticket_dispatcher.sandbox.world import Sandbox

SANDBOX_FILE = "sandbox.json"


@dataclass(frozen=True)
class ExampleSummary:
    users: int
    groups: int
    teams: int
    issues: int


def load_examples(sandbox: Sandbox, examples_dir: str | Path) -> ExampleSummary:
    """Fill ``sandbox`` from ``sandbox.json``; ``InvalidInput`` names the file and JSON path."""
    path = Path(examples_dir) / SANDBOX_FILE
    raw = read_json_file(path)
    try:
        return _load_world(sandbox, raw)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc.message}", exc.problems) from None


def _load_world(sandbox: Sandbox, raw: Any) -> ExampleSummary:
    world = parse_world(raw)
    users = world.get("users") or []
    for index, user in enumerate(users):
        put_user(sandbox.people, user, path=f"users[{index}]")
    _check_leaders(sandbox, users)
    groups = world.get("groups") or {}
    for name, emails in groups.items():
        members = parse_emails({"members": emails}, "members", path=f"groups.{name}")
        put_members(sandbox.core.put_group, name, members, f"groups.{name}")
    teams = world.get("teams") or {}
    for name, emails in teams.items():
        responders = parse_emails({"responders": emails}, "responders",
                                          path=f"teams.{name}")
        put_members(sandbox.oncall.put_team, name, responders, f"teams.{name}")
    issues = world.get("issues") or []
    for index, raw_issue in enumerate(issues):
        path = f"issues[{index}]"
        body = parse_issue(raw_issue, path=path)
        sandbox.jira.put_issue(build_issue(sandbox.people, body, path=path))
    return ExampleSummary(len(users), len(groups), len(teams), len(issues))


def _check_leaders(sandbox: Sandbox, users: list[dict]) -> None:
    """A leader chain must end in people the file defines, or escalation demos dead-end."""
    for index, user in enumerate(users):
        leader = user.get("leader_email")
        if leader and sandbox.people.user(leader) is None:
            path = f"users[{index}].leader_email"
            raise InvalidInput(f"{path} {leader} is not a user of the file",
                               [Problem(path, f"{leader} is not a user of the file")])
