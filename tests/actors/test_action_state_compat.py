"""A context stored by the previous release still loads, on the real runtime and both databases:
a parked page and an escalation saved in that release's shape (no ``version``, the keys it
wrote) are resumed after a restart and the workflow ends as it would have.

The stored contexts are written literally, as the previous release saved them
(tests/previous_release.py); only the IDs and times of this run are filled in.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.actors.test_notification_escalation_runtime import (
    ASSIGNEE,
    ESCALATION_INDEX,
    EscalationHarness,
    applied,
    automation,
    die_in_assign,
    escalation,
    paged,
    put,
    role_writes,
    run_out,
    run_out_until_escalating,
    slot,
)
from tests.domain.test_notification_card import ALICE, BOB
from tests.domain.test_notification_page import POLL, TIMEOUT
from tests.previous_release import LABEL, card, escalating, page, urgent
from ticket_dispatcher.domain.execution import ActionStatus, Execution, ExecutionStatus
from ticket_dispatcher.timeutil import format_time


@pytest.fixture
def world(store):
    harness = EscalationHarness(store).start()
    harness.workflow_policy()
    yield harness
    harness.stop()


# -- storing them ----------------------------------------------------------------------------------


def store_as_previous_release(h, ex: Execution, contexts: dict[tuple[int, int], dict]) -> None:
    """Replace the stored contexts of ``ex`` (by rule and action index) with ``contexts``."""
    for rule in ex.rule_executions:
        for action in rule.action_executions:
            if (rule.sequence, action.index) in contexts:
                action.context = contexts[(rule.sequence, action.index)]
    h.store.executions.save(ex, ex.rule_executions, parked=ex.wake_at is not None)
    stored = h.execution(ex.id)
    assert all("version" not in context for rule in stored.rule_executions
               for action in rule.action_executions for context in action.context.values())


def waits(ex: Execution, parked_in: int | None = None) -> dict:
    """The previous release's contexts of the card, App-urgent and the pages up to
    ``parked_in``, which waits, and of the actions after it as they were created (all three
    pages, their waits over, without it); each page keeps the deadline this run gave it."""
    contexts = {(0, 0): card(ex.id), (1, 0): urgent(ex.id)}
    for attempt in (1, 2, 3):
        if parked_in is not None and attempt > parked_in:
            contexts[(1, attempt)] = {"page": {"attempt": attempt}}
            continue
        saved = ex.rule_executions[1].action_executions[attempt].context["page"]["deadline"]
        contexts[(1, attempt)] = page(ex.id, attempt, saved, waited=attempt != parked_in)
    if parked_in is not None:
        contexts[(1, ESCALATION_INDEX)] = {"escalation": {}}
    return contexts


# -- a parked page --------------------------------------------------------------------------------


def test_a_page_parked_by_the_previous_release_waits_on_and_never_pages_again(world):
    first_deadline = format_time(world.clock.now() + timedelta(seconds=TIMEOUT))
    put(world)
    execution_id = automation(world)  # the card, App-urgent, page 1: parked in its wait
    world.stop()
    ex = world.execution(execution_id)
    store_as_previous_release(world, ex, waits(ex, parked_in=1))

    world.start()
    world.wait_idle()

    [parked] = world.runtime.status()["parked_executions"]  # the admin view reads it
    assert (parked["attempt"], parked["deadline"]) == (1, first_deadline)
    ex = run_out(world, execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert paged(world) == ["alice@example.com"] * 3  # page 1 once, then 2 and 3
    first = ex.rule_executions[1].action_executions[1].context["page"]
    assert (first["outcome"], first["deadline"], first["call_id"], first["version"]) == (
        "timeout", first_deadline, "call-1", 1)
    assert escalation(ex)["outcome"] == "escalated"
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]


def test_a_page_wait_saved_by_the_previous_release_ends_at_its_saved_deadline(world):
    start = world.clock.now()
    put(world)
    execution_id = automation(world)
    world.stop()
    ex = world.execution(execution_id)
    store_as_previous_release(world, ex, waits(ex, parked_in=1))
    world.start()

    world.advance(POLL)  # a poll before the deadline
    world.advance(TIMEOUT - POLL)  # exactly the saved deadline

    wait = world.execution(execution_id).rule_executions[1].action_executions[1]
    assert (wait.status, wait.context["page"]["outcome"]) == (ActionStatus.SUCCEEDED,
                                                               "timeout")
    assert wait.finished_at == start + timedelta(seconds=TIMEOUT)
    assert len(world.oncall.pages) == 2  # and attempt 2 has paged


# -- an escalation --------------------------------------------------------------------------------


def test_an_intent_prepared_by_the_previous_release_is_reconciled_with_one_write(world):
    put(world)
    die_in_assign(world, landed=False)  # the process stops inside the Jira write
    execution_id = automation(world)
    run_out_until_escalating(world, execution_id)
    world.stop()
    ex = world.execution(execution_id)
    store_as_previous_release(world, ex, {**waits(ex), (1, ESCALATION_INDEX):
                                          escalating(ex.id, "prepared")})

    world.start()
    world.wait_idle()

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    context = escalation(ex)
    assert (context["outcome"], context["wakeup_phase"], context["intent"]["state"],
            context["version"]) == ("escalated", "done", "applied", 1)
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]
    assert slot(world) == applied(execution_id, ALICE, BOB)
    assert world.triggers.ensured == [(ASSIGNEE, "TCID-1")]
    assert world.directory.leader_lookups == ["alice@example.com"]  # no new leader chosen


def test_a_hop_whose_wake_up_the_previous_release_left_required_is_woken_once(world):
    put(world)
    die_in_assign(world, landed=True)
    execution_id = automation(world)
    run_out_until_escalating(world, execution_id)
    world.stop()
    ex = world.execution(execution_id)
    # the previous release saved the hop, then stopped before the label and the trigger
    world.store.contexts.update_notification_slot(
        "TCID-1", "assignee", lambda _: applied(execution_id, ALICE, BOB), world.clock.now())
    store_as_previous_release(world, ex, {**waits(ex), (1, ESCALATION_INDEX):
                                          escalating(ex.id, "applied", outcome="escalated",
                                                     wakeup_phase="required")})
    assert LABEL not in world.jira.issues["TCID-1"].labels

    world.start()
    world.wait_idle()

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert (escalation(ex)["wakeup_phase"], escalation(ex)["version"]) == ("done", 1)
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]  # no second write
    assert LABEL in world.jira.issues["TCID-1"].labels
    assert world.triggers.ensured == [(ASSIGNEE, "TCID-1")]
