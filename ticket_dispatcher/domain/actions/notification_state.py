"""The state of the four assignment-notification actions and the values they share.

What each action keeps (docs/design.md, "The assignment-notification workflow"):

- ``notification`` (``CardState``, send_assignment_notification): the snapshot the workflow is
  about, the card and its comment, the guarded label consume and, when the issue changed under
  it, the label put back with a wake-up trigger;
- ``urgent`` (``UrgentState``), ``page`` (``PageState``) and ``escalation``
  (``EscalationState``): what they expect (copied from the card at plan), the guard's verdict
  once one ended the workflow, their own calls.

The stored shape is the one these actions have always written (``state.py``); every call made
at most once is a ``CallRecord`` stored as ``<name>_phase`` / ``<name>_status``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from ticket_dispatcher.domain.actions.base import ActionError
from ticket_dispatcher.domain.actions.retrying import RetryingState
from ticket_dispatcher.domain.actions.state import (
    CallRecord,
    CallStatus,
    call_record,
    omit_empty,
    stored,
)
from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES, ActionType
from ticket_dispatcher.domain.execution import (
    ActionExecution,
    ActionStatus,
    Execution,
    FailureCode,
)
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.timeutil import format_time


class Role(StrEnum):
    """The Jira role a notification workflow is about; its reserved source and label are in
    ``catalog.NOTIFICATION_ROLES``."""

    ASSIGNEE = "assignee"
    L2_ASSIGNEE = "l2_assignee"

    @property
    def source(self) -> str:
        """The reserved trigger source that starts this role's workflow."""
        return next(r.source for r in NOTIFICATION_ROLES if r.role == self.value)

    @property
    def display_name(self) -> str:
        """The role as a card or a page names it."""
        return "L2 Assignee" if self is Role.L2_ASSIGNEE else "Assignee"

    def user(self, issue: Issue) -> JiraUser | None:
        """Who holds this role on ``issue``."""
        return issue.l2_assignee if self is Role.L2_ASSIGNEE else issue.assignee


# -- values ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The Jira user a workflow notifies, as the card's plan saw them."""

    account_id: str
    email: str
    display_name: str
    active: bool

    @classmethod
    def of(cls, user: JiraUser | None) -> Target | None:
        if user is None:
            return None
        return cls(user.account_id, user.email, user.display_name, user.active)

    @property
    def name(self) -> str:
        """How a comment names the target."""
        return self.display_name or self.email

    def to_json(self) -> dict:
        return {"account_id": self.account_id, "email": self.email,
                "display_name": self.display_name, "active": self.active}

    @classmethod
    def from_json(cls, raw: dict) -> Target:
        return cls(raw.get("account_id") or "", raw.get("email") or "",
                   raw.get("display_name") or "", bool(raw.get("active", True)))


def same_target(user: JiraUser | None, target: Target | None) -> bool:
    """Targets compare by Jira account ID; both empty is the same (no target)."""
    if user is None or not user.account_id:
        return target is None or not target.account_id
    return target is not None and user.account_id == target.account_id


@dataclass(frozen=True)
class Urgency:
    """The issue's urgency by the execution's own urgency rule: the field it tests, the
    field's value, and whether the rule matched."""

    field: str | None
    value: str | None
    urgent: bool

    def to_json(self) -> dict:
        return {"field": self.field, "value": self.value, "urgent": self.urgent}

    @classmethod
    def from_json(cls, raw: dict) -> Urgency:
        return cls(raw.get("field"), raw.get("value"), bool(raw.get("urgent")))


@dataclass(frozen=True)
class Snapshot:
    """What the workflow is about, frozen by the card's plan; later steps compare the live
    issue with it."""

    role: Role
    label: str
    project: str
    target: Target | None
    urgency: Urgency
    status: str | None
    # what the pages say the issue is about, should a later step have to go on without a
    # fresh read of it (a checkpoint saved before it was kept has none)
    summary: str = ""

    def to_json(self) -> dict:
        raw = {"role": self.role.value, "label": self.label, "project": self.project,
               "target": self.target.to_json() if self.target else None,
               "urgency": self.urgency.to_json(), "status": self.status}
        if self.summary:  # a snapshot stored without one reads back as it was
            raw["summary"] = self.summary
        return raw

    @classmethod
    def from_json(cls, raw: dict) -> Snapshot:
        target = raw.get("target")
        return cls(Role(raw["role"]), raw.get("label") or "", raw.get("project") or "",
                   Target.from_json(target) if target else None,
                   Urgency.from_json(raw.get("urgency") or {}), raw.get("status"),
                   raw.get("summary") or "")


@dataclass(frozen=True)
class Expected:
    """What an urgent, page or escalation action copied from the card at plan: the role,
    project and target the guard compares, and the card's message; ``label`` for the
    escalation only (the label it puts back)."""

    role: Role
    project: str
    target: Target | None
    message_id: str
    target_lark_id: str
    label: str | None = None
    # The card carried buttons: the target acknowledges by pressing one (or by the status
    # change), and reading it is no ACK. A card sent without them keeps the read rule.
    buttons: bool = False

    def to_json(self) -> dict:
        raw: dict[str, Any] = {
            "role": self.role.value, "project": self.project,
            "target": self.target.to_json() if self.target else None,
            "message_id": self.message_id, "target_lark_id": self.target_lark_id}
        if self.label is not None:
            raw["label"] = self.label
        if self.buttons:
            raw["buttons"] = True
        return raw

    @classmethod
    def from_json(cls, raw: dict) -> Expected:
        target = raw.get("target")
        return cls(Role(raw["role"]), raw.get("project") or "",
                   Target.from_json(target) if target else None,
                   raw.get("message_id") or "", raw.get("target_lark_id") or "",
                   raw.get("label"), bool(raw.get("buttons")))


@dataclass(frozen=True)
class Leader:
    """The target's direct leader the escalation found, with their Jira account."""

    email: str
    account_id: str

    def to_json(self) -> dict:
        return {"email": self.email, "account_id": self.account_id}

    @classmethod
    def from_json(cls, raw: dict) -> Leader:
        return cls(raw["email"], raw["account_id"])


class IntentState(StrEnum):
    PREPARED = "prepared"  # stored before the Jira write; blocks every other escalation
    APPLIED = "applied"  # the write landed; the marker is set with it
    SUPERSEDED = "superseded"  # dropped without (more) writing: the action's record only


@dataclass(frozen=True)
class Intent:
    """An escalation's intent, the same in the role's escalation slot and in the escalating
    action's state (docs/design.md, "The escalation slot")."""

    owner_execution_id: int
    from_account_id: str
    to_account_id: str
    to_email: str
    state: IntentState

    def with_state(self, state: IntentState) -> Intent:
        return Intent(self.owner_execution_id, self.from_account_id, self.to_account_id,
                      self.to_email, state)

    def to_json(self) -> dict:
        return {"owner_execution_id": self.owner_execution_id,
                "from_account_id": self.from_account_id, "to_account_id": self.to_account_id,
                "to_email": self.to_email, "state": self.state.value}

    @classmethod
    def from_json(cls, raw: dict) -> Intent:
        return cls(raw["owner_execution_id"], raw.get("from_account_id") or "",
                   raw.get("to_account_id") or "", raw.get("to_email") or "",
                   IntentState(raw["state"]))


# -- phases and outcomes --------------------------------------------------------------------------


class LabelPhase(StrEnum):
    """The guarded consume of the role label (notification_label.py)."""

    PENDING = "pending"
    REMOVE_STARTED = "remove_started"
    REMOVED = "removed"
    RESTORED = "restored"  # a change was seen after the delete: the label is put back
    KEPT = "kept"  # the target changed before the delete: the label is the new target's


class Wakeup(StrEnum):
    """Putting the role label back and ensuring a reserved-source trigger
    (``restore_label_and_wake``). The card and the escalation store it in words of their
    own (``CARD_WAKEUP``, ``ESCALATION_WAKEUP``)."""

    REQUIRED = "required"  # the label is still to be put back
    LABEL_RESTORED = "label_restored"  # the label is back; the trigger is still to be ensured
    ENSURED = "ensured"
    FAILED = "failed"  # the trigger could not be ensured; a warning says why


# The card stores its wake-up as ``trigger_phase`` once the label is back (the label phase
# says ``restored``), so its stored ``required`` means "label back, trigger still to do".
CARD_WAKEUP = {
    "key": "trigger_phase",
    "write": {Wakeup.REQUIRED: "required", Wakeup.LABEL_RESTORED: "required",
              Wakeup.ENSURED: "ensured", Wakeup.FAILED: "failed"},
    "read": {"required": Wakeup.LABEL_RESTORED, "ensured": Wakeup.ENSURED,
             "failed": Wakeup.FAILED},
}
# The escalation stores ``wakeup_phase``: ``required`` until both are done, then ``done``
# whether or not the trigger could be ensured (a warning says so). A stored ``required`` puts
# the label back again: adding a label is idempotent.
ESCALATION_WAKEUP = {
    "key": "wakeup_phase",
    "write": {Wakeup.REQUIRED: "required", Wakeup.LABEL_RESTORED: "required",
              Wakeup.ENSURED: "done", Wakeup.FAILED: "done"},
    "read": {"required": Wakeup.REQUIRED, "done": Wakeup.ENSURED},
}


class CardOutcome(StrEnum):
    SENT = "sent"
    COMPLETED_WITH_WARNING = "completed_with_warning"
    STALE = "stale"  # the target or the urgency changed under the workflow: it ends
    TARGET_INVALID = "target_invalid"  # nobody to notify: it ends


class Outcome(StrEnum):
    """How an urgent, page or escalation action ended."""

    ACK = "ack"  # the guard saw the target acknowledge: the workflow ends
    INVALIDATED = "invalidated"  # the guard saw the workflow no longer apply: it ends
    CONTINUED = "continued"  # urgent: marked (or warned) and on to paging
    TIMEOUT = "timeout"  # page: the ACK wait ran out
    # page: its target was on time off and the page says "when_unavailable": "escalate": no
    # page, on to the next action at once (the next attempts skip alike: the escalation);
    # any of them: a maintenance window quiets it (``maintenance_window_id``)
    SKIPPED = "skipped"
    ESCALATED = "escalated"
    BLOCKED = "blocked"  # the slot forbids escalating (the reason is the slot's verdict)
    NO_LEADER = "no_leader"
    LEADER_LOOKUP_FAILED = "leader_lookup_failed"
    SUPERSEDED = "superseded"
    FAILED = "failed"  # the escalation's Jira write failed or did not apply


WORKFLOW_ENDING = (Outcome.ACK, Outcome.INVALIDATED)


class AckSource(StrEnum):
    """What told the service the target acknowledged (an ``ack`` outcome's ``ack_source``)."""

    CARD_READ = "card_read"  # the target read this very card in Lark
    STATUS_CHANGE = "status_change"  # the issue left its pending statuses
    BUTTON = "button"  # the target pressed the card's Acknowledge button


class StepResult(StrEnum):
    """How a notification action ended: the ``result`` label of its metrics, and, through
    ``ACTION_STATUS``, its status in the API and on the console's timeline."""

    SUCCEEDED = "succeeded"  # card sent, urgent sent, page accepted, leader written
    FAILED = "failed"  # its call was refused; an escalation's lookup or Jira write failed
    UNKNOWN = "unknown"  # its call's outcome was lost: it may or may not have happened
    SKIPPED = "skipped"  # no call: an ACK or invalidation first, no card, time off, blocked


# A call's saved status as a result (the live call counter uses it too).
CALL_RESULTS = {CallStatus.SENT: StepResult.SUCCEEDED, CallStatus.ACCEPTED: StepResult.SUCCEEDED,
                CallStatus.FAILED: StepResult.FAILED, CallStatus.UNKNOWN: StepResult.UNKNOWN}
# The action's status for each result. The status set has no "unknown": a call whose outcome
# was lost is not a success either, so it is ``failed`` and its error says "outcome unknown".
ACTION_STATUS = {StepResult.SUCCEEDED: ActionStatus.SUCCEEDED,
                 StepResult.FAILED: ActionStatus.FAILED,
                 StepResult.UNKNOWN: ActionStatus.FAILED,
                 StepResult.SKIPPED: ActionStatus.SKIPPED}
# What each action's call is, as an action's error names it.
_CALL_NAMES = {"card": "Lark card", "urgent": "Lark App-urgent", "page": "Oncall page"}


# -- the states -----------------------------------------------------------------------------------


@dataclass
class NotificationState(RetryingState):
    """What every notification action's state has: its business warnings (a completed
    workflow with warnings, never a failed execution), and the retries of its Jira writes
    refused by a passing fault."""

    warnings: list[str] = omit_empty()

    def warn(self, text: str) -> None:
        """A business warning; never a token or a phone number."""
        self.warnings.append(text)

    @property
    def role(self) -> Role | None:
        raise NotImplementedError

    @property
    def target(self) -> Target | None:
        raise NotImplementedError

    def log_fields(self) -> dict:
        """What this action adds to each of its log lines."""
        return {}

    @property
    def metric_attempt(self) -> str:
        """The ``attempt`` label of this action's counted calls (a page's only)."""
        return ""

    # -- how the action ended: one judgement for its status, its timeline and its metrics --

    @property
    def main_call(self) -> CallRecord | None:
        """The external call this action is about; the escalation has none of its own."""
        return None

    @property
    def ended(self) -> bool:
        """Whether the action saved how it ended (its outcome)."""
        raise NotImplementedError

    def result(self) -> StepResult | None:
        """How the action ended, read from its saved state only; None while it has not.
        The call's own result when it was made (a page accepted and then cancelled in its
        wait still paged someone), else ``skipped`` (the escalation: by its outcome)."""
        call = self.main_call
        if call is not None and call.status in CALL_RESULTS:
            return CALL_RESULTS[call.status]
        return StepResult.SKIPPED if self.ended else None

    def action_status(self) -> tuple[ActionStatus, str]:
        """The status the action completes with, and its error when it did not succeed (a
        failed step the workflow goes on from is still ``failed``)."""
        result = self.result() or StepResult.SUCCEEDED
        return ACTION_STATUS[result], self.failure(result)

    def failure(self, result: StepResult) -> str:
        """Why the action did not succeed, in a few words (its warnings say more)."""
        call = self.main_call
        what = _CALL_NAMES.get(call.name, call.name) if call is not None else ""
        if result is StepResult.UNKNOWN:
            return f"{what}: outcome unknown (it may have been sent)"
        if result is StepResult.FAILED:
            return f"{what} not sent"
        return ""


@dataclass
class CardState(NotificationState):
    KEY = "notification"

    # the configured role and label (kept from creation; the snapshot has them too)
    configured_role: Role | None = stored(key="role")
    label: str | None = None
    snapshot: Snapshot | None = None
    card_uuid: str | None = None  # the card's idempotency key
    target_invalid: str | None = None  # why nobody can be notified
    card: CallRecord = call_record("card")
    target_lark_id: str | None = None
    message_id: str | None = None
    buttons: bool | None = None  # the card carries Acknowledge and Escalate now
    comment: CallRecord = call_record("notification_comment")
    label_phase: LabelPhase | None = None
    label_check: dict[str, str] | None = None  # what the label's guards saw
    wakeup: Wakeup | None = stored(**CARD_WAKEUP)
    outcome: CardOutcome | None = None

    @property
    def planned_snapshot(self) -> Snapshot:
        """The snapshot, which the card's plan saves before anything is executed."""
        if self.snapshot is None:
            raise ActionError("the card has no snapshot: it was never planned",
                              FailureCode.EXECUTE_FAILED)
        return self.snapshot

    def may_hold(self, now: datetime) -> bool:
        """Whether the card may park to try a Jira write refused by a passing fault again:
        not for an urgent issue (the App-urgent and the pages come next and never wait for
        Jira), and only within the retry budget."""
        return not self.planned_snapshot.urgency.urgent and self.may_retry(now)

    @property
    def main_call(self) -> CallRecord | None:
        return self.card

    @property
    def ended(self) -> bool:
        return self.outcome is not None

    @property
    def role(self) -> Role | None:
        return self.snapshot.role if self.snapshot else self.configured_role

    @property
    def target(self) -> Target | None:
        return self.snapshot.target if self.snapshot else None


@dataclass
class GuardedState(NotificationState):
    """The state of an action the guard runs before (urgent, page, escalation)."""

    expected: Expected | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    ack_comment: CallRecord = call_record("ack_comment")
    # An ``ack`` outcome's source, and the moment of the ACK itself (the read's or the status
    # change's own time where the peer gives it, else when the guard saw it).
    ack_source: AckSource | None = None
    ack_at: datetime | None = None
    # The maintenance window that skipped the step (outcome ``skipped``), or ended its wait.
    maintenance_window_id: int | None = None

    @property
    def role(self) -> Role | None:
        return self.expected.role if self.expected else None

    @property
    def target(self) -> Target | None:
        return self.expected.target if self.expected else None

    @property
    def ended(self) -> bool:
        return self.outcome is not None

    @property
    def ended_workflow(self) -> bool:
        """An earlier step's guard saved an ACK or an invalidation."""
        return self.outcome in WORKFLOW_ENDING


@dataclass
class UrgentState(GuardedState):
    KEY = "urgent"

    urgent: CallRecord = call_record("urgent")
    invalid_user_ids: list[str] | None = None

    @property
    def main_call(self) -> CallRecord | None:
        return self.urgent


@dataclass
class PageState(GuardedState):
    KEY = "page"

    attempt: int | None = None
    deadline: datetime | None = None  # absolute, saved with the page's ``started`` phase
    page: CallRecord = call_record("page")
    call_id: str | None = None
    call_error: str | None = None
    comment: CallRecord = call_record("notification_comment")
    polls: int | None = None  # the guard's looks during the wait

    def log_fields(self) -> dict:
        fields: dict[str, Any] = {"attempt": self.attempt}
        if self.deadline is not None:
            fields["deadline"] = format_time(self.deadline)
        return fields

    @property
    def metric_attempt(self) -> str:
        return str(self.attempt)

    @property
    def main_call(self) -> CallRecord | None:
        return self.page

    def failure(self, result: StepResult) -> str:
        if result is StepResult.FAILED:
            return f"Oncall page attempt {self.attempt} not sent" + (
                f" ({self.call_error})" if self.call_error else "")
        return super().failure(result)


@dataclass
class EscalationState(GuardedState):
    KEY = "escalation"

    leader: Leader | None = None
    intent: Intent | None = None  # what this action stored in the slot, and what became of it
    wakeup: Wakeup | None = stored(**ESCALATION_WAKEUP)

    def result(self) -> StepResult | None:
        if self.outcome is Outcome.ESCALATED:
            return StepResult.SUCCEEDED
        if self.outcome in (Outcome.FAILED, Outcome.LEADER_LOOKUP_FAILED):
            return StepResult.FAILED
        return super().result()

    def failure(self, result: StepResult) -> str:
        if result is StepResult.FAILED:
            return f"escalation {self.outcome}" + (f": {self.reason}" if self.reason else "")
        return ""


STATE_OF_TYPE: dict[str, type[NotificationState]] = {
    ActionType.SEND_ASSIGNMENT_NOTIFICATION.value: CardState,
    ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT.value: UrgentState,
    ActionType.PAGE_ASSIGNMENT.value: PageState,
    ActionType.ESCALATE_ASSIGNMENT_TO_LEADER.value: EscalationState,
}


def notification_state(action: ActionExecution) -> NotificationState | None:
    """The saved state of a notification action; None for any other action."""
    state_type = STATE_OF_TYPE.get(action.type)
    return state_type.load(action.context.get(state_type.KEY)) if state_type else None


def card_state_of(execution: Execution) -> CardState | None:
    """The state of the execution's ``send_assignment_notification`` (the card), if any."""
    for rule in execution.rule_executions:
        for action in rule.action_executions:
            if action.type == ActionType.SEND_ASSIGNMENT_NOTIFICATION:
                return CardState.load(action.context.get(CardState.KEY))
    return None


def page_wait(action: ActionExecution) -> PageState | None:
    """The saved state of a ``page_assignment`` (its attempt and ACK deadline); None for any
    other action."""
    if action.type != ActionType.PAGE_ASSIGNMENT:
        return None
    return PageState.load(action.context.get(PageState.KEY))

