"""The explained condition: the whole tree with every node evaluated, each leaf with the rule's
operand beside the issue's value, stored with each rule execution for the console."""

from __future__ import annotations

import json

import pytest

from tests.domain.test_conditions import NOW, leaf, make_issue
from ticket_dispatcher.domain.conditions import (
    All,
    Always,
    ConditionError,
    Not,
    evaluate,
    evaluate_explained,
    explain,
)

P1 = leaf("issue.priority", "in", values=["P0", "P1"])
PROD = leaf("issue.environment", "eq", value="prod")
STAGING = leaf("issue.environment", "eq", value="staging")
WEEKDAYS = leaf("now", "time_window", time_window={
    "timezone": "Asia/Shanghai", "weekdays": ["mon", "tue", "wed", "thu", "fri"],
    "start": "09:00", "end": "18:00"})


def only_leaf(condition: dict, **issue_fields) -> dict:
    return explain(condition, make_issue(**issue_fields), NOW)


def test_a_leaf_shows_the_operand_the_issue_value_the_verdict_and_the_reason():
    assert only_leaf(P1) == {
        "field": "issue.priority", "operator": "in", "expected": ["P0", "P1"],
        "actual": '"P1"', "matched": True, "reason": 'issue.priority "P1" in ["P0","P1"]'}


def test_every_child_is_evaluated_whichever_decided():
    tree = explain({"all": [STAGING, {"any": [P1, PROD]}, {"not": PROD}]}, make_issue(), NOW)

    assert tree["matched"] is False
    staging, either, negated = tree["all"]
    assert staging["matched"] is False and staging["actual"] == '"prod"'
    assert either["matched"] is True
    assert [child["matched"] for child in either["any"]] == [True, True]  # no short circuit
    assert negated == {"not": [explain(PROD, make_issue(), NOW)], "matched": False}


def test_always_is_a_node_of_its_own():
    assert explain({"always": True}, make_issue(), NOW) == {"always": True, "matched": True}
    assert explain({"any": [STAGING, {"always": True}]}, make_issue(), NOW)["matched"] is True


@pytest.mark.parametrize("condition", [
    P1, {"all": [P1, PROD]}, {"all": [STAGING, P1, STAGING]}, {"any": [STAGING, P1]},
    {"any": [STAGING, {"not": P1}]}, {"not": {"all": [P1, {"any": [STAGING, WEEKDAYS]}]}},
    {"always": True}, leaf("issue.reporter_email", "not_exists"),
])
def test_the_tree_and_evaluate_agree_on_the_verdict_and_the_reason(condition):
    matched, reason, tree = evaluate_explained(condition, make_issue(), NOW)

    assert (matched, reason) == evaluate(condition, make_issue(), NOW)
    assert tree["matched"] is matched


def test_each_leaf_reason_is_the_text_evaluate_gives_for_that_leaf_alone():
    tree = explain({"all": [P1, WEEKDAYS, {"not": STAGING}]}, make_issue(), NOW)

    leaves = [tree["all"][0], tree["all"][1], tree["all"][2]["not"][0]]
    assert [node["reason"] for node in leaves] == [
        evaluate(c, make_issue(), NOW)[1] for c in (P1, WEEKDAYS, STAGING)]


def test_a_missing_field_has_no_actual_value_and_its_negation_holds():
    issue = {"environment": None}

    assert only_leaf(PROD, **issue) == {
        "field": "issue.environment", "operator": "eq", "expected": "prod", "actual": None,
        "matched": False, "reason": "issue.environment is missing"}
    assert only_leaf(leaf("issue.environment", "ne", value="prod"), **issue)["matched"] is True
    assert only_leaf(leaf("issue.labels", "not_in", values=["x"]), labels=())["reason"] == (
        "issue.labels is missing, so not_in holds")


def test_presence_operators_expect_nothing_and_show_the_value_present():
    exists = only_leaf(leaf("issue.summary", "exists"))
    missing = only_leaf(leaf("issue.environment", "not_exists"), environment=None)

    assert (exists["expected"], exists["actual"], exists["matched"]) == (
        None, '"Database is down"', True)
    assert (missing["expected"], missing["actual"], missing["matched"]) == (None, None, True)


@pytest.mark.parametrize(("operator", "operands", "matched"), [
    ("ne", {"value": "db-outage"}, False),
    ("not_in", {"values": ["other", "x"]}, True),
    ("not_contains", {"value": "outage"}, False),
])
def test_negations_show_the_whole_collection_and_their_own_verdict(operator, operands,
                                                                    matched):
    node = only_leaf(leaf("issue.labels", operator, **operands))

    assert node["actual"] == '["auto-dispatch","db-outage"]'
    assert node["expected"] == next(iter(operands.values()))
    assert node["matched"] is matched


def test_a_time_window_is_described_and_the_moment_shown_in_its_zone():
    node = only_leaf(WEEKDAYS)

    assert node["expected"] == "mon,tue,wed,thu,fri 09:00-18:00 Asia/Shanghai"
    assert node["actual"] == "2026-03-09T02:00:00.000Z (mon 10:00 local)"
    assert node["matched"] is True


def test_before_and_after_expect_the_moment_as_the_rule_wrote_it():
    node = only_leaf(leaf("issue.created_at", "after", value="2026-03-01T17:00:00+08:00"))

    assert node["expected"] == "2026-03-01T17:00:00+08:00"
    assert node["actual"] == "2026-03-01T08:00:00.000Z"
    assert node["matched"] is False
    assert node["reason"] == ("issue.created_at 2026-03-01T08:00:00.000Z is not after "
                              "2026-03-01T09:00:00.000Z")


def test_a_regex_expects_its_pattern_and_says_when_it_ignores_case():
    node = only_leaf(leaf("issue.summary", "regex", value=r"^database\b", ignore_case=True))

    assert node["expected"] == r"^database\b" and node["ignore_case"] is True
    assert node["matched"] is True
    assert "ignore_case" not in only_leaf(PROD)


def test_a_huge_summary_is_cut_in_the_tree_as_in_the_reason():
    summary = "<script>" + "a" * 100_000
    condition = {"all": [leaf("issue.summary", "contains", value="zzz"), P1]}

    tree = explain(condition, make_issue(summary=summary), NOW)

    node = tree["all"][0]
    assert node["actual"].startswith('"<script>aaa') and node["actual"].endswith(
        "… (100010 characters)")
    assert len(node["actual"]) < 250 and len(node["reason"]) < 300
    assert len(json.dumps(tree)) < 1000  # stored with every rule execution


def test_a_hand_built_tree_deeper_than_the_limit_is_refused_as_evaluate_refuses_it():
    deep = Always()
    for level in range(40):
        deep = Not(deep) if level % 2 else All((deep,))

    with pytest.raises(ConditionError, match="deeper than 16 levels"):
        explain(deep, make_issue(), NOW)
