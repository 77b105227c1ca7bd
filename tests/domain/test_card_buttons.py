"""The card's Acknowledge and Escalate now: the buttons on an urgent card, a recorded press as
the guard's verdict, and how a press is judged (notification_press.py)."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.domain.test_notification_page import (
    MESSAGE,
    POLL,
    TIMEOUT,
    PageWorld,
    page_context,
    page_statuses,
)
from ticket_dispatcher.domain.actions.notification_press import PressOutcome, judge_press
from ticket_dispatcher.domain.execution import ActionStatus, ExecutionStatus
from ticket_dispatcher.domain.lark_callbacks import CardAction, PressAction
from ticket_dispatcher.domain.ports import CardPress
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.timeutil import format_time


class FakePresses:
    """The ``presses`` port: cards carry buttons; ``press`` records one that acts."""

    buttons = True

    def __init__(self) -> None:
        self.presses: dict[int, CardPress] = {}

    def press(self, execution_id: int, action: PressAction, at: datetime) -> None:
        self.presses[execution_id] = CardPress(action, at)

    def pressed(self, execution_id: int) -> CardPress | None:
        return self.presses.get(execution_id)

    def pressed_among(self, execution_ids) -> set[int]:
        return {i for i in execution_ids if i in self.presses}


class ButtonWorld(PageWorld):
    def __init__(self) -> None:
        super().__init__()
        self.presses = FakePresses()

    def ports(self, **override):
        return super().ports(**{"presses": self.presses, **override})


def card_sent(world: PageWorld) -> dict:
    [(_, card, _)] = world.lark.sends
    return card


def buttons(card: dict) -> list[dict]:
    return [button for element in card["elements"] if element["tag"] == "action"
            for button in element["actions"]]


def test_an_urgent_card_carries_acknowledge_and_escalate_naming_its_execution():
    world = ButtonWorld()
    world.run()

    assert [(b["text"]["content"], b["value"]) for b in buttons(card_sent(world))] == [
        ("Acknowledge", {"action": "ack", "execution_id": 7}),
        ("Escalate now", {"action": "escalate", "execution_id": 7})]


def test_without_callbacks_the_card_has_no_buttons_and_reading_it_is_still_an_ack():
    world = PageWorld()
    ex = world.run()
    assert buttons(card_sent(world)) == []
    world.lark.readers[MESSAGE] = ["ou_alice"]

    ex = world.advance(POLL)

    assert page_context(ex)["ack_source"] == "card_read"


def test_acknowledge_mid_wait_is_a_button_ack_at_the_press_time_and_ends_the_workflow():
    world = ButtonWorld()
    ex = world.run()
    pressed_at = world.clock.now()
    world.presses.press(7, PressAction.ACK, pressed_at)

    ex = world.advance(1)

    context = page_context(ex)
    assert (context["outcome"], context["reason"]) == ("ack", "button")
    assert (context["ack_source"], context["ack_at"]) == ("button", format_time(pressed_at))
    assert context["ack_comment_status"] == "written"
    assert ex.status is ExecutionStatus.SUCCEEDED
    world.advance(TIMEOUT)
    assert len(world.oncall.pages) == 1
    assert len([c for c in world.comments() if "acknowledged" in c]) == 1


def test_reading_a_card_with_buttons_is_no_ack():
    world = ButtonWorld()
    ex = world.run()
    world.lark.readers[MESSAGE] = ["ou_alice"]

    ex = world.advance(POLL)

    assert "outcome" not in page_context(ex)
    assert ex.status is ExecutionStatus.EXECUTING
    assert MESSAGE not in world.lark.reads  # the guard does not even ask


def test_escalate_now_mid_wait_skips_the_pages_still_to_come():
    world = ButtonWorld()
    ex = world.run()
    world.presses.press(7, PressAction.ESCALATE, world.clock.now())

    ex = world.advance(1)

    assert [page_context(ex, n)["outcome"] for n in (1, 2, 3)] == ["skipped"] * 3
    assert page_context(ex, 2)["reason"] == "escalate pressed"
    assert len(world.oncall.pages) == 1
    assert ex.status is ExecutionStatus.SUCCEEDED
    # the page made still paged someone; the two never made were skipped
    assert page_statuses(ex) == [ActionStatus.SUCCEEDED, ActionStatus.SKIPPED,
                                 ActionStatus.SKIPPED]


def test_escalate_pressed_before_the_urgent_step_skips_app_urgent_and_every_page():
    world = ButtonWorld()
    world.presses.press(7, PressAction.ESCALATE, world.clock.now())

    ex = world.run()

    assert world.lark.urgents == [] and world.oncall.pages == []
    assert ex.rule_executions[1].action_executions[0].context["urgent"]["reason"] == \
        "escalate pressed"


# -- judging a press ------------------------------------------------------------------------------


def press(action=PressAction.ACK, operator="ou_alice", message=MESSAGE, event="e-1"):
    return CardAction(event, operator, action, 7, message)


def test_the_target_acknowledging_gets_a_success_toast_and_the_card_without_buttons():
    world = ButtonWorld()
    ex = world.run()

    answer = judge_press(ex, press(), world.clock.now())

    assert answer.outcome is PressOutcome.ACKNOWLEDGED and answer.acts
    assert answer.body["toast"]["type"] == "success"
    card = answer.body["card"]["data"]
    assert buttons(card) == []
    assert card["elements"][-1]["text"]["content"] == \
        f"Acknowledged by Alice at {world.clock.now():%Y-%m-%d %H:%M} UTC"


@pytest.mark.parametrize("leader,note", [
    ("Bob", "Escalated to Bob, your direct leader"), ("", "Escalated to your direct leader")])
def test_escalate_names_the_leader_when_known(leader, note):
    world = ButtonWorld()
    ex = world.run()

    answer = judge_press(ex, press(PressAction.ESCALATE), world.clock.now(), leader=leader)

    assert answer.outcome is PressOutcome.ESCALATED
    assert answer.body["card"]["data"]["elements"][-1]["text"]["content"] == note


def test_someone_else_pressing_is_told_whose_page_it_is_and_nothing_acts():
    world = ButtonWorld()
    ex = world.run()

    answer = judge_press(ex, press(operator="ou_bob"), world.clock.now())

    assert answer.outcome is PressOutcome.NOT_YOURS and not answer.acts
    assert answer.body == {"toast": {"type": "warning", "content":
                                     "This page is for Alice: only they can answer it."}}


@pytest.mark.parametrize("earlier", [None, CardPress(PressAction.ESCALATE, datetime(2026, 1, 1))])
def test_a_press_after_the_wait_ended_changes_nothing(earlier):
    world = ButtonWorld()
    ex = world.run()
    if earlier is None:  # the wait ended by an earlier ACK
        world.presses.press(7, PressAction.ACK, world.clock.now())
        ex = world.advance(1)

    answer = judge_press(ex, press(event="e-2"), world.clock.now(), earlier)

    assert answer.outcome is PressOutcome.ENDED and not answer.acts
    assert answer.body["toast"]["content"].startswith("This page has already ended")
    assert buttons(answer.body["card"]["data"]) == []


def test_a_press_naming_no_card_with_buttons_or_another_card_is_invalid():
    world = PageWorld()  # no buttons
    ex = world.run()
    with pytest.raises(InvalidInput):
        judge_press(ex, press(), world.clock.now())
    with pytest.raises(InvalidInput):
        judge_press(None, press(), world.clock.now())
    world = ButtonWorld()
    ex = world.run()
    with pytest.raises(InvalidInput, match="another card"):
        judge_press(ex, press(message="om_other"), world.clock.now())
