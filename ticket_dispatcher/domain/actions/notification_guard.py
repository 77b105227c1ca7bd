"""The fresh guard of the urgent actions (N§6.3, N§6.4 step 2, N§6.5): invalidation first,
then ACK, and the ACK comment written exactly once by the action that found the ACK.

``expected`` is what an urgent action copied from Rule 1 at plan (``expected_context``):
``role``, ``project``, ``target``, ``message_id``, ``target_lark_id``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification_common import (
    fresh_issue,
    log_step,
    once,
    role_user,
    rule1_context,
    same_target,
    urgency,
    warn,
)
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.errors import DispatcherError


@dataclass(frozen=True)
class Verdict:
    invalidated: str = ""  # why the workflow is over without an ACK
    ack: str = ""  # "read" or "status"


def expected_context(run: ActionRun) -> dict:
    """What an urgent action needs from Rule 1's persisted context (N§6.3: "从 Rule 1 已持久化的
    context 读取 expected target 和 message ID"); a card that was not sent has no message."""
    rule1 = rule1_context(run.execution)
    if not rule1 or "snapshot" not in rule1:
        raise ActionError("no send_assignment_notification context to read the expected "
                          "target from", FailureCode.PLAN_FAILED)
    snapshot = rule1["snapshot"]
    sent = rule1.get("card_status") == "sent"
    return {"role": snapshot["role"], "project": snapshot["project"],
            "target": snapshot["target"],
            "message_id": rule1.get("message_id", "") if sent else "",
            "target_lark_id": rule1.get("target_lark_id", "")}


def check(run: ActionRun, context: dict, pending_statuses: list[str] | None) -> Verdict:
    """Invalidated or ACKed now? Unreadable Jira or Lark is a warning and no verdict: the
    phone channel must not be blocked by a failed read (N§1.10)."""
    expected = context["expected"]
    issue = fresh_issue(run, context, "guard")
    if issue is not None:
        if expected["target"] is None or not same_target(role_user(issue, expected["role"]),
                                                         expected["target"]):
            return Verdict(invalidated="target changed")
        if issue.project_key != expected["project"]:
            return Verdict(invalidated="project changed")
        if not urgency(run.execution, issue, run.now)["urgent"]:
            return Verdict(invalidated="urgency downgraded")
        # a missing status is no ACK; only leaving the pending statuses is (N§6.5)
        if pending_statuses is not None and issue.status and \
                issue.status not in pending_statuses:
            return Verdict(ack="status")
    if _read_by_target(run, context, expected):
        return Verdict(ack="read")
    return Verdict()


def decided(run: ActionRun, context: dict, pending_statuses: list[str] | None) -> bool:
    """Run the guard; an ACK or an invalidation is saved as the action's ``outcome`` and
    ``reason`` (True), so a resumed action ends the same way without asking again."""
    verdict = check(run, context, pending_statuses)
    if not (verdict.invalidated or verdict.ack):
        return False
    context["outcome"] = "ack" if verdict.ack else "invalidated"
    context["reason"] = verdict.ack or verdict.invalidated
    run.checkpoint()
    log_step(run, context, "assignment acknowledged" if verdict.ack
             else "assignment notification invalidated", reason=context["reason"])
    return True


def end_workflow(run: ActionRun, context: dict) -> ActionResult:
    """An ACK or an invalidation ends the workflow; an ACK first writes its comment once."""
    if context["outcome"] == "ack":
        write_ack_comment(run, context)
    return ActionResult.terminate()


def _read_by_target(run: ActionRun, context: dict, expected: dict) -> bool:
    """Only the expected target reading this card counts (N§6.5)."""
    if not expected["message_id"] or not expected["target_lark_id"]:
        return False
    try:
        readers = run.ports.lark.read_user_ids(expected["message_id"])
    except DispatcherError as exc:
        warn(context, f"guard: the card's read users could not be read ({exc.message})")
        return False
    return expected["target_lark_id"] in readers


def write_ack_comment(run: ActionRun, context: dict) -> None:
    """The ACK comment, once (N§6.5): target only, no role, channel or detection reason."""
    target = context["expected"]["target"] or {}
    name = target.get("display_name") or target.get("email", "")
    text = ("[ticket-manager] Assignment notification acknowledged\n"
            f"Target: {name} ({target.get('email', '')})")
    once(run, context, "ack_comment",
         lambda: run.ports.jira.add_internal_comment(run.issue.key, text), "written")
