"""Paging respects leave, on the real runtime and both engines: a ``page_assignment`` that says
``"when_unavailable": "escalate"`` pages nobody on time off. Its attempt is recorded skipped
with the reason, the workflow goes straight to the escalation (one hop: Alice's direct leader,
Bob), and the card is still sent. Without the key, paging is as before."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.actors.test_notification_escalation_runtime import (
    ESCALATE,
    EscalationHarness,
    automation,
    escalation,
    paged,
    put,
    role_writes,
    run_out,
)
from tests.domain.test_notification_card import BOB, SEND, SEVERITY
from tests.domain.test_notification_page import page
from tests.harness import rule
from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.execution import ExecutionStatus

ALICE_EMAIL = "alice@example.com"


def leave_aware(attempt: int) -> dict:
    paging = page(attempt)
    paging["page_assignment"]["when_unavailable"] = "escalate"
    return paging


@pytest.fixture
def world(store):
    harness = EscalationHarness(store).start()
    harness.policy(rule(SEND, name="send", priority=10, on_success="continue"),
                   rule({"type": "mark_assignment_message_urgent"}, leave_aware(1),
                        leave_aware(2), leave_aware(3), ESCALATE, name="urgent", priority=20,
                        when=SEVERITY),
                   source_in=("jira_assignment_assignee",), labels=("notify-assignee",))
    harness.store.engineers.put(ALICE_EMAIL, dispatch_enabled=True, now=harness.clock.now())
    yield harness
    harness.stop()


def on_leave(h, hours: float = 48) -> None:
    now = h.clock.now()
    h.store.time_off.add(TimeOff(None, ALICE_EMAIL, now - timedelta(hours=1),
                                 now + timedelta(hours=hours), "parental leave", "api"), now)


def test_a_target_on_leave_is_not_paged_and_the_leader_hears_at_once(world):
    on_leave(world)
    put(world)

    execution_id = automation(world)
    ex = world.execution(execution_id)

    assert ex.status is ExecutionStatus.SUCCEEDED  # no ACK wait: nothing was paged
    assert paged(world) == []
    assert [open_id for open_id, *_ in world.lark.sends] == ["ou_alice"]  # the card still goes
    pages = [a.context["page"] for a in ex.rule_executions[1].action_executions[1:4]]
    assert [p["outcome"] for p in pages] == ["skipped"] * 3
    assert pages[0]["reason"].startswith(f"{ALICE_EMAIL} on time off until ")
    assert "parental leave" in pages[0]["reason"]
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]
    assert world.jira.issues["TCID-1"].assignee == BOB
    assert escalation(ex)["leader"]["email"] == "bob@example.com"


def test_leave_that_ends_before_the_page_pages_as_usual(world):
    on_leave(world, hours=-0.5)  # over half an hour ago
    put(world)

    execution_id = automation(world)
    run_out(world, execution_id)

    assert paged(world) == [ALICE_EMAIL] * 3


def test_without_the_key_a_target_on_leave_is_paged_as_before(store):
    harness = EscalationHarness(store).start()
    try:
        harness.workflow_policy()
        harness.store.engineers.put(ALICE_EMAIL, dispatch_enabled=True,
                                    now=harness.clock.now())
        on_leave(harness)
        put(harness)

        run_out(harness, automation(harness))

        assert paged(harness) == [ALICE_EMAIL] * 3
    finally:
        harness.stop()


def test_an_unknown_when_unavailable_is_refused_quoting_it():
    from ticket_dispatcher.domain.actions.notification import validate_page_config

    config = {**page(1)["page_assignment"], "when_unavailable": "wait"}

    problems = validate_page_config(config, "rules[0].then[1].page_assignment")

    assert [(p.path, p.message) for p in problems] == [
        ("rules[0].then[1].page_assignment.when_unavailable",
         '"wait" is not one of "escalate"')]
