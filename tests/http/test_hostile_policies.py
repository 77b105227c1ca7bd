"""Hostile policies over HTTP: a regex or a condition tree can neither freeze the process nor
reach a 500."""

from __future__ import annotations

import time

import pytest

from tests.factories import policy_body
from tests.fakes import issue
from tests.harness import rule

CATASTROPHIC = {"field": "issue.summary", "operator": "regex", "value": "(a+)+$"}
HOSTILE_SUMMARY = "a" * 100_000 + "!"  # 28 a's froze Python's re for 19 s
DEPTH_MESSAGE = "conditions nest deeper than 16 levels of all, any and not"


def with_when(when: dict) -> dict:
    body = policy_body()
    body["rules"][0]["when"] = when
    return body


def not_chain(levels: int) -> dict:
    condition = {"field": "issue.priority", "operator": "eq", "value": "P1"}
    for _ in range(levels):
        condition = {"not": condition}
    return condition


def assert_healthz_answers_at_once(api) -> None:
    started = time.monotonic()
    assert api.as_role(None).get("/healthz").status_code == 200
    assert time.monotonic() - started < 1


@pytest.mark.timeout(10)
def test_formerly_catastrophic_regex_validates_and_healthz_answers(api):
    result = api.post("/dispatch/policies/validate", json=with_when(CATASTROPHIC))

    assert result.status_code == 200
    assert (result.json["valid"], result.json["errors"]) == (True, [])
    assert_healthz_answers_at_once(api)


def test_lookahead_is_reported_as_a_validation_error(api):
    when = {"field": "issue.summary", "operator": "regex", "value": "db(?=-outage)"}

    result = api.post("/dispatch/policies/validate", json=with_when(when))

    assert result.status_code == 200
    assert (result.json["valid"], result.json["errors"]) == (False, [{
        "path": "rules[0].when.value",
        "message": 'lookahead assertions are not supported (RE2 syntax): "db(?=-outage)"'}])


def test_conditions_40_levels_deep_are_a_validation_error_not_a_500(api):
    result = api.post("/dispatch/policies/validate", json=with_when(not_chain(40)))

    assert result.status_code == 200
    assert result.json["valid"] is False
    assert [error["message"] for error in result.json["errors"]] == [DEPTH_MESSAGE]
    assert result.json["errors"][0]["path"] == "rules[0].when" + ".not" * 16
    assert_healthz_answers_at_once(api)


def test_conditions_60_levels_deep_get_a_clear_answer_not_a_500(api):
    # 60 "not" levels sit at JSON depth 64: the HTTP layer's depth cap (default 64) may refuse
    # the body first (400); if it lets it through, the validator names the depth.
    result = api.post("/dispatch/policies/validate", json=with_when(not_chain(60)))

    assert result.status_code in (200, 400), result.text
    if result.status_code == 200:
        assert [error["message"] for error in result.json["errors"]] == [DEPTH_MESSAGE]
    else:
        assert "deep" in result.text
    assert_healthz_answers_at_once(api)


def test_creating_a_policy_with_too_deep_conditions_is_400_with_the_path(api):
    result = api.post("/dispatch/policies", json=with_when(not_chain(40)))

    assert result.status_code == 400
    assert DEPTH_MESSAGE in result.text
    assert "rules[0].when.not" in result.text
    assert_healthz_answers_at_once(api)


@pytest.mark.timeout(10)
def test_catastrophic_regex_against_a_hostile_summary_does_not_stall_an_execution(
    live_api, harness
):
    harness.jira.put(issue(summary=HOSTILE_SUMMARY))
    harness.policy(rule("test_noop", when=CATASTROPHIC))

    accepted = live_api.as_role("automation").post(
        "/dispatch/triggers", json={"source": "jira_automation", "input": {"issue_key": "TCID-1"}})
    assert accepted.status_code == 202
    assert_healthz_answers_at_once(live_api)
    harness.wait_idle()

    [execution] = harness.executions()
    [evaluated] = execution.rule_executions
    assert evaluated.outcome.value == "not_matched"
    assert "searched in the first 10000 characters" in evaluated.evaluation["reason"]
    assert_healthz_answers_at_once(live_api)
