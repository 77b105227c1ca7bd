"""What a finished assignment-notification execution tells the metrics, read from its saved
action states only (never from memory, so recovery changes nothing).

``summarize`` is pure: the metrics layer turns a ``Summary`` into counter increments and
histogram observations once, when the execution becomes terminal. Labels carry no issue key or
ID (docs/operations.md, "Metrics"): ``action``, ``result``, ``role``, ``attempt``,
``outcome``, ``event``.

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

from ticket_dispatcher.domain.actions.notification_state import (
    CardOutcome,
    CardState,
    GuardedState,
    NotificationState,
    Outcome,
    PageState,
    UrgentState,
    notification_state,
)
from ticket_dispatcher.domain.execution import (
    ActionExecution,
    ActionStatus,
    Execution,
    ExecutionStatus,
)
from ticket_dispatcher.timeutil import parse_duration

_ACK_OUTCOMES = {"read": "message_read", "status": "status_changed", "button": "button",
                 "target changed": "target_changed", "urgency downgraded": "urgency_downgraded",
                 "project changed": "project_changed"}
_FAILED_EVENT = {CardState: "card_failed", UrgentState: "urgent_failed",
                 PageState: "page_failed"}


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


@dataclass(frozen=True)
class _Step:
    """One notification action of the execution, with its saved state."""

    action: ActionExecution
    state: NotificationState


def summarize(execution: Execution) -> Summary | None:
    """The observations of a terminal notification execution; None for any other."""
    steps = [_Step(action, state) for rule in execution.rule_executions
             for action in rule.action_executions
             if (state := notification_state(action)) is not None]
    card = next((step for step in steps if isinstance(step.state, CardState)), None)
    if card is None or not execution.status.terminal:
        return None
    role = card.state.role or card.action.config.get("role") or ""
    summary = Summary(role=str(role))
    verdicts: list[str] = []
    for step in steps:
        _observe(step, card.action.finished_at, summary, verdicts)
    summary.workflow_outcome = _workflow_outcome(execution, steps, verdicts)
    summary.workflow_seconds = _seconds(execution.created_at, execution.completed_at)
    return summary


def _observe(step: _Step, card_done: datetime | None, summary: Summary,
             verdicts: list[str]) -> None:
    action, state = step.action, step.state
    result, attempt = _action_result(step), _attempt(step)
    summary.actions.append((action.type, result, attempt))
    if result in ("failed", "unknown") and type(state) in _FAILED_EVENT:
        summary.events.append(_FAILED_EVENT[type(state)])
    if isinstance(state, PageState) and state.outcome is Outcome.TIMEOUT:
        summary.events.append("ack_timeout")
        summary.acks.append(Ack("timeout", attempt, _seconds(_wait_start(step, None),
                                                             action.finished_at)))
    if isinstance(state, GuardedState):
        if state.outcome is Outcome.ESCALATED:
            summary.events.append("leader_escalated")
        if state.ended_workflow:
            outcome = _ACK_OUTCOMES.get(state.reason or "", "")
            if outcome:
                escalation = not isinstance(state, PageState | UrgentState)
                summary.acks.append(Ack(outcome, "3" if escalation else attempt,
                                        _seconds(_wait_start(step, card_done),
                                                 action.finished_at)))
            verdicts.append(str(state.outcome))
    if isinstance(state, CardState) and state.outcome in (CardOutcome.TARGET_INVALID,
                                                          CardOutcome.STALE):
        verdicts.append("invalidated")


def _attempt(step: _Step) -> str:
    return str(step.action.config.get("attempt", "")) if isinstance(step.state, PageState) \
        else ""


def _action_result(step: _Step) -> str:
    """The action's own judgement of how it ended (``NotificationState.result``, the one
    its status in the API was completed with); an action that never got that far is
    ``failed`` by a technical error, else ``skipped`` (cancelled, never run)."""
    result = step.state.result()
    if result is not None:
        return result.value
    return "failed" if step.action.status is ActionStatus.FAILED else "skipped"


def _wait_start(step: _Step, card_done: datetime | None) -> datetime | None:
    """A page wait starts with its page (its deadline less ``ack_timeout``); the wait before
    App-urgent (attempt 0) starts when the card was done."""
    action, state = step.action, step.state
    if isinstance(state, PageState) and state.deadline is not None:
        return state.deadline - parse_duration(action.config.get("ack_timeout", "0s"))
    if isinstance(state, UrgentState):
        return card_done
    return action.started_at


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def _workflow_outcome(execution: Execution, steps: list[_Step], verdicts: list[str]) -> str:
    if execution.status is ExecutionStatus.FAILED:
        return "failed"
    if "invalidated" in verdicts:
        return "invalidated"
    if "ack" in verdicts:
        return "acked"
    outcomes = [step.state.outcome for step in steps if isinstance(step.state, GuardedState)]
    if Outcome.ESCALATED in outcomes:
        return "escalated"
    if Outcome.TIMEOUT in outcomes:
        return "unacknowledged"
    return "completed"
