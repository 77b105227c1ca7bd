"""A ``quiet`` maintenance window on the real runtime and database, both engines: the card is
sent, but there is no App-urgent, no page and no escalation, each skipped step saying which
window; a window that starts while a page waits for its ACK ends the wait without another
page."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.actors.test_notification_card_runtime import ASSIGNEE, put
from tests.actors.test_notification_escalation_runtime import (
    ESCALATION_INDEX,
    EscalationHarness,
    paged_three_times,
    run_out,
)
from tests.domain.test_notification_page import PENDING, POLL, TIMEOUT
from ticket_dispatcher.domain.execution import ActionStatus, ExecutionStatus
from ticket_dispatcher.domain.maintenance import Effect, MaintenanceWindow, Scope


@pytest.fixture
def world(urgent_world):
    return urgent_world


def quiet(h, scope: Scope, effect: Effect = Effect.QUIET) -> MaintenanceWindow:
    now = h.clock.now()
    return h.store.maintenance.add(MaintenanceWindow(
        None, scope, "incident", now, now + timedelta(hours=2), effect, created_at=now))


def urgent_steps(h, execution_id):
    """The urgent rule's actions (urgent, then three pages) of the execution."""
    return h.execution(execution_id).rule_executions[1].action_executions


def test_a_quiet_window_sends_the_card_and_skips_urgent_and_pages(world):
    window = quiet(world, Scope(projects=("TCID",)))
    put(world, severity="S1", status=PENDING)

    trigger = world.post_trigger(source=ASSIGNEE)

    execution = world.execution(trigger.execution_ids[0])
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert len(world.lark.sends) == 1
    assert world.lark.urgents == [] and world.oncall.pages == []
    steps = urgent_steps(world, execution.id)
    assert [step.status for step in steps] == [ActionStatus.SKIPPED] * 4
    for step, key in zip(steps, ("urgent", "page", "page", "page"), strict=True):
        assert step.context[key]["outcome"] == "skipped"
        assert step.context[key]["maintenance_window_id"] == window.id


def test_a_window_out_of_scope_changes_nothing(world):
    quiet(world, Scope(projects=("OPS",)))
    put(world, severity="S1", status=PENDING)

    world.post_trigger(source=ASSIGNEE)

    assert len(world.lark.urgents) == 1 and len(world.oncall.pages) == 1


def test_a_quiet_window_that_starts_ends_the_parked_page_wait_without_another_page(world):
    put(world, severity="S1", status=PENDING)
    execution_id = world.post_trigger(source=ASSIGNEE).execution_ids[0]
    assert len(world.oncall.pages) == 1
    assert world.execution(execution_id).status is ExecutionStatus.EXECUTING

    window = quiet(world, Scope(sources=(ASSIGNEE,)))
    world.advance(POLL)

    execution = world.execution(execution_id)
    assert execution.status is ExecutionStatus.SUCCEEDED and execution.wake_at is None
    first_page, *others = urgent_steps(world, execution_id)[1:]
    assert first_page.context["page"]["maintenance_window_id"] == window.id
    assert [step.context["page"]["outcome"] for step in others] == ["skipped", "skipped"]
    world.advance(3 * TIMEOUT)
    assert len(world.oncall.pages) == 1


def test_a_quiet_window_skips_the_escalation_after_the_last_page(store):
    harness = EscalationHarness(store).start()
    try:
        harness.workflow_policy()
        execution_id = paged_three_times(harness)
        window = quiet(harness, Scope(policies=("test policy",)))

        execution = run_out(harness, execution_id)

        assert execution.status is ExecutionStatus.SUCCEEDED
        escalation = execution.rule_executions[1].action_executions[ESCALATION_INDEX]
        assert escalation.status is ActionStatus.SKIPPED
        assert escalation.context["escalation"]["maintenance_window_id"] == window.id
        assert harness.directory.leader_lookups == []
        assert len(harness.oncall.pages) == 3
    finally:
        harness.stop()
