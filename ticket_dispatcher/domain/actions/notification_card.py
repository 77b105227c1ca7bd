"""``send_assignment_notification`` (SPEC §8.2, N§6.2): the ordinary Lark card, its
``[ticket-manager]`` comment, and the guarded consume of the role label.

``plan`` freezes the Rule 1 snapshot (role, target, project, urgency, status, label) and the
card's idempotency key; the behavior saves it before any external call. ``execute`` runs the
phases in order, each one at most once (N§8.2): card (``card_phase`` prepared → started →
finished, ``card_status`` sent|failed|unknown), then — only for a sent card — the notification
comment (``Urgent: no``), then the label (notification_label.py). A card that failed is a
completed-with-warning outcome, never a failed execution: Rule 2 may still page (N§6.2 item 5).
Ports: ``jira``, ``lark``, ``core`` (``Directory.user`` for the Lark open_id), ``triggers``,
``contexts`` (the role's escalation slot is settled before the card, N§7.3).
"""

from __future__ import annotations

from typing import Any

from ticket_dispatcher.domain.actions.base import ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification import validate_send_config
from ticket_dispatcher.domain.actions.notification_common import (
    ROLE_NAMES,
    count_call,
    find_action,
    once,
    role_user,
    target_json,
    urgency,
    warn,
)
from ticket_dispatcher.domain.actions.notification_escalate import settle_slot
from ticket_dispatcher.domain.actions.notification_label import consume_label
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.model import DispatchContext, Issue, JiraUser
from ticket_dispatcher.errors import DispatcherError, Problem


class SendAssignmentNotification:
    type = ActionType.SEND_ASSIGNMENT_NOTIFICATION.value

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return validate_send_config(config, path)

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict:
        return {"notification": {"role": config.get("role"), "label": config.get("label")}}

    # -- plan: the recovery anchor, no external call (N§5.3) ---------------------------------

    def plan(self, run: ActionRun) -> None:
        context = run.context.setdefault("notification", {})
        role, label = run.config["role"], run.config["label"]
        target = role_user(run.issue, role)
        context["snapshot"] = {
            "role": role, "label": label, "project": run.issue.project_key,
            "target": target_json(target),
            "urgency": urgency(run.execution, run.issue, run.now),
            "status": run.issue.status,
        }
        rule, action = find_action(run.execution, run.context)
        # Lark deduplicates a send with the same uuid, so a retried request is one card (§11).
        context["card_uuid"] = f"td-{run.execution.id}-{rule.sequence}-{action.index}"
        context["label_phase"] = "pending"
        invalid = _invalid_target(target)
        if invalid:
            context["target_invalid"] = invalid
            warn(context, f"no notification: the {ROLE_NAMES[role]} {invalid}")
        else:
            context["card_phase"] = "prepared"

    # -- execute --------------------------------------------------------------------------------

    def execute(self, run: ActionRun) -> ActionResult:
        context = run.context["notification"]
        if context.get("target_invalid"):  # N§6.2 item 2: consume the marker and stop
            consume_label(run, context)
            context["outcome"] = "target_invalid"
            return ActionResult.terminate()
        self._send_card(run, context)
        if context.get("card_status") == "sent":
            once(run, context, "notification_comment",
                 lambda: run.ports.jira.add_internal_comment(run.issue.key,
                                                             _comment(context)), "written")
        stale = consume_label(run, context)
        if stale:
            context["outcome"] = "stale"
        elif context.get("card_status") == "sent" and not context.get("warnings"):
            context["outcome"] = "sent"
        else:
            context["outcome"] = "completed_with_warning"
        return ActionResult.terminate() if stale else ActionResult.proceed()

    def _send_card(self, run: ActionRun, context: dict) -> None:
        if context.get("card_phase") == "prepared" and not context.get("target_lark_id"):
            snapshot = context["snapshot"]
            settle_slot(run, snapshot["role"], snapshot["target"]["account_id"])
            open_id = _lark_id(run, context)
            if not open_id:  # an identity failure is a card failure (N§6.2 item 2)
                context["card_status"] = "failed"
                context["card_phase"] = "finished"
                run.checkpoint()
                count_call(run, context, "card")  # counted like a refused send
                return
            context["target_lark_id"] = open_id
        card = _card(run.issue, context)
        once(run, context, "card",
             lambda: run.ports.lark.send_card(context["target_lark_id"], card,
                                              context["card_uuid"]),
             "sent", record=lambda message_id: context.update(message_id=message_id),
             counted=True)


def _invalid_target(user: JiraUser | None) -> str:
    """Why the target cannot be notified (N§6.2 item 2); empty when it can."""
    if user is None:
        return "is empty"
    if not user.active:
        return "is inactive"
    if not user.account_id:
        return "has no Jira account ID"
    if not user.email:
        return "has no email"
    return ""


def _lark_id(run: ActionRun, context: dict) -> str:
    """The target's Lark open_id: Core's first, else Lark's lookup by email (N§4)."""
    email = context["snapshot"]["target"]["email"]
    try:
        user = run.ports.core.user(email)
        if user is not None and user.open_id:
            return user.open_id
    except DispatcherError as exc:
        warn(context, f"Core user lookup failed ({exc.message}); asking Lark")
    try:
        open_id = run.ports.lark.open_ids_by_email([email]).get(email, "")
    except DispatcherError as exc:
        warn(context, f"card: the target's Lark ID could not be resolved ({exc.message})")
        return ""
    if not open_id:
        warn(context, "card: Lark knows no user with the target's email")
    return open_id


def _card(issue: Issue, context: dict) -> dict:
    snapshot = context["snapshot"]
    role = ROLE_NAMES[snapshot["role"]]
    urgency = snapshot["urgency"]
    lines = [f"**{issue.key}** {issue.summary}", f"Project: {snapshot['project']}",
             f"Status: {snapshot['status'] or '-'}"]
    if urgency["field"]:
        lines.append(f"{urgency['field'].rsplit('.', 1)[-1].capitalize()}: "
                     f"{urgency['value'] or '-'}")
    return {
        "config": {"wide_screen_mode": True},
        "header": {"title": {"tag": "plain_text",
                             "content": f"You are the {role} of {issue.key}"}},
        "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": "\n".join(lines)}}],
    }


def _comment(context: dict) -> str:
    """The notification comment: the target, and ``Urgent: no`` — only an accepted page says
    yes (N§6.2 item 4)."""
    target = context["snapshot"]["target"]
    name = target["display_name"] or target["email"]
    return ("[ticket-manager] Assignment notification sent\n"
            f"Target: {name} ({target['email']})\n"
            "Urgent: no")
