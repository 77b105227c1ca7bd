"""What the burden report counts, read off an execution's checkpoint: each assignment made,
each card, App-urgent, page and escalation sent, with the person, the time, the policy, the
project and the ACK (docs/burden-report.md).

The store writes these rows with the checkpoint that records the send, so the report reads a
narrow table by time instead of every execution's JSON. A row is keyed by its action
(execution, rule, action index): a later checkpoint of the same action adds its ACK and
changes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from ticket_dispatcher.domain.actions.assign import AssignState
from ticket_dispatcher.domain.actions.notification_state import (
    AckSource,
    CardState,
    EscalationState,
    GuardedState,
    Outcome,
    PageState,
    UrgentState,
    notification_state,
)
from ticket_dispatcher.domain.actions.state import CallStatus
from ticket_dispatcher.domain.availability import WorkingHoursMode
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import ActionExecution, Execution, RuleExecution

# The shape of a stored row; a change to what a column means raises it.
EVENT_VERSION = 1

_ASSIGNS = (ActionType.ASSIGN.value, ActionType.ASSIGN_L2.value)


class BurdenKind(StrEnum):
    ASSIGNMENT = "assignment"
    CARD = "card"
    URGENT = "urgent"
    PAGE = "page"
    ESCALATION = "escalation"

    @property
    def interrupts(self) -> bool:
        """A page or an App-urgent message: it rings, whatever the hour."""
        return self in (BurdenKind.URGENT, BurdenKind.PAGE)


@dataclass(frozen=True)
class BurdenEvent:
    """One thing done to a person. ``email`` is whom it was done to (the assignee, the card's
    target; for an escalation the target it was taken away from) and ``leader`` whom an
    escalation went to. ``rotation`` is an assignment's receiver (``rotation_key``); the
    store fills it for a notification from the person's latest assignment of the issue."""

    execution_id: int
    rule_sequence: int
    action_index: int
    kind: BurdenKind
    email: str
    issue_key: str
    project: str
    policy_id: int
    policy_family_id: str
    sent_at: datetime
    rotation: str = ""
    leader: str = ""
    members: tuple[str, ...] = ()  # an assignment's receiver's dispatch-enabled engineers
    hours_required: bool = False  # the assignment's receiver judged working hours
    open_counts: dict[str, int] = field(default_factory=dict)  # open issues read, by email
    ack_source: AckSource | None = None
    ack_at: datetime | None = None


def rotation_key(receiver: dict | None) -> str:
    """An assign action's receiver as one stable name: ``group:sre``, ``oncall:primary``,
    ``users:a@x,b@x``."""
    if not receiver:
        return ""
    kind = str(receiver.get("type") or "")
    value = receiver.get(kind)
    if isinstance(value, list):
        value = ",".join(str(item) for item in value)
    return f"{kind}:{value}" if value is not None else kind


def project_of(issue_key: str) -> str:
    """A Jira key's project (``OPS-12`` → ``OPS``)."""
    return issue_key.rsplit("-", 1)[0] if "-" in issue_key else issue_key


def events_of(execution: Execution, rules: Iterable[RuleExecution]) -> list[BurdenEvent]:
    """The events a checkpoint of ``rules`` records: every assignment written and every
    notification sent so far in them (the store keeps the first of each), and the card's
    ACK once a guarded step saw it. A dry run does nothing to anyone: none."""
    if execution.dry_run or execution.id <= 0:
        return []
    rules = list(rules)
    if not any(action.type in _ASSIGNS or action.type in _NOTIFICATIONS
               for rule in rules for action in rule.action_executions):
        return []
    sent_at = execution.updated_at or execution.created_at
    if sent_at is None:
        return []
    ack = _ack_of(execution)
    found: list[BurdenEvent] = []
    for rule in rules:
        for action in rule.action_executions:
            event = _event_of(execution, rule, action, sent_at, ack)
            if event is not None:
                found.append(event)
    return found


_NOTIFICATIONS = (ActionType.SEND_ASSIGNMENT_NOTIFICATION.value,
                  ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT.value,
                  ActionType.PAGE_ASSIGNMENT.value,
                  ActionType.ESCALATE_ASSIGNMENT_TO_LEADER.value)


def interrupts(execution: Execution) -> bool:
    """Whether the execution could have paged or App-urgent'ed someone."""
    return any(action.type in _INTERRUPTING for action in _actions(execution))


_INTERRUPTING = (ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT.value,
                 ActionType.PAGE_ASSIGNMENT.value)


def _ack_of(execution: Execution) -> tuple[AckSource, datetime] | None:
    """The ACK a guarded step of the workflow saved: its source and its own time."""
    for action in _actions(execution):
        state = notification_state(action)
        if isinstance(state, GuardedState) and state.outcome is Outcome.ACK \
                and state.ack_source is not None and state.ack_at is not None:
            return state.ack_source, state.ack_at
    return None


def _actions(execution: Execution) -> Iterator[ActionExecution]:
    for rule in execution.rule_executions:
        yield from rule.action_executions


def _event_of(execution: Execution, rule: RuleExecution, action: ActionExecution,
              sent_at: datetime, ack: tuple[AckSource, datetime] | None) -> BurdenEvent | None:
    if action.type in _ASSIGNS:
        return _assignment(execution, rule, action, sent_at)
    if action.type not in _NOTIFICATIONS:
        return None
    state = notification_state(action)
    kind, email, leader = _sent(state)
    if kind is None or not email:
        return None
    project = _project(state) or project_of(execution.issue_key)
    source, at = ack if kind is BurdenKind.CARD and ack is not None else (None, None)
    return BurdenEvent(execution.id, rule.sequence, action.index, kind, email.lower(),
                       execution.issue_key, project, execution.policy_id,
                       execution.policy_family_id, sent_at, leader=leader.lower(),
                       ack_source=source, ack_at=at)


def _sent(state: object) -> tuple[BurdenKind | None, str, str]:
    """What a notification state says was sent, and to whom (and the leader)."""
    if isinstance(state, CardState):
        target = state.target
        if state.card.status is CallStatus.SENT and target is not None:
            return BurdenKind.CARD, target.email, ""
    elif isinstance(state, UrgentState):
        if state.urgent.status is CallStatus.SENT and state.target is not None:
            return BurdenKind.URGENT, state.target.email, ""
    elif isinstance(state, PageState):
        if state.page.status is CallStatus.ACCEPTED and state.target is not None:
            return BurdenKind.PAGE, state.target.email, ""
    elif isinstance(state, EscalationState):
        if state.outcome is Outcome.ESCALATED and state.target is not None:
            leader = state.leader.email if state.leader is not None else ""
            return BurdenKind.ESCALATION, state.target.email, leader
    return None, "", ""


def _project(state: object) -> str:
    if isinstance(state, CardState) and state.snapshot is not None:
        return state.snapshot.project
    if isinstance(state, GuardedState) and state.expected is not None:
        return state.expected.project
    return ""


def _assignment(execution: Execution, rule: RuleExecution, action: ActionExecution,
                sent_at: datetime) -> BurdenEvent | None:
    state = AssignState.load(action.context.get(AssignState.KEY))
    if not state.jira_updated or not state.assignee:
        return None
    availability = action.config.get("availability") or {}
    required = availability.get("working_hours") == WorkingHoursMode.REQUIRED.value
    return BurdenEvent(
        execution.id, rule.sequence, action.index, BurdenKind.ASSIGNMENT,
        state.assignee.lower(), execution.issue_key, project_of(execution.issue_key),
        execution.policy_id, execution.policy_family_id, sent_at,
        rotation=rotation_key(state.receiver or action.config.get("receiver")),
        members=tuple(email.lower() for email in state.candidates or ()),
        hours_required=required,
        open_counts={email.lower(): count for email, count in (state.counts or {}).items()})
