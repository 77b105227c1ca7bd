"""The presses of the cards' buttons (docs/lark-card-buttons.md).

A press is judged and recorded in one transaction, before Lark is answered: its event id
makes a repeat answer the same (Lark retries a callback it got no answer to), and ``acts_on``
(unique) lets at most one press act on an execution's wait. The press acts later, in the
execution, which reads it through ``ExecutionPresses`` (the guard's ``presses`` port): a
restart between the answer and the work loses nothing, and the work is done once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import peewee

from ticket_dispatcher.domain.actions.notification_press import (
    PressAnswer,
    PressOutcome,
    judge_press,
)
from ticket_dispatcher.domain.lark_callbacks import CardAction, PressAction
from ticket_dispatcher.domain.ports import CardPress
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.store.database import execute, unit_of_work, write_lock
from ticket_dispatcher.store.executions import ExecutionRepository
from ticket_dispatcher.store.models import CardPressRow, time_param
from ticket_dispatcher.timeutil import to_utc

RECORD_TRIES = 3  # a press races at most one acting press and one repeat of its own event


class CardPressRepository:
    def __init__(self, db: peewee.Database, executions: ExecutionRepository):
        self.db = db
        self._executions = executions
        table = CardPressRow._meta.table_name
        p = db.param
        self._insert = (
            f"INSERT INTO {table} (event_id, execution_id, action, outcome, acts_on, "
            f"operator_open_id, answer_json, pressed_at) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, "
            f"{p}, {p}) ON CONFLICT DO NOTHING RETURNING id")

    def answer(self, press: CardAction, now: datetime,
               leader: str = "") -> tuple[PressAnswer, bool]:
        """Judge ``press`` and record it with its answer, in one transaction; the answer, and
        whether it is a repeat's (the event was answered before, and nothing is written).
        ``InvalidInput`` when the button names no wait: nothing is written. ``leader``: the
        name an Escalate now's card gives the leader, when known."""
        with write_lock(self.db):
            # A record refused means another press got in first: this same event (a repeat,
            # answered as before), or one that acted on the wait (this one is judged again,
            # and changes nothing).
            for _ in range(RECORD_TRIES):
                stored = self._answered(press.event_id)
                if stored is not None:
                    return stored, True
                answer = self._judged(press, now, leader)
                if self._record(press, answer, now):
                    return answer, False
        raise Conflict("the press could not be recorded beside the presses racing it; Lark "
                       "calls it again")

    def pressed(self, execution_id: int) -> CardPress | None:
        """The press that acts on the execution's wait, if any."""
        with unit_of_work(self.db):
            row = CardPressRow.get_or_none(CardPressRow.acts_on == execution_id)
        return CardPress(PressAction(row.action), row.pressed_at) if row is not None else None

    def pressed_among(self, execution_ids: Sequence[int]) -> set[int]:
        if not execution_ids:
            return set()
        with unit_of_work(self.db):
            rows = CardPressRow.select(CardPressRow.acts_on).where(
                CardPressRow.acts_on.in_(list(execution_ids)))
            return {row.acts_on for row in rows if row.acts_on is not None}

    def _judged(self, press: CardAction, now: datetime, leader: str) -> PressAnswer:
        try:
            execution = self._executions.get(press.execution_id)
        except NotFound:
            execution = None
        return judge_press(execution, press, now, self.pressed(press.execution_id), leader)

    def _record(self, press: CardAction, answer: PressAnswer, now: datetime) -> bool:
        params = (press.event_id, press.execution_id, press.action.value, answer.outcome.value,
                  press.execution_id if answer.acts else None, press.operator_open_id,
                  json.dumps(answer.body, ensure_ascii=False), time_param(to_utc(now)))
        return bool(execute(self.db, self._insert, params).fetchall())

    def _answered(self, event_id: str) -> PressAnswer | None:
        row = CardPressRow.get_or_none(CardPressRow.event_id == event_id)
        if row is None:
            return None
        return PressAnswer(PressOutcome(row.outcome), json.loads(row.answer_json))


class ExecutionPresses:
    """The ``presses`` port (domain/ports.py) over the repository."""

    def __init__(self, presses: CardPressRepository, *, buttons: bool):
        self._presses = presses
        self.buttons = buttons

    def pressed(self, execution_id: int) -> CardPress | None:
        return self._presses.pressed(execution_id)

    def pressed_among(self, execution_ids: Sequence[int]) -> set[int]:
        return self._presses.pressed_among(execution_ids)
