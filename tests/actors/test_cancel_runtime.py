"""A cancel told to a running execution is never lost, on SQLite and PostgreSQL: when the step
it arrived during ends in a wait (a park) instead of a next step, the next actor ends it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.factories import OPERATOR_AUTHOR
from tests.fakes import GateAction, RecordingAction
from tests.harness import rule
from ticket_dispatcher.domain.actions.base import ActionResult, ActionRun
from ticket_dispatcher.domain.execution import ActionStatus, ExecutionStatus, FailureCode
from ticket_dispatcher.errors import Conflict, RuntimeUnavailable
from ticket_dispatcher.store.audit import AuditFilter


class GateThenWait(GateAction):
    """Blocks until the test opens the gate, then waits a minute (a park), like a page that
    starts its ACK wait."""

    def __init__(self):
        super().__init__("test_gate_wait")

    def execute(self, run: ActionRun) -> ActionResult:
        super().execute(run)
        return ActionResult.park(run.now + timedelta(minutes=1))


def inside_a_step_that_will_park(make_harness):
    """A harness whose one execution is inside a step (held at the gate) that ends in a park;
    the gate, the action after it, and the execution's id."""
    gate, noop = GateThenWait(), RecordingAction()
    h = make_harness(gate, noop)
    h.policy(rule("test_gate_wait", "test_noop"))
    trigger = h.post_trigger(settle=False)
    gate.wait_entered(1)
    return h, gate, noop, h.trigger(trigger.id).execution_ids[0]


def test_a_cancel_during_a_step_that_parks_ends_the_execution_at_once(make_harness):
    h, gate, noop, execution_id = inside_a_step_that_will_park(make_harness)

    outcome = h.runtime.cancel(execution_id, "cancelled by test", by=OPERATOR_AUTHOR)
    gate.open()
    h.wait_idle()

    execution = h.execution(execution_id)
    waiting = execution.rule_executions[0].action_executions[0]
    assert outcome == "signalled"
    assert execution.status is ExecutionStatus.FAILED
    assert execution.failure_code == FailureCode.CANCELLED
    assert execution.failure_reason == "cancelled by test"
    assert (waiting.status, waiting.error) == (ActionStatus.SKIPPED,
                                                "cancelled while executing")
    assert noop.calls == []
    assert h.runtime.status()["pool"]["parked"] == 0


def test_a_cancel_needs_no_issue_load(make_harness):
    h, gate, _, execution_id = inside_a_step_that_will_park(make_harness)
    h.jira.fail_next("TCID-1", times=10)  # Jira is down when the cancel is carried out

    h.runtime.cancel(execution_id, "cancelled by test", by=OPERATOR_AUTHOR)
    gate.open()
    h.wait_idle()

    assert h.execution(execution_id).failure_code == FailureCode.CANCELLED


def test_a_stopped_runtime_answers_unavailable_not_an_error(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    execution_id = h.post_trigger().execution_ids[0]
    runtime = h.runtime
    runtime.stop()  # as during a shutdown, while a request is still being answered

    with pytest.raises(RuntimeUnavailable):
        runtime.status()
    with pytest.raises(RuntimeUnavailable):
        runtime.cancel(execution_id, "too late", by=OPERATOR_AUTHOR)


def cancel_records(h, execution_id: int) -> list:
    records, _ = h.store.audit.page(AuditFilter(object_type="execution",
                                                object_id=str(execution_id)))
    return [(r.actor, r.via.value, r.action, r.after) for r in records]


def test_a_signalled_cancel_is_recorded_with_the_step_that_ends_the_execution(make_harness):
    h, gate, _, execution_id = inside_a_step_that_will_park(make_harness)

    h.runtime.cancel(execution_id, "cancelled by test", by=OPERATOR_AUTHOR)
    # the execution still runs its step: nothing is cancelled yet, and nothing says so
    assert cancel_records(h, execution_id) == []
    gate.open()
    h.wait_idle()

    assert h.execution(execution_id).failure_code == FailureCode.CANCELLED
    assert cancel_records(h, execution_id) == [
        ("ops", "api", "execution.cancelled", {"outcome": "signalled"})]


def test_a_cancel_of_a_finished_execution_records_nothing(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    execution_id = h.post_trigger().execution_ids[0]

    with pytest.raises(Conflict):
        h.runtime.cancel(execution_id, "too late", by=OPERATOR_AUTHOR)

    assert cancel_records(h, execution_id) == []
