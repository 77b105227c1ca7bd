"""A recorded press of a card's button on the real runtime and both databases: it wakes its
parked wait at once, the ACK watcher's next look finds it otherwise, and a restart loses
nothing."""

from __future__ import annotations

import pytest

from tests.actors.conftest import urgent_harness
from tests.actors.test_ack_watcher_runtime import start_waits
from tests.actors.test_notification_page_runtime import page_context
from tests.domain.test_notification_page import POLL
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.domain.lark_callbacks import CardAction, PressAction


@pytest.fixture
def world(store):
    harness = urgent_harness(store, LARK_VERIFICATION_TOKEN="a-token")
    yield harness
    harness.stop()


def press(world, execution_id: int, action=PressAction.ACK) -> None:
    answer, _ = world.store.card_presses.answer(
        CardAction(f"ev-{execution_id}", "ou_alice", action, execution_id,
                   f"om_td-{execution_id}-0-0"), world.clock.now())
    assert answer.acts


def acks(world) -> list[str]:
    return [text for _, _, text in world.jira.calls("add_internal_comment")
            if "acknowledged" in text]


def test_a_press_woken_at_once_ends_the_wait_without_waiting_for_the_poll(world):
    [execution_id, other] = start_waits(world, ("TCID-1", "TCID-2"))
    press(world, execution_id)

    world.runtime.wake(execution_id)
    world.wait_idle()

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert (page_context(ex)["ack_source"], page_context(ex)["reason"]) == ("button", "button")
    assert world.execution(other).status is ExecutionStatus.EXECUTING
    assert len(acks(world)) == 1


def test_the_watcher_reads_no_readers_of_a_card_with_buttons(world):
    start_waits(world, ("TCID-1",))
    reads_before = len(world.lark.reads)

    world.advance(POLL)

    assert len(world.lark.reads) == reads_before


def test_the_watchers_look_finds_a_press_nobody_woke_for(world):
    [execution_id] = start_waits(world, ("TCID-1",))
    press(world, execution_id, PressAction.ESCALATE)

    world.advance(POLL)

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert [page_context(ex, n)["outcome"] for n in (1, 2, 3)] == ["skipped"] * 3
    assert len(world.oncall.pages) == 1


def test_a_press_recorded_before_a_restart_acts_once_after_it(world):
    [execution_id] = start_waits(world, ("TCID-1",))
    press(world, execution_id)
    world.restart()

    world.advance(POLL)
    world.advance(POLL)

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED and page_context(ex)["ack_source"] == "button"
    assert len(acks(world)) == 1 and len(world.oncall.pages) == 1
