"""Loading ``ops/examples/`` for ``serve --sandbox`` (SPEC §11 *Sandbox*, §13, §15).

Two halves, because they live in different places: ``load_examples`` fills the in-memory fake
world from ``sandbox.json`` (people, Core groups, Oncall teams, Jira issues) on every start;
``seed_store`` puts ``engineers.json`` and the assign policy into the database, and only into an
empty one, so a sandbox restart never overwrites what the operator changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ticket_dispatcher.domain.model import Policy, PolicySpec
from ticket_dispatcher.domain.validation import parse_policy_spec, validate_policy
from ticket_dispatcher.errors import InvalidInput, PolicyInvalid, Problem
from ticket_dispatcher.http.binding import bind_object
from ticket_dispatcher.integrations.sandbox import control
from ticket_dispatcher.integrations.sandbox.state import SandboxState
from ticket_dispatcher.store import Store

SANDBOX_FILE = "sandbox.json"
ENGINEERS_FILE = "engineers.json"
# The ordinary assign policy: it needs no notification switch to run (SPEC §15).
SEED_POLICIES = ("assign-tcid.json",)


@dataclass(frozen=True)
class ExampleSummary:
    users: int
    groups: int
    teams: int
    issues: int


@dataclass(frozen=True)
class SeedSummary:
    seeded: bool  # False: the database already had engineers or policies
    engineers: int = 0
    policy_ids: tuple[int, ...] = ()


def load_examples(state: SandboxState, examples_dir: str | Path) -> ExampleSummary:
    """Fill ``state`` from ``sandbox.json``; ``InvalidInput`` names the file and JSON path."""
    path = Path(examples_dir) / SANDBOX_FILE
    raw = _read_json(path)
    try:
        return _load_world(state, raw)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc.message}", exc.problems) from None


def _load_world(state: SandboxState, raw: Any) -> ExampleSummary:
    world = bind_object(raw, required={}, optional={
        "users": list, "groups": dict, "teams": dict, "issues": list,
    })
    users = world.get("users") or []
    for index, user in enumerate(users):
        control.put_user(state, user, path=f"users[{index}]")
    _check_leaders(state, users)
    groups = world.get("groups") or {}
    for name, emails in groups.items():
        members = control.parse_emails({"members": emails}, "members", path=f"groups.{name}")
        control.put_members(state.put_group, name, members, f"groups.{name}")
    teams = world.get("teams") or {}
    for name, emails in teams.items():
        responders = control.parse_emails({"responders": emails}, "responders",
                                          path=f"teams.{name}")
        control.put_members(state.put_team, name, responders, f"teams.{name}")
    issues = world.get("issues") or []
    for index, raw_issue in enumerate(issues):
        path = f"issues[{index}]"
        body = control.parse_issue(raw_issue, path=path)
        state.put_issue(control.build_issue(state, body, path=path))
    return ExampleSummary(len(users), len(groups), len(teams), len(issues))


def _check_leaders(state: SandboxState, users: list[dict]) -> None:
    """A leader chain must end in people the file defines, or escalation demos dead-end."""
    for index, user in enumerate(users):
        leader = user.get("leader_email")
        if leader and state.user(leader) is None:
            path = f"users[{index}].leader_email"
            raise InvalidInput(f"{path} {leader} is not a user of the file",
                               [Problem(path, f"{leader} is not a user of the file")])


def seed_store(store: Store, examples_dir: str | Path, now: datetime) -> SeedSummary:
    """On an empty database (no policies, no engineers): upsert the example engineers, then
    create and activate the example assign policy. Everything is read and validated before
    the first write, so a bad file leaves the database empty."""
    if _has_rows(store):
        return SeedSummary(seeded=False)
    examples = Path(examples_dir)
    engineers = _read_engineers(examples / ENGINEERS_FILE)
    specs = [_read_policy(examples / "policies" / name) for name in SEED_POLICIES]
    for engineer in engineers:
        store.engineers.put(
            engineer["email"],
            dispatch_enabled=engineer["dispatch_enabled"],
            display_name=engineer.get("display_name"),
            jira_account_id=engineer.get("jira_account_id"),
            now=now,
        )
    policy_ids = []
    for spec in specs:
        draft = store.policies.create(spec, now)
        policy_ids.append(store.policies.activate(draft.id, now=now, validate=_must_be_valid).id)
    return SeedSummary(seeded=True, engineers=len(engineers), policy_ids=tuple(policy_ids))


def _has_rows(store: Store) -> bool:
    _, policies = store.policies.list(limit=1)
    _, engineers = store.engineers.list(limit=1)
    return bool(policies or engineers)


def _read_engineers(path: Path) -> list[dict]:
    raw = _read_json(path)
    try:
        body = bind_object(raw, required={"engineers": list}, optional={})
        return [
            bind_object(item, required={"email": str, "dispatch_enabled": bool},
                        optional={"display_name": str, "jira_account_id": str},
                        path=f"engineers[{index}]")
            for index, item in enumerate(body["engineers"])
        ]
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc.message}", exc.problems) from None


def _read_policy(path: Path) -> PolicySpec:
    raw = _read_json(path)
    problems = validate_policy(raw)
    if problems:
        raise PolicyInvalid(f"{path} is not a valid policy", problems)
    return parse_policy_spec(raw)


def _must_be_valid(policy: Policy) -> None:
    problems = validate_policy(policy.spec.to_json())
    if problems:
        raise PolicyInvalid(f"policy {policy.id} is not valid", problems)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{path} is not valid JSON: {exc}") from None
