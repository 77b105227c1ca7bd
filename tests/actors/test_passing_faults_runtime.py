"""A passing fault of Jira is never final: a trigger whose issue load one failed goes back to
pending and is tried again within the retry budget; a permanent answer fails it at once; a
fault longer than the budget fails it with the last reason."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.fakes import RecordingAction
from tests.harness import rule
from ticket_dispatcher.domain.execution import ExecutionStatus, TriggerStatus
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown
from ticket_dispatcher.integrations.http import IntegrationRejected, IntegrationTimeout
from ticket_dispatcher.timeutil import format_time

PASSING_FAULTS = {
    "429": lambda: IntegrationRejected("jira GET /issue failed: HTTP 429", status=429,
                                       service="jira"),
    "500": lambda: IntegrationRejected("jira GET /issue failed: HTTP 500", status=500,
                                       service="jira"),
    "502": lambda: IntegrationRejected("jira GET /issue failed: HTTP 502", status=502,
                                       service="jira"),
    "503": lambda: IntegrationRejected("jira GET /issue failed: HTTP 503", status=503,
                                       service="jira"),
    "no answer": lambda: IntegrationTimeout("jira GET /issue: no answer within the read "
                                            "timeout; the outcome is unknown", service="jira"),
    "refused": lambda: IntegrationError("jira GET /issue: connection failed "
                                        "(ConnectionError)", service="jira"),
}
PERMANENT = (400, 401, 403, 404)
ENDED = (TriggerStatus.COMPLETED, TriggerStatus.FAILED)


def sample(h, name: str, **labels: str) -> float | None:
    """A sample of the harness's metrics, as /metrics shows it."""
    return h.metrics.registry.get_sample_value(f"ticket_manager_dispatch_{name}", labels)


def advance_until(h, done, *, step: float = 5, limit: float = 3600) -> None:
    """Move the clock ``step`` seconds at a time until ``done()`` holds, at most ``limit``."""
    moved = 0.0
    while not done():
        assert moved < limit, "never happened within the limit"
        h.advance(step)
        moved += step


@pytest.mark.parametrize("cause", sorted(PASSING_FAULTS))
def test_trigger_load_failing_for_a_passing_fault_is_retried_not_failed(make_harness, cause):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    h.jira.fail_next("TCID-1", times=2, error=PASSING_FAULTS[cause])
    start = h.clock.now()

    trigger = h.post_trigger()

    assert trigger.status is TriggerStatus.PENDING
    assert trigger.retry_count == 1 and trigger.retry_since == start
    assert (trigger.available_at - start).total_seconds() == 5
    shown = trigger.to_json()["retries"]
    assert shown["count"] == 1 and "issue load failed" in shown["last_reason"]
    assert shown["next_at"] == trigger.to_json()["available_at"]
    assert h.executions() == []

    advance_until(h, lambda: h.trigger(trigger.id).status is TriggerStatus.COMPLETED)

    final = h.trigger(trigger.id)
    assert final.retry_count == 2  # 5 s, then 10 s later
    assert final.to_json()["retries"]["next_at"] is None
    [execution] = [h.execution(i) for i in final.execution_ids]
    assert execution.status is ExecutionStatus.SUCCEEDED
    retried = sample(h, "transient_retries_total", work="trigger", cause=_cause(cause))
    assert retried == 2


@pytest.mark.parametrize("status", PERMANENT)
def test_trigger_load_refused_for_good_fails_at_once(make_harness, status):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    h.jira.fail_next("TCID-1", times=1, status=status)

    trigger = h.post_trigger()

    assert trigger.status is TriggerStatus.FAILED
    assert f"jira answered {status}" in trigger.failure_reason
    assert trigger.retry_count == 0


def test_trigger_waits_at_least_the_retry_after_jira_gave(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    h.jira.fail_next("TCID-1", error=lambda: IntegrationRejected(
        "jira GET /issue failed: HTTP 429", status=429, service="jira", retry_after=120))
    start = h.clock.now()

    trigger = h.post_trigger()

    assert trigger.status is TriggerStatus.PENDING
    assert (trigger.available_at - start).total_seconds() == 120
    h.advance(115)
    assert h.trigger(trigger.id).status is TriggerStatus.PENDING
    advance_until(h, lambda: h.trigger(trigger.id).status is TriggerStatus.COMPLETED)


def test_a_fault_longer_than_the_budget_fails_the_trigger_with_the_last_reason(make_harness):
    h = make_harness(RecordingAction(), TRANSIENT_RETRY_BUDGET="2m")
    h.policy(rule("test_noop"))
    h.jira.fail_next("TCID-1", times=1000, status=503)
    start = h.clock.now()

    trigger = h.post_trigger()
    advance_until(h, lambda: h.trigger(trigger.id).status is TriggerStatus.FAILED, limit=600)

    final = h.trigger(trigger.id)
    assert "jira answered 503" in final.failure_reason
    assert "past the retry budget of 2m" in final.failure_reason
    # tried at 0, 5, 15, 35, 75 s, and last at the budget's end (120 s)
    assert final.retry_count == 5
    assert (final.completed_at - start).total_seconds() == pytest.approx(120, abs=5)
    assert sample(h, "trigger_results_total", outcome="failed") == 1


def test_a_fault_that_ends_at_the_budget_end_is_still_caught_by_the_last_try(make_harness):
    h = make_harness(RecordingAction(), TRANSIENT_RETRY_BUDGET="2m")
    h.policy(rule("test_noop"))
    h.jira.fail_next("TCID-1", times=5, status=502)  # 0, 5, 15, 35, 75 s fail

    trigger = h.post_trigger()
    advance_until(h, lambda: h.trigger(trigger.id).status in ENDED, limit=600)

    assert h.trigger(trigger.id).status is TriggerStatus.COMPLETED


def test_execution_load_keeps_retrying_a_passing_fault_past_the_counted_retries(make_harness):
    h = make_harness(RecordingAction(park_for=1), EXECUTION_LOAD_RETRIES="1")
    h.policy(rule("test_noop"))
    # the trigger's load works, and the first run starts from it; the woken run's loads fail
    h.jira.fail_next("TCID-1", times=6, after=1, status=429)

    execution_id = h.post_trigger().execution_ids[0]
    advance_until(h, lambda: h.execution(execution_id).status.terminal)

    execution = h.execution(execution_id)
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.load_attempts == 0
    assert sample(h, "transient_retries_total", work="execution_load",
                  cause="rate_limited") == 6


def test_execution_load_fails_once_the_budget_is_spent(make_harness):
    h = make_harness(RecordingAction(park_for=1), TRANSIENT_RETRY_BUDGET="1m")
    h.policy(rule("test_noop"))
    h.jira.fail_next("TCID-1", times=1000, after=1, error=lambda: OutcomeUnknown(
        "jira GET /issue: no answer", service="jira"))

    execution_id = h.post_trigger().execution_ids[0]
    advance_until(h, lambda: h.execution(execution_id).status.terminal, limit=600)

    execution = h.execution(execution_id)
    assert execution.status is ExecutionStatus.FAILED
    assert execution.failure_code == "issue_load_failed"
    assert "past the retry budget of 1m" in execution.failure_reason


def _cause(name: str) -> str:
    return {"429": "rate_limited", "no answer": "no_answer", "refused": "connection"}.get(
        name, "server_error")


def test_assign_put_refused_by_a_rate_limit_is_retried_and_made_once(make_harness):
    h = make_harness()
    h.policy(rule({"type": "assign", "assign": {
        "receiver": {"type": "users", "users": ["a@example.com"]}, "strategy": "first"}}))
    h.store.engineers.put("a@example.com", dispatch_enabled=True, now=h.clock.now())
    h.jira.add_user("a@example.com")
    h.jira.fail_writes("assign_and_label", *[IntegrationRejected(
        "jira PUT /issue failed: HTTP 429", status=429, service="jira", retry_after=20)] * 3)

    execution_id = h.post_trigger().execution_ids[0]
    parked = h.execution(execution_id)
    advance_until(h, lambda: h.execution(execution_id).status.terminal, step=10)

    assert parked.wake_at is not None and parked.status is ExecutionStatus.EXECUTING
    execution = h.execution(execution_id)
    assert execution.status is ExecutionStatus.SUCCEEDED
    [action] = execution.rule_executions[0].action_executions
    assert action.context["assign"]["retries"] == 3
    assert sample(h, "transient_retries_total", work="execution_write",
                  cause="rate_limited") == 3
    assert len(h.jira.calls("assign_and_label")) == 1
    assert h.jira.issues["TCID-1"].assignee.email == "a@example.com"


def test_a_put_off_trigger_logs_its_next_try_and_the_budgets_end_apart(make_harness, caplog):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    h.jira.fail_next("TCID-1", times=2, error=PASSING_FAULTS["503"])
    start = h.clock.now()

    with caplog.at_level("INFO", logger="ticket_dispatcher.actors.trigger_processor"):
        trigger = h.post_trigger()
        h.advance(5)
    put_off = [r for r in caplog.records if r.getMessage().startswith(
        "trigger's issue load met a passing fault")]

    assert [r.attempt for r in put_off] == [1, 2]
    assert put_off[0].next_try == trigger.to_json()["available_at"]
    assert put_off[1].next_try == format_time(start + timedelta(seconds=15))
    budget_end = format_time(start + h.config.transient_retry_budget)
    assert [r.deadline for r in put_off] == [budget_end, budget_end]
