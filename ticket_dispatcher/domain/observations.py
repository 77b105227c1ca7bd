"""What a finished assignment-notification execution tells the N§12 metrics, read from its
persisted action contexts only (never from memory, so recovery changes nothing).

``summarize`` is pure: the metrics layer turns a ``Summary`` into counter increments and
histogram observations once, when the execution becomes terminal. Labels carry no issue key or
ID (N§12): ``action``, ``result``, ``role``, ``attempt``, ``outcome``, ``event``.

- action results: ``succeeded`` (card sent, urgent sent, page accepted, leader written),
  ``failed`` (a refused call; an escalation ``leader_lookup_failed`` or ``failed``, its Jira
  write), ``unknown`` (the call's outcome was lost), ``skipped`` (not run: ACK or invalidation
  first, no card, ``blocked`` or ``no_leader``);
- events: ``card_failed`` / ``urgent_failed`` / ``page_failed`` for a failed or unknown call,
  ``ack_timeout`` for a page wait that ran out, ``leader_escalated`` for a written hop;
- ACK outcomes by the attempt whose guard found them: ``0`` before App-urgent, ``1``–``3`` the
  page waits (an escalation's guard comes after wait 3 and counts there);
- the workflow outcome: ``failed`` > ``invalidated`` > ``acked`` > ``escalated`` >
  ``unacknowledged`` (the last wait ran out) > ``completed`` (a normal, non-urgent workflow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import (
    ActionExecution,
    ActionStatus,
    Execution,
    ExecutionStatus,
)
from ticket_dispatcher.timeutil import parse_duration, parse_rfc3339

CARD = ActionType.SEND_ASSIGNMENT_NOTIFICATION.value
URGENT = ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT.value
PAGE = ActionType.PAGE_ASSIGNMENT.value
ESCALATE = ActionType.ESCALATE_ASSIGNMENT_TO_LEADER.value

# A call's saved status as a metric result; shared with the counters of notification_common.py.
CALL_RESULTS = {"sent": "succeeded", "accepted": "succeeded", "failed": "failed",
                 "unknown": "unknown"}
_ACK_OUTCOMES = {"read": "message_read", "status": "status_changed",
                 "target changed": "target_changed", "urgency downgraded": "urgency_downgraded",
                 "project changed": "project_changed"}
_FAILED_EVENT = {CARD: "card_failed", URGENT: "urgent_failed", PAGE: "page_failed"}


@dataclass(frozen=True)
class Ack:
    outcome: str
    attempt: str
    wait_seconds: float | None  # None when the start of the wait is not known


@dataclass
class Summary:
    role: str
    actions: list[tuple[str, str, str]] = field(default_factory=list)  # (action, result, attempt)
    events: list[str] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    workflow_outcome: str = "completed"
    workflow_seconds: float | None = None


def summarize(execution: Execution) -> Summary | None:
    """The N§12 observations of a terminal notification execution; None for any other."""
    actions = [a for rule in execution.rule_executions for a in rule.action_executions]
    card = next((a for a in actions if a.type == CARD), None)
    if card is None or not execution.status.terminal:
        return None
    snapshot = card.context.get("notification", {}).get("snapshot") or {}
    role = snapshot.get("role") or card.config.get("role") or ""
    summary = Summary(role=role)
    card_done = card.finished_at
    verdicts: list[str] = []
    for action in actions:
        if action.type not in (CARD, URGENT, PAGE, ESCALATE):
            continue
        result, attempt = _action_result(action), _attempt(action)
        summary.actions.append((action.type, result, attempt))
        if result in ("failed", "unknown") and action.type in _FAILED_EVENT:
            summary.events.append(_FAILED_EVENT[action.type])
        context = _context(action)
        if action.type == PAGE and context.get("outcome") == "timeout":
            summary.events.append("ack_timeout")
            summary.acks.append(Ack("timeout", attempt, _page_wait(action, context)))
        if action.type == ESCALATE and context.get("outcome") == "escalated":
            summary.events.append("leader_escalated")
        if context.get("outcome") in ("ack", "invalidated"):
            outcome = _ACK_OUTCOMES.get(context.get("reason", ""), "")
            if outcome:
                start = _wait_start(action, context, card_done)
                summary.acks.append(Ack(outcome, "3" if action.type == ESCALATE else attempt,
                                        _seconds(start, action.finished_at)))
            verdicts.append(context["outcome"])
        if action.type == CARD and context.get("outcome") in ("target_invalid", "stale"):
            verdicts.append("invalidated")
    summary.workflow_outcome = _workflow_outcome(execution, actions, verdicts)
    summary.workflow_seconds = _seconds(execution.created_at, execution.completed_at)
    return summary


def _context(action: ActionExecution) -> dict:
    for key in ("notification", "urgent", "page", "escalation"):
        if key in action.context:
            return action.context[key]
    return {}


def _attempt(action: ActionExecution) -> str:
    return str(action.config.get("attempt", "")) if action.type == PAGE else ""


def _action_result(action: ActionExecution) -> str:
    """The external call's own result when it was made (a page accepted and then cancelled
    in its wait still paged someone), else the action's."""
    context = _context(action)
    if action.type != ESCALATE:
        status = context.get({CARD: "card_status", URGENT: "urgent_status",
                              PAGE: "page_status"}[action.type])
        if status in CALL_RESULTS:
            return CALL_RESULTS[status]
    if action.status is ActionStatus.FAILED:
        return "failed"
    if action.status in (ActionStatus.SKIPPED, ActionStatus.PENDING):
        return "skipped"
    if action.type == ESCALATE:
        outcome = context.get("outcome")
        if outcome == "escalated":
            return "succeeded"
        if outcome in ("failed", "leader_lookup_failed"):
            return "failed"
        return "skipped"
    return "skipped"  # succeeded without a call: no card to mark urgent, an ACK first


def _page_wait(action: ActionExecution, context: dict) -> float | None:
    return _seconds(_wait_start(action, context, None), action.finished_at)


def _wait_start(action: ActionExecution, context: dict,
                card_done: datetime | None) -> datetime | None:
    """A page wait starts with its page (its deadline less ``ack_timeout``); the wait before
    App-urgent (attempt 0) starts when the card was done."""
    if action.type == PAGE and context.get("deadline"):
        timeout = parse_duration(action.config.get("ack_timeout", "0s"))
        return parse_rfc3339(context["deadline"]) - timeout
    if action.type == URGENT:
        return card_done
    return action.started_at


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def _workflow_outcome(execution: Execution, actions: list[ActionExecution],
                      verdicts: list[str]) -> str:
    if execution.status is ExecutionStatus.FAILED:
        return "failed"
    if "invalidated" in verdicts:
        return "invalidated"
    if "ack" in verdicts:
        return "acked"
    escalations = [_context(a).get("outcome") for a in actions if a.type == ESCALATE]
    if "escalated" in escalations:
        return "escalated"
    pages = [_context(a).get("outcome") for a in actions if a.type == PAGE]
    if "timeout" in pages:
        return "unacknowledged"
    return "completed"
