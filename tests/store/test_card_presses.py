"""The presses of the cards' buttons on both engines: judged and recorded at once, a repeat
answered the same, at most one press acting on a wait, even when presses race."""

from __future__ import annotations

import threading

import pytest

from tests.store.test_executions_and_triggers import NOW, make_policy, new
from ticket_dispatcher.domain.actions.notification_press import PressOutcome
from ticket_dispatcher.domain.lark_callbacks import CardAction, PressAction
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.store.models import CardPressRow

CARD = {"snapshot": {"role": "assignee", "label": "notify-assignee", "project": "TCID",
                     "target": {"account_id": "acc-alice", "email": "alice@example.com",
                                "display_name": "Alice", "active": True},
                     "urgency": {"field": "priority", "value": "P1", "urgent": True},
                     "status": "Open", "summary": "Down"},
        "target_lark_id": "ou_alice", "message_id": "om_1", "buttons": True,
        "card_phase": "finished", "card_status": "sent", "version": 1}


def card_execution(store) -> int:
    trigger, execution = new(store, make_policy(store))
    action = execution.rule_executions[0].action_executions[0]
    action.type = "send_assignment_notification"
    action.context = {"notification": dict(CARD)}
    [execution_id] = store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                             ensure_context=False, now=NOW)
    return execution_id


def press(execution_id, event="e-1", action=PressAction.ACK, operator="ou_alice"):
    return CardAction(event, operator, action, execution_id, "om_1")


def rows(store) -> int:
    with store.connection():
        return CardPressRow.select().count()


def test_a_press_acts_once_and_its_repeat_is_answered_the_same(store):
    execution_id = card_execution(store)

    answer, repeat = store.card_presses.answer(press(execution_id), NOW)
    again, repeated = store.card_presses.answer(press(execution_id), NOW)

    assert answer.outcome is PressOutcome.ACKNOWLEDGED and not repeat
    assert (again, repeated) == (answer, True)
    pressed = store.card_presses.pressed(execution_id)
    assert pressed is not None and pressed.action is PressAction.ACK
    assert pressed.pressed_at == NOW
    assert store.card_presses.pressed_among([execution_id, execution_id + 1]) == {execution_id}
    assert rows(store) == 1


def test_a_later_press_finds_the_wait_ended_and_changes_nothing(store):
    execution_id = card_execution(store)
    store.card_presses.answer(press(execution_id, action=PressAction.ESCALATE), NOW)

    answer, _ = store.card_presses.answer(press(execution_id, "e-2"), NOW)

    assert answer.outcome is PressOutcome.ENDED
    assert store.card_presses.pressed(execution_id).action is PressAction.ESCALATE


def test_someone_else_pressing_is_recorded_but_never_acts(store):
    execution_id = card_execution(store)

    answer, _ = store.card_presses.answer(press(execution_id, operator="ou_bob"), NOW)

    assert answer.outcome is PressOutcome.NOT_YOURS
    assert store.card_presses.pressed(execution_id) is None


def test_a_press_naming_nothing_writes_nothing(store):
    with pytest.raises(InvalidInput):
        store.card_presses.answer(press(424242), NOW)
    assert rows(store) == 0


def test_racing_presses_act_once(store):
    execution_id = card_execution(store)
    answers = []
    start = threading.Barrier(6)

    def one(n: int) -> None:
        start.wait(timeout=10)
        action = PressAction.ACK if n % 2 else PressAction.ESCALATE
        answers.append(store.card_presses.answer(press(execution_id, f"e-{n}", action), NOW)[0])

    threads = [threading.Thread(target=one, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    acted = [answer for answer in answers if answer.acts]
    assert len(answers) == 6 and len(acted) == 1
    assert {a.outcome for a in answers if not a.acts} == {PressOutcome.ENDED}
