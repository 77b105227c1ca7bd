"""Policy matching and lock keys.

The rules: docs/policies.md, "Trigger: which triggers and issues a policy matches".
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.matching import (
    is_notification_policy,
    lock_key,
    match_policies,
    policy_matches,
)
from ticket_dispatcher.domain.model import (
    Issue,
    Policy,
    PolicySpec,
    PolicyStatus,
    PolicyTrigger,
    Rule,
)
from ticket_dispatcher.domain.validation import parse_policy_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "ops" / "examples" / "policies"
T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def make_policy(
    policy_id: int = 1,
    *,
    spec: PolicySpec | None = None,
    status: PolicyStatus = PolicyStatus.ACTIVE,
    **trigger,
) -> Policy:
    spec = spec or PolicySpec(name=f"policy {policy_id}", trigger=PolicyTrigger(**trigger))
    rules = tuple(
        Rule(r.name, r.priority, r.when, r.then, r.on_success, id=policy_id * 100 + i)
        for i, r in enumerate(spec.rules)
    )
    return Policy(
        id=policy_id, family_id=f"pf_{policy_id:012d}", version=1, status=status,
        name=spec.name, description=spec.description, trigger=spec.trigger, rules=rules,
        created_at=T0, updated_at=T0,
    )


def family(policy_id: int, file_name: str) -> Policy:
    spec = parse_policy_spec(json.loads((EXAMPLES / file_name).read_text()), product_registry())
    return make_policy(policy_id, spec=spec)


def make_issue(project: str = "TCID", labels: tuple[str, ...] = ()) -> Issue:
    return Issue(key=f"{project}-1", project_key=project, labels=labels)


# --- source_in ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["jira_assignment_assignee", "jira_assignment_l2_assignee"])
def test_reserved_source_never_matches_wildcard_policy(source):
    assert not policy_matches(make_policy(source_in=()), source, make_issue())


@pytest.mark.parametrize("source", ["jira", "manual", "anything"])
def test_ordinary_sources_keep_the_wildcard(source):
    assert policy_matches(make_policy(source_in=()), source, make_issue())


def test_listed_sources_match_exactly():
    policy = make_policy(source_in=("jira", "jira_assignment_assignee"))
    assert policy_matches(policy, "jira", make_issue())
    assert policy_matches(policy, "jira_assignment_assignee", make_issue())
    assert not policy_matches(policy, "manual", make_issue())
    assert not policy_matches(policy, "jira_assignment_l2_assignee", make_issue())
    assert not policy_matches(policy, "JIRA", make_issue())


# --- status, switch, project, labels --------------------------------------------------------


@pytest.mark.parametrize(
    "status", [PolicyStatus.DRAFT, PolicyStatus.INACTIVE, PolicyStatus.SUPERSEDED]
)
def test_only_active_policies_match(status):
    assert not policy_matches(make_policy(status=status), "jira", make_issue())


def test_disabled_trigger_does_not_match():
    assert not policy_matches(make_policy(enable=False), "jira", make_issue())


def test_empty_project_list_matches_any_project():
    assert policy_matches(make_policy(project_key_in=()), "jira", make_issue("ANY"))


def test_project_must_be_listed():
    policy = make_policy(project_key_in=("TCID", "ST"))
    assert policy_matches(policy, "jira", make_issue("ST"))
    assert not policy_matches(policy, "jira", make_issue("TCOC"))


def test_every_required_label_must_be_on_the_issue():
    policy = make_policy(issue_label_all=("a", "b"))
    assert policy_matches(policy, "jira", make_issue(labels=("b", "x", "a")))
    assert not policy_matches(policy, "jira", make_issue(labels=("a",)))
    assert not policy_matches(policy, "jira", make_issue(labels=()))


def test_match_policies_returns_ascending_ids():
    policies = [make_policy(9), make_policy(2, enable=False), make_policy(4), make_policy(1)]
    assert [p.id for p in match_policies(policies, "jira", make_issue())] == [1, 4, 9]


# --- the three assignment-notification families --------------------------------------------


FAMILIES = [
    family(1, "priority-assignee.json"),
    family(2, "priority-l2.json"),
    family(3, "severity-assignee.json"),
]
BOTH_LABELS = ("notify-assignee", "notify-l2-assignee")


@pytest.mark.parametrize(
    ("project", "source", "expected"),
    [
        ("TCOC", "jira_assignment_assignee", [1]),
        ("TCOC", "jira_assignment_l2_assignee", [2]),
        ("TCT", "jira_assignment_l2_assignee", [2]),
        ("TCID", "jira_assignment_assignee", [3]),
        ("TCID", "jira_assignment_l2_assignee", []),  # the severity projects have no L2 family
        ("TCOC", "jira", []),
        ("OTHER", "jira_assignment_assignee", []),
    ],
)
def test_two_role_labels_on_the_issue_do_not_cross_roles(project, source, expected):
    issue = make_issue(project, labels=BOTH_LABELS)
    assert [p.id for p in match_policies(FAMILIES, source, issue)] == expected


def test_notification_family_needs_its_role_label():
    issue = make_issue("TCOC", labels=("notify-l2-assignee",))
    assert match_policies(FAMILIES, "jira_assignment_assignee", issue) == []
    assert [p.id for p in match_policies(FAMILIES, "jira_assignment_l2_assignee", issue)] == [2]


# --- lock keys: per policy, or per family for notification policies --------------------------


def test_ordinary_policy_locks_per_policy():
    assert lock_key(make_policy(7), "TCID-1") == "TCID-1#policy:7"


def test_notification_policy_locks_per_family():
    policy = family(3, "severity-assignee.json")
    assert lock_key(policy, "TCID-1") == f"TCID-1#family:{policy.family_id}"


def test_is_notification_policy_reads_policies_specs_and_raw_bodies():
    body = json.loads((EXAMPLES / "priority-l2.json").read_text())
    assert is_notification_policy(family(2, "priority-l2.json"))
    assert is_notification_policy(parse_policy_spec(body, product_registry()))
    assert is_notification_policy(body)
    assert not is_notification_policy(family(5, "assign-tcid.json"))
    assert is_notification_policy({"trigger": {"source_in": ["jira_assignment_assignee"]}})
    assert is_notification_policy({"rules": [{"then": [{"type": "page_assignment"}]}]})
    assert not is_notification_policy({"trigger": [], "rules": "x"})
