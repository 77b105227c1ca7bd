"""``send_assignment_notification``: the ordinary Lark card, its ``[ticket-manager]`` comment,
and the guarded consume of the role label (docs/design.md, "The assignment-notification
workflow").

``plan`` freezes the snapshot (role, target, project, urgency, status, label) and the card's
idempotency key; the behavior saves them before any external call. ``execute`` runs the
phases in order, each external call at most once: the card (``card_phase`` prepared → started
→ finished, ``card_status`` sent|failed|unknown), then, only for a sent card, the notification
comment (``Urgent: no``), then the label (notification_label.py). A card that failed is a
completed workflow with a warning, never a failed execution: the urgent rule may still page.
Before the card, the role's escalation slot is settled for the target (escalation_slot.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.escalation_slot import settle_slot
from ticket_dispatcher.domain.actions.notification import validate_send_config
from ticket_dispatcher.domain.actions.notification_common import (
    call_at_most_once,
    completed,
    count_call,
    idempotency_key,
    notification_comment,
    urgency,
    write_comment_at_most_once,
)
from ticket_dispatcher.domain.actions.notification_label import consume_label
from ticket_dispatcher.domain.actions.notification_state import (
    CardOutcome,
    CardState,
    LabelPhase,
    Role,
    Snapshot,
    Target,
)
from ticket_dispatcher.domain.actions.retrying import (
    DEFAULT_RETRY_BUDGET,
    PassingFault,
    park_for_next_try,
)
from ticket_dispatcher.domain.actions.state import CallPhase, CallStatus
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.lark_callbacks import PressAction
from ticket_dispatcher.domain.model import DispatchContext, Issue, JiraUser
from ticket_dispatcher.errors import DispatcherError, Problem


class SendAssignmentNotification:
    type = ActionType.SEND_ASSIGNMENT_NOTIFICATION.value

    def __init__(self, retry_budget: timedelta = DEFAULT_RETRY_BUDGET):
        """``retry_budget``: how long the comment or the label write, refused by a passing
        fault, is tried again (retrying.py). Only when the issue is not urgent: an urgent
        card's App-urgent and pages never wait for a Jira write."""
        self.retry_budget = retry_budget

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return validate_send_config(config, path)

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict:
        role = config.get("role")
        card = CardState(configured_role=Role(role) if role else None, label=config.get("label"))
        return {CardState.KEY: card.dump()}

    # -- plan: what a restart recovers from; no external call -------------------------------

    def plan(self, run: ActionRun) -> None:
        with CardState.editing(run) as card:
            role = Role(run.config["role"])
            target = role.user(run.issue)
            card.snapshot = Snapshot(role, run.config["label"], run.issue.project_key,
                                     Target.of(target),
                                     urgency(run.execution, run.issue, run.now),
                                     run.issue.status, run.issue.summary)
            card.card_uuid = idempotency_key(run)  # Lark sends one card per uuid
            card.label_phase = LabelPhase.PENDING
            # Buttons while a wait is open: an urgent issue's, when Lark's callbacks come here
            if card.snapshot.urgency.urgent and run.ports.presses.buttons \
                    and not run.execution.dry_run:
                card.buttons = True
            invalid = _invalid_target(target)
            if invalid:
                card.target_invalid = invalid
                card.warn(f"no notification: the {role.display_name} {invalid}")
            else:
                card.card.phase = CallPhase.PREPARED

    # -- execute --------------------------------------------------------------------------------

    def execute(self, run: ActionRun) -> ActionResult:
        with CardState.editing(run) as card:
            try:
                return completed(self._execute(run, card), card)
            except PassingFault as fault:  # raised only while ``card.may_retry``
                return park_for_next_try(run, card, fault.error, fault.what, self.retry_budget)

    def _execute(self, run: ActionRun, card: CardState) -> ActionResult:
        if card.target_invalid:  # nobody to notify: consume the marker and end
            consume_label(run, card)
            card.outcome = CardOutcome.TARGET_INVALID
            return ActionResult.terminate()
        self._send_card(run, card)
        if card.card.status is CallStatus.SENT:
            write_comment_at_most_once(run, card, card.comment,
                                       notification_comment(card.planned_snapshot.target),
                                       retry=card.may_hold(run.now), hold=True)
        stale = consume_label(run, card)
        if stale:
            card.outcome = CardOutcome.STALE
        elif card.card.status is CallStatus.SENT and not card.warnings:
            card.outcome = CardOutcome.SENT
        else:
            card.outcome = CardOutcome.COMPLETED_WITH_WARNING
        return ActionResult.terminate() if stale else ActionResult.proceed()

    def _send_card(self, run: ActionRun, card: CardState) -> None:
        snapshot = card.planned_snapshot
        if card.card.phase is CallPhase.PREPARED and not card.target_lark_id:
            target = _target(snapshot)
            try:  # never held up by the slot: an unreadable one is a warning
                settle_slot(run, snapshot.role, target.account_id)
            except ActionError as exc:
                card.warn(exc.message)
            open_id = _lark_id(run, card, target.email)
            if not open_id:  # an identity failure is a card failure
                card.card.status, card.card.phase = CallStatus.FAILED, CallPhase.FINISHED
                card.save(run)
                count_call(run, card, card.card)  # counted like a refused send
                return
            card.target_lark_id = open_id
        content = card_body(run.issue.key, run.issue.summary, snapshot,
                            execution_id=run.execution.id if card.buttons else None)

        def keep_message_id(message_id: str) -> None:
            card.message_id = message_id

        call_at_most_once(
            run, card, card.card,
            lambda: run.ports.lark.send_card(card.target_lark_id or "", content,
                                             card.card_uuid or ""),
            CallStatus.SENT, on_answer=keep_message_id, counted=True)


def _target(snapshot: Snapshot) -> Target:
    if snapshot.target is None:  # the plan marked it invalid, and execute never sends
        raise ActionError("the card has no target to send to")
    return snapshot.target


def _invalid_target(user: JiraUser | None) -> str:
    """Why the target cannot be notified; empty when it can."""
    if user is None:
        return "is empty"
    if not user.active:
        return "is inactive"
    if not user.account_id:
        return "has no Jira account ID"
    if not user.email:
        return "has no email"
    return ""


def _lark_id(run: ActionRun, card: CardState, email: str) -> str:
    """The target's Lark open_id: Core's first, else Lark's lookup by email."""
    try:
        user = run.ports.core.user(email)
        if user is not None and user.open_id:
            return user.open_id
    except DispatcherError as exc:
        card.warn(f"Core user lookup failed ({exc.message}); asking Lark")
    try:
        open_id = run.ports.lark.open_ids_by_email([email]).get(email, "")
    except DispatcherError as exc:
        card.warn(f"card: the target's Lark ID could not be resolved ({exc.message})")
        return ""
    if not open_id:
        card.warn("card: Lark knows no user with the target's email")
    return open_id


def card_body(issue_key: str, summary: str, snapshot: Snapshot, *,
              execution_id: int | None = None, note: str = "") -> dict:
    """The card: what the issue is, then the buttons while its wait is open (``execution_id``
    names the wait in their values), or a ``note`` of how a press ended it (the card a
    press's answer puts in its place; notification_press.py)."""
    urgency = snapshot.urgency
    lines = [f"**{issue_key}** {summary}", f"Project: {snapshot.project}",
             f"Status: {snapshot.status or '-'}"]
    if urgency.field:
        lines.append(f"{urgency.field.rsplit('.', 1)[-1].capitalize()}: "
                     f"{urgency.value or '-'}")
    elements: list[dict] = [{"tag": "div", "text": {"tag": "lark_md",
                                                    "content": "\n".join(lines)}}]
    if execution_id is not None:
        elements.append({"tag": "action", "actions": [
            _button("Acknowledge", "primary", PressAction.ACK, execution_id),
            _button("Escalate now", "danger", PressAction.ESCALATE, execution_id)]})
    if note:
        elements.append({"tag": "div", "text": {"tag": "lark_md", "content": note}})
    return {
        "config": {"wide_screen_mode": True, "update_multi": True},
        "header": {"title": {"tag": "plain_text", "content":
                             f"You are the {snapshot.role.display_name} of {issue_key}"}},
        "elements": elements,
    }


def _button(text: str, kind: str, action: PressAction, execution_id: int) -> dict:
    """A button whose press Lark calls back with ``value`` (domain/lark_callbacks.py)."""
    return {"tag": "button", "text": {"tag": "plain_text", "content": text}, "type": kind,
            "value": {"action": action.value, "execution_id": execution_id}}
