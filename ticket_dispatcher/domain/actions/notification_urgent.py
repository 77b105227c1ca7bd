"""``mark_assignment_message_urgent`` (SPEC §8.2, N§6.3): Lark App-urgent for the card Rule 1
sent, and nothing else.

``plan`` copies the expected target and this card's message ID from Rule 1's context.
``execute`` runs the fresh guard (invalidated or ACK → terminate, the ACK comment once), then
App-urgent for that message only (``urgent_phase`` started → finished, ``urgent_status``
sent|failed|unknown|skipped). No message, a failed or an unknown urgent is a warning and the
workflow goes on to paging (N§6.3); a ``started`` urgent found after a restart is not repeated.
"""

from __future__ import annotations

from typing import Any

from ticket_dispatcher.domain.actions.base import ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification import validate_no_config
from ticket_dispatcher.domain.actions.notification_common import (
    ack_pending_statuses,
    find_action,
    once,
    warn,
)
from ticket_dispatcher.domain.actions.notification_guard import (
    decided,
    end_workflow,
    expected_context,
)
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.model import DispatchContext, Issue
from ticket_dispatcher.errors import Problem


class MarkAssignmentMessageUrgent:
    type = ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT.value

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return validate_no_config(config, path)

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict:
        return {"urgent": {}}

    def plan(self, run: ActionRun) -> None:
        run.context.setdefault("urgent", {})["expected"] = expected_context(run)

    def execute(self, run: ActionRun) -> ActionResult:
        context = run.context["urgent"]
        if context.get("outcome") in ("ack", "invalidated"):
            return end_workflow(run, context)  # resumed after the verdict was saved
        if "urgent_phase" not in context:  # the guard has not let the urgent through yet
            rule, action = find_action(run.execution, run.context)
            if decided(run, context, ack_pending_statuses(rule, action.index)):
                return end_workflow(run, context)
        expected = context["expected"]
        if not expected["message_id"] or not expected["target_lark_id"]:
            context["urgent_status"] = "skipped"
            warn(context, "urgent: no card message to mark urgent")
        else:
            target = expected["target_lark_id"]

            def record(invalid: list[str]) -> None:
                context["invalid_user_ids"] = invalid
                if target in invalid:
                    warn(context, "urgent: Lark rejected the target's user ID")

            # Lark refusing this user is a failed urgent, saved (and counted) as such
            once(run, context, "urgent",
                 lambda: run.ports.lark.urgent_app(expected["message_id"], target),
                 "sent", record=record,
                 status_of=lambda invalid: "failed" if target in invalid else "sent",
                 counted=True)
        context["outcome"] = "continued"
        return ActionResult.proceed()

