"""A press of a card's Acknowledge or Escalate now, judged against the execution whose wait the
button names (docs/lark-card-buttons.md).

The answer is decided here, from the execution as stored, and Lark is answered with it at once:
a toast, and for a press that acts, the card with its buttons replaced by what the press did.
The press itself acts later, in the execution: it is recorded (store/card_presses.py), and the
guard of the next step or of the wait's next look reads it (notification_guard.py).

- Only the person the card was sent to may press: anyone else gets a toast naming whose page it
  is, and nothing happens.
- A press after the wait ended (an ACK, an invalidation, the escalation begun, the execution
  over, an earlier press) gets a toast saying so, and nothing happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from ticket_dispatcher.domain.actions.notification_card import card_body
from ticket_dispatcher.domain.actions.notification_state import (
    CardState,
    EscalationState,
    GuardedState,
    Outcome,
    card_state_of,
    notification_state,
)
from ticket_dispatcher.domain.execution import ActionStatus, Execution
from ticket_dispatcher.domain.lark_callbacks import CardAction, PressAction
from ticket_dispatcher.domain.ports import CardPress
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.timeutil import to_utc


class PressOutcome(StrEnum):
    """How a press was answered: the ``outcome`` label of the presses metric."""

    ACKNOWLEDGED = "acknowledged"
    ESCALATED = "escalated"
    NOT_YOURS = "not_yours"  # the operator is not the person paged
    ENDED = "ended"  # the wait had ended already


ACTED = {PressAction.ACK: PressOutcome.ACKNOWLEDGED, PressAction.ESCALATE: PressOutcome.ESCALATED}


@dataclass(frozen=True)
class PressAnswer:
    outcome: PressOutcome
    body: dict  # what Lark is answered: {"toast": …, "card": …}

    @property
    def acts(self) -> bool:
        return self.outcome in (PressOutcome.ACKNOWLEDGED, PressOutcome.ESCALATED)


def judge_press(execution: Execution | None, press: CardAction, now: datetime,
                earlier: CardPress | None = None, leader: str = "") -> PressAnswer:
    """How to answer ``press``; ``earlier``: a press that acted on this wait before;
    ``leader``: the direct leader's name, when Core told it in time.
    ``InvalidInput`` (400) when the button names no wait with buttons, or another card's."""
    card = card_state_of(execution) if execution is not None else None
    if execution is None or card is None or not card.buttons or card.snapshot is None \
            or not card.message_id:
        raise InvalidInput("the button names no card with buttons", [Problem(
            "event.action.value.execution_id", "names no notification card with buttons")])
    if press.message_id and press.message_id != card.message_id:
        raise InvalidInput("the button names another card's wait", [Problem(
            "event.context.open_message_id", "is not the card of the execution the button "
                                             "names")])
    target = card.snapshot.target
    name = target.name if target is not None else "someone else"
    if press.operator_open_id != card.target_lark_id:
        return PressAnswer(PressOutcome.NOT_YOURS, {"toast": _toast(
            "warning", f"This page is for {name}: only they can answer it.")})
    ended = _ended(execution, earlier)
    if ended:
        return PressAnswer(PressOutcome.ENDED, {
            "toast": _toast("info", f"This page has already ended ({ended}); nothing changed."),
            "card": _card(execution, card, f"This page has ended: {ended}.")})
    if press.action is PressAction.ACK:
        note = f"Acknowledged by {name} at {_clock(now)}"
        toast = _toast("success", f"Acknowledged: no more pages for {execution.issue_key}.")
    else:
        to = f"{leader}, your direct leader" if leader else "your direct leader"
        note = f"Escalated to {to}"
        toast = _toast("success", f"Escalating {execution.issue_key} to {to}.")
    return PressAnswer(ACTED[press.action], {"toast": toast, "card": _card(execution, card,
                                                                             note)})


def _ended(execution: Execution, earlier: CardPress | None) -> str:
    """Why the wait is over already; "" while it is open."""
    if earlier is not None:
        return "already acknowledged" if earlier.action is PressAction.ACK \
            else "escalation already requested"
    for rule in execution.rule_executions:
        for action in rule.action_executions:
            state = notification_state(action)
            if isinstance(state, EscalationState) and (
                    action.status is not ActionStatus.PENDING or state.outcome is not None):
                return "escalated" if state.outcome is Outcome.ESCALATED else \
                    "the escalation step has begun"
            if isinstance(state, GuardedState) and state.outcome is Outcome.ACK:
                return "acknowledged"
            if isinstance(state, GuardedState) and state.outcome is Outcome.INVALIDATED:
                return f"it no longer applies: {state.reason}"
    if execution.status.terminal:
        return "its workflow is over"
    return ""


def _card(execution: Execution, card: CardState, note: str) -> dict:
    snapshot = card.snapshot
    assert snapshot is not None  # judge_press checked it
    return {"type": "raw", "data": card_body(execution.issue_key, snapshot.summary, snapshot,
                                             note=note)}


def _toast(kind: str, content: str) -> dict:
    return {"type": kind, "content": content}


def _clock(moment: datetime) -> str:
    return to_utc(moment).strftime("%Y-%m-%d %H:%M UTC")
