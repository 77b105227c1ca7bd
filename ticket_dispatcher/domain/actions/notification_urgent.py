"""``mark_assignment_message_urgent``: Lark App-urgent for the card the workflow sent, and
nothing else (docs/design.md, "The assignment-notification workflow").

``plan`` copies the expected target and the card's message from the card's state. ``execute``
runs the fresh guard (an ACK, its comment once, or an invalidation ends the workflow), then
App-urgent for that message only (``urgent_phase`` started → finished, ``urgent_status``
sent|failed|unknown|skipped). No message, a failed or an unknown urgent is a warning and the
workflow goes on to paging; a ``started`` urgent found after a restart is not repeated.
"""

from __future__ import annotations

from ticket_dispatcher.domain.actions.base import ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification import validate_no_config
from ticket_dispatcher.domain.actions.notification_common import (
    ack_pending_statuses,
    call_at_most_once,
    find_action,
)
from ticket_dispatcher.domain.actions.notification_guard import GuardedAction, guard_ending
from ticket_dispatcher.domain.actions.notification_state import Outcome, UrgentState
from ticket_dispatcher.domain.actions.state import CallStatus
from ticket_dispatcher.domain.catalog import ActionType


class MarkAssignmentMessageUrgent(GuardedAction):
    type = ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT.value
    state_type = UrgentState
    goes_on_unread = True
    config_check = staticmethod(validate_no_config)

    def execute_state(self, run: ActionRun, urgent: UrgentState) -> ActionResult:
        rule, action = find_action(run.execution, run.context)
        # the guard looks until it has let the urgent through once
        ending = guard_ending(run, urgent, ack_pending_statuses(rule, action.index),
                              look=urgent.urgent.phase is None)
        if ending is not None:
            return ending
        expected = urgent.expected
        if expected is None or not expected.message_id or not expected.target_lark_id:
            urgent.urgent.status = CallStatus.SKIPPED
            urgent.warn("urgent: no card message to mark urgent")
        else:
            message_id, target = expected.message_id, expected.target_lark_id

            def keep_refused(invalid: list[str]) -> None:
                urgent.invalid_user_ids = invalid
                if target in invalid:
                    urgent.warn("urgent: Lark rejected the target's user ID")

            # Lark refusing this user is a failed urgent, saved (and counted) as such
            call_at_most_once(
                run, urgent, urgent.urgent,
                lambda: run.ports.lark.urgent_app(message_id, target), CallStatus.SENT,
                on_answer=keep_refused,
                status_of=lambda invalid: CallStatus.FAILED if target in invalid
                else CallStatus.SENT,
                counted=True)
        urgent.outcome = Outcome.CONTINUED
        return ActionResult.proceed()
