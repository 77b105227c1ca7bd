"""The escalation's bookkeeping meeting a database outage, on SQLite and PostgreSQL: a failed
slot write or wake-up is neither a warning nor a failure; the step is retried from its last
checkpoint and the hop is still made exactly once."""

from __future__ import annotations

from tests.actors.test_notification_escalation_runtime import (  # noqa: F401 - fixture
    ASSIGNEE,
    BOB,
    automation,
    escalation,
    next_execution,
    put,
    role_writes,
    world,
)
from tests.actors.test_store_outage_runtime import Outage
from tests.domain.test_notification_page import TIMEOUT
from ticket_dispatcher.domain.execution import ExecutionStatus


def escalated_once(h):
    """Alice's workflow to its end: three whole ACK waits, then the hop (and the retries the
    outage costs, each well within one wait)."""
    put(h)
    execution_id = automation(h)
    for _ in range(6):
        if h.execution(execution_id).status.terminal:
            break
        h.advance(TIMEOUT)
    ex = h.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert escalation(ex)["outcome"] == "escalated"
    assert "warnings" not in escalation(ex)
    assert role_writes(h) == [("assign", "TCID-1", "acc-bob")]
    return ex


def test_an_escalation_slot_write_that_meets_an_outage_is_retried(world):  # noqa: F811
    outage = Outage(world.slots, "update_notification_slot", times=2)

    escalated_once(world)

    assert outage.remaining == 0


def test_a_wake_up_that_meets_an_outage_is_ensured_on_the_retry(world):  # noqa: F811
    outage = Outage(world.triggers, "ensure_reserved_trigger")

    first = escalated_once(world)

    assert outage.remaining == 0
    assert world.triggers.ensured == [(ASSIGNEE, "TCID-1")]
    leader = next_execution(world, first.id)
    assert world.execution(leader.id).issue_key == "TCID-1"
    assert world.jira.issues["TCID-1"].assignee == BOB
