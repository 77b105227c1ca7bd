"""Offline rule walk for ``policy test``.

What the command shows: docs/policies.md, "2. Test it against an issue (offline)".
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.explain import RuleReport, explain_policy
from ticket_dispatcher.domain.model import Issue, PolicySpec, RuleSpec
from ticket_dispatcher.domain.validation import parse_policy_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "ops" / "examples" / "policies"
MONDAY_10_SHANGHAI = datetime(2026, 3, 9, 2, 0, tzinfo=UTC)
SATURDAY = datetime(2026, 3, 7, 2, 0, tzinfo=UTC)


def example(name: str) -> PolicySpec:
    return parse_policy_spec(json.loads((EXAMPLES / name).read_text()), product_registry())


def outcomes(reports: list[RuleReport]) -> list[tuple[str, str]]:
    return [(report.name, report.outcome) for report in reports]


def rule(name: str, priority: int, matches: bool, on_success: OnSuccess) -> RuleSpec:
    when = {"always": True} if matches else {"not": {"always": True}}
    return RuleSpec(name, priority, when, [{"type": "triage", "triage": {"labels_add": [name]}}],
                    on_success)


def test_first_matching_rule_terminates_and_later_rules_are_not_evaluated():
    reports = explain_policy(example("assign-tcid.json"),
                             Issue(key="TCID-1", project_key="TCID", priority="P0"),
                             MONDAY_10_SHANGHAI)
    assert outcomes(reports) == [("business hours", "matched"),
                                 ("everything else", "not_evaluated")]
    assert reports[0].actions[0]["assign"]["receiver"] == {"type": "oncall_team",
                                                          "oncall_team": "sre"}
    assert reports[1].actions == []
    assert "business hours" in reports[1].reason


def test_not_matching_rule_continues_to_the_next():
    reports = explain_policy(example("assign-tcid.json"),
                             Issue(key="TCID-1", project_key="TCID", priority="P0"), SATURDAY)
    assert outcomes(reports) == [("business hours", "not_matched"),
                                 ("everything else", "matched")]
    assert reports[0].actions == []
    assert "is outside" in reports[0].reason
    assert reports[1].actions[0]["assign"]["strategy"] == "round_robin"


@pytest.mark.parametrize(
    ("severity", "urgent"),
    [("S1", True), ("S2 - Significant Impact", True), ("S3", False), (None, False)],
)
def test_severity_family_sends_the_card_and_pages_only_when_urgent(severity, urgent):
    issue = Issue(key="TCID-1", project_key="TCID", severity=severity)
    card, urgent_rule = explain_policy(example("severity-assignee.json"), issue,
                                       MONDAY_10_SHANGHAI)
    assert card.outcome == "matched"
    assert [a["type"] for a in card.actions] == ["send_assignment_notification"]
    assert urgent_rule.outcome == ("matched" if urgent else "not_matched")
    assert len(urgent_rule.actions) == (5 if urgent else 0)
    if severity is None:
        assert urgent_rule.reason == "issue.custom_fields.severity is missing"


def test_rules_run_in_priority_then_list_order():
    spec = PolicySpec(name="p", rules=(
        rule("late", 20, True, OnSuccess.CONTINUE),
        rule("early-a", 10, False, OnSuccess.TERMINATE),
        rule("early-b", 10, True, OnSuccess.CONTINUE),
        rule("stop", 30, True, OnSuccess.TERMINATE),
        rule("after-stop", 40, True, OnSuccess.TERMINATE),
    ))
    reports = explain_policy(spec, Issue(key="X-1", project_key="X"), MONDAY_10_SHANGHAI)
    assert outcomes(reports) == [
        ("early-a", "not_matched"), ("early-b", "matched"), ("late", "matched"),
        ("stop", "matched"), ("after-stop", "not_evaluated")]
    assert [r.priority for r in reports] == [10, 10, 20, 30, 40]


def test_report_serializes_for_the_cli():
    report = explain_policy(PolicySpec(name="p", rules=(rule("r", 1, True, OnSuccess.TERMINATE),)),
                            Issue(key="X-1", project_key="X"), MONDAY_10_SHANGHAI)[0]
    assert report.to_json() == {
        "name": "r", "priority": 1, "outcome": "matched", "reason": "always",
        "actions": [{"type": "triage", "triage": {"labels_add": ["r"]}}]}


def test_invalid_condition_is_a_condition_error_and_later_rules_are_not_evaluated():
    spec = PolicySpec(name="p", rules=(
        rule("before", 1, False, OnSuccess.CONTINUE),
        RuleSpec("broken", 2, {"field": "issue.x", "operator": "eq", "value": "1"}, []),
        rule("after", 3, True, OnSuccess.TERMINATE),
    ))

    reports = explain_policy(spec, Issue(key="X-1", project_key="X"), MONDAY_10_SHANGHAI)

    assert [(r.name, r.outcome) for r in reports] == [
        ("before", "not_matched"), ("broken", "condition_error"), ("after", "not_evaluated")]
    assert reports[1].reason == ('the condition cannot be evaluated: when.field: unknown field '
                                 '"issue.x"; see GET /dispatch/options')
    assert reports[2].reason == ("not evaluated: the execution fails at rule 'broken' "
                                 "(condition_error)")


@pytest.mark.parametrize("key", ["not", "all"])
def test_500_deep_condition_is_a_condition_error_not_a_recursion_error(key):
    when: dict = {"always": True}
    for _ in range(500):
        when = {"not": when} if key == "not" else {"all": [when]}
    spec = PolicySpec(name="p", rules=(RuleSpec("r", 1, when, []),))
    [report] = explain_policy(spec, Issue(key="X-1", project_key="X"), MONDAY_10_SHANGHAI)
    assert report.outcome == "condition_error"
    assert "deeper than 16 levels" in report.reason


def test_hostile_summary_is_explained_promptly():
    when = {"field": "issue.summary", "operator": "regex", "value": "(a+)+$"}
    spec = PolicySpec(name="p", rules=(RuleSpec("r", 1, when, []),))
    issue = Issue(key="X-1", project_key="X", summary="a" * 100_000 + "!")
    [report] = explain_policy(spec, issue, MONDAY_10_SHANGHAI)
    assert report.outcome == "not_matched"
    assert report.reason.endswith("(searched in the first 10000 characters)")
