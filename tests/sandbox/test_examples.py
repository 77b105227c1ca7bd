"""ops/examples/sandbox.json loaded into the sandbox: consistent with the assign policy, and a
bad entry named by file and JSON path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.sandbox import Sandbox, load_examples

EXAMPLES = Path(__file__).resolve().parents[2] / "ops" / "examples"


def test_example_world_is_consistent_with_the_assign_policy():
    policy = json.loads((EXAMPLES / "policies" / "assign-tcid.json").read_text())
    engineers = json.loads((EXAMPLES / "engineers.json").read_text())["engineers"]
    enabled = {e["email"] for e in engineers if e["dispatch_enabled"]}
    sandbox = Sandbox()

    summary = load_examples(sandbox, EXAMPLES)

    receivers = [a["assign"]["receiver"] for r in policy["rules"] for a in r["then"]]
    [users] = [r["users"] for r in receivers if r["type"] == "users"]
    [team] = [r["oncall_team"] for r in receivers if r["type"] == "oncall_team"]
    responders = [u.email for u in sandbox.oncall.team_responders(team)]
    assert set(users) <= enabled and all(sandbox.people.user(email) for email in users)
    assert responders and set(responders) <= enabled
    assert all(sandbox.people.user(e["email"]) for e in engineers)
    tcid = [sandbox.jira.issue(key) for key in ("TCID-1", "TCID-2", "TCID-3")]
    assert all(i.assignee is None and "auto-dispatch" in i.labels for i in tcid)
    assert {"P1", "P3"} <= {i.priority for i in tcid}
    assert any(key.startswith("GTOC-") for key in sandbox.jira.issue_keys())
    assert summary.groups >= 1 and any(sandbox.core.group_members(g) for g in sandbox.core.groups())
    leader = sandbox.core.leader(users[0])
    assert leader is not None and sandbox.core.leader(leader.email) is not None


def test_load_examples_names_the_file_and_path_of_a_bad_entry(tmp_path):
    (tmp_path / "sandbox.json").write_text(json.dumps(
        {"users": [{"email": "a@example.com"}, {"display_name": "no email"}]}))

    with pytest.raises(InvalidInput) as caught:
        load_examples(Sandbox(), tmp_path)

    assert "sandbox.json" in caught.value.message
    assert [p.path for p in caught.value.problems] == ["users[1].email"]


def test_load_examples_refuses_a_leader_the_file_does_not_define(tmp_path):
    (tmp_path / "sandbox.json").write_text(json.dumps(
        {"users": [{"email": "a@example.com", "leader_email": "boss@example.com"}]}))

    with pytest.raises(InvalidInput) as caught:
        load_examples(Sandbox(), tmp_path)

    assert [p.path for p in caught.value.problems] == ["users[0].leader_email"]
