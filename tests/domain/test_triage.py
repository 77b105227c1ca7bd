"""The triage executor: only real changes, handed to the Jira writer as one ``TriageChange``,
never an assignment (docs/policies.md, "triage")."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.fakes import FakeJira, bare_ports, issue
from ticket_dispatcher.domain.actions.base import ActionError, ActionRun
from ticket_dispatcher.domain.actions.triage import TriageExecutor
from ticket_dispatcher.domain.execution import Execution, ExecutionMode
from ticket_dispatcher.domain.ports import TriageChange
from ticket_dispatcher.errors import IntegrationError


def run_of(config: dict, jira: FakeJira) -> ActionRun:
    the_issue = jira.issues["TCID-1"]
    execution = Execution(id=1, trigger_id=1, issue_key="TCID-1", mode=ExecutionMode.LIVE,
                          policy_id=1, policy_family_id="pf_X", policy_version=1,
                          rule_executions=[])
    return ActionRun(execution=execution, issue=the_issue, config=config,
                     context=TriageExecutor().build_context(the_issue, None, config),
                     now=datetime(2026, 11, 30, tzinfo=UTC), ports=bare_ports(jira=jira),
                     checkpoint=no_checkpoint)


def no_checkpoint() -> None:
    """``triage`` never saves mid-step: one edit, idempotent (it sets values)."""
    raise AssertionError("triage asked for a checkpoint")


@pytest.fixture
def jira() -> FakeJira:
    return FakeJira(issue(priority="P2", components=("payments", "web"), labels=("a", "b")))


def test_only_real_changes_are_planned_and_applied_as_one_change(jira):
    run = run_of({"priority": "P1", "components": ["web", "payments"],
                  "labels_add": ["a", "c"], "labels_remove": ["b", "z"]}, jira)
    executor = TriageExecutor()

    executor.plan(run)
    executor.execute(run)

    assert run.context["triage"]["changes"] == {
        "priority": {"from": "P2", "to": "P1"}, "labels": {"add": ["c"], "remove": ["b"]}}
    assert jira.calls("apply_triage") == [("apply_triage", "TCID-1", TriageChange(
        priority="P1", labels_add=("c",), labels_remove=("b",)))]
    assert jira.calls("assign") == []
    assert run.context["triage"]["applied"] is True
    after = jira.issues["TCID-1"]
    assert (after.priority, after.components, after.labels) == ("P1", ("payments", "web"),
                                                                ("a", "c"))


def test_nothing_to_change_skips_the_edit(jira):
    run = run_of({"priority": "P2", "labels_add": ["a"]}, jira)
    executor = TriageExecutor()

    executor.plan(run)
    executor.execute(run)

    assert run.context["triage"]["changes"] == {}
    assert run.context["triage"]["skipped_reason"]
    assert jira.writes == []


def test_components_replace_and_raw_fields_pass_through(jira):
    run = run_of({"components": ["db"], "fields": {"customfield_1": {"value": "x"}}}, jira)
    executor = TriageExecutor()

    executor.plan(run)
    executor.execute(run)

    [(_, _, change)] = jira.calls("apply_triage")
    assert change == TriageChange(components=("db",), fields={"customfield_1": {"value": "x"}})
    assert run.context["triage"]["changes"] == {
        "components": {"from": ["payments", "web"], "to": ["db"]},
        "fields": {"customfield_1": {"value": "x"}}}


def test_jira_refusal_fails_the_action(jira):
    jira.fail_writes("apply_triage", IntegrationError("jira PUT failed: HTTP 400", status=400,
                                                      service="jira"))
    run = run_of({"priority": "P0"}, jira)
    executor = TriageExecutor()
    executor.plan(run)

    with pytest.raises(ActionError, match="triage"):
        executor.execute(run)


def test_an_edit_refused_by_a_passing_fault_parks_then_applies_once(jira):
    jira.failing_writes.add("apply_triage")  # HTTP 500
    run = run_of({"priority": "P0"}, jira)
    executor = TriageExecutor()
    executor.plan(run)

    parked = executor.execute(run)
    jira.failing_writes.clear()
    finished = executor.execute(run)

    assert parked.kind.value == "park" and finished.kind.value == "continue"
    assert len(jira.calls("apply_triage")) == 1
    assert run.context["triage"]["retries"] == 1 and run.context["triage"]["applied"] is True
