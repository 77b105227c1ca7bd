"""The fresh guard of the urgent, page and escalation actions (docs/design.md, "The
assignment-notification workflow"): invalidation first, then ACK; a verdict ends the workflow,
and an ACK writes its comment exactly once, by the action that found it. A recorded press of
the card's buttons (docs/lark-card-buttons.md) comes before both: Acknowledge is an ACK, and
Escalate now skips every step but the escalation.

``Expected`` is what such an action copied from the card's state at plan
(``expected_from_card``): the role, project and target to compare, and the card's message.
``GuardedAction`` is what the three executors share around it.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification_common import (
    ack_comment,
    completed,
    fresh_issue,
    log_step,
    urgency,
    write_comment_at_most_once,
)
from ticket_dispatcher.domain.actions.notification_state import (
    AckSource,
    EscalationState,
    Expected,
    GuardedState,
    Outcome,
    card_state_of,
    same_target,
)
from ticket_dispatcher.domain.actions.retrying import (
    DEFAULT_RETRY_BUDGET,
    PassingFault,
    park_for_next_try,
)
from ticket_dispatcher.domain.actions.state import CallStatus
from ticket_dispatcher.domain.execution import Execution, FailureCode
from ticket_dispatcher.domain.lark_callbacks import PressAction
from ticket_dispatcher.domain.model import DispatchContext, Issue
from ticket_dispatcher.domain.ports import CardPress, read_time
from ticket_dispatcher.errors import DispatcherError, Problem


class GuardedAction:
    """An action the guard runs before: urgent, page, escalation. Its state (``state_type``)
    is read at the start of ``plan`` and ``execute`` and written back at the end; ``plan``
    copies what the guard compares from the card's state (``expected_from_card``)."""

    type: ClassVar[str]
    # builtins.type: in this class body, ``type`` names the action type above
    state_type: ClassVar[builtins.type[GuardedState]]
    with_label: ClassVar[bool] = False  # the escalation puts the role label back
    # Urgent and page go on while Jira cannot be read (``stand_in``): their guard reads Jira
    # itself, and a failed read is no verdict. The escalation writes Jira, so it waits.
    goes_on_unread: ClassVar[bool] = False

    def __init__(self, retry_budget: timedelta = DEFAULT_RETRY_BUDGET):
        """``retry_budget``: how long a Jira write refused by a passing fault is tried
        again (retrying.py)."""
        self.retry_budget = retry_budget

    @staticmethod
    def config_check(config: Any, path: str) -> list[Problem]:
        """The action's configuration check (notification.py); each action sets its own."""
        raise NotImplementedError

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return self.config_check(config, path)

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict:
        return {self.state_type.KEY: self.created(config).dump()}

    def created(self, config: dict) -> GuardedState:
        """The state at execution creation."""
        return self.state_type()

    def plan(self, run: ActionRun) -> None:
        with self.state_type.editing(run) as state:
            state.expected = expected_from_card(run, with_label=self.with_label)
            self.plan_state(run, state)

    def plan_state(self, run: ActionRun, state: Any) -> None:
        """What else the plan saves (nothing by default)."""

    def execute(self, run: ActionRun) -> ActionResult:
        with self.state_type.editing(run) as state:
            quieted = quiet_ending(run, state)
            if quieted is not None:
                return completed(quieted, state)
            try:
                return completed(self.execute_state(run, state), state)
            except PassingFault as fault:  # raised only while ``state.may_retry``
                return park_for_next_try(run, state, fault.error, fault.what, self.retry_budget)

    def execute_state(self, run: ActionRun, state: Any) -> ActionResult:
        raise NotImplementedError

    def stand_in(self, execution: Execution) -> Issue | None:
        """The issue as the card's plan saw it, for this step to go on with while Jira cannot
        be read; None when the step must wait for Jira (``goes_on_unread``) or there is no
        card snapshot to stand in."""
        card = card_state_of(execution)
        if not self.goes_on_unread or card is None or card.snapshot is None:
            return None
        snapshot = card.snapshot
        return Issue(execution.issue_key, snapshot.project, summary=snapshot.summary,
                     status=snapshot.status)


def quiet_ending(run: ActionRun, state: GuardedState) -> ActionResult | None:
    """A live step not ended yet that a maintenance window rules now (``quiet``, or the
    stricter ``hold``) sends nothing: no App-urgent, no page, no escalation, and a page's ACK
    wait ends at its next look. Saved as ``skipped`` with the window's id, and the workflow
    goes on to its next step, which skips alike. None when no window rules it."""
    if run.execution.dry_run or state.outcome is not None:
        return None
    ruling = run.ports.maintenance.ruling(run.execution, run.now)
    if ruling is None:
        return None
    state.outcome, state.reason = Outcome.SKIPPED, f"maintenance window {ruling.window_id}"
    state.maintenance_window_id = ruling.window_id
    state.save(run)
    log_step(run, state, "notification step skipped: a maintenance window quiets it",
             reason=state.reason, maintenance_window_id=ruling.window_id)
    return ActionResult.proceed()


@dataclass(frozen=True)
class GuardVerdict:
    invalidated: str = ""  # why the workflow is over without an ACK
    ack: AckSource | None = None
    ack_at: datetime | None = None  # the ACK's own time where the peer gives it

    @property
    def ended(self) -> bool:
        return bool(self.invalidated or self.ack)


# The saved ``reason`` of a step skipped because the target pressed Escalate now.
ESCALATE_PRESSED = "escalate pressed"
# The saved ``reason`` of an ACK, in the words older releases stored (the source is new).
ACK_REASON = {AckSource.CARD_READ: "read", AckSource.STATUS_CHANGE: "status",
              AckSource.BUTTON: "button"}


def expected_from_card(run: ActionRun, *, with_label: bool = False) -> Expected:
    """What the guard compares, read from the card's saved state (never from memory); a card
    that was not sent has no message. ``with_label``: the role label too (the escalation puts
    it back)."""
    card = card_state_of(run.execution)
    if card is None or card.snapshot is None:
        raise ActionError("no send_assignment_notification context to read the expected "
                          "target from", FailureCode.PLAN_FAILED)
    snapshot = card.snapshot
    sent = card.card.status is CallStatus.SENT
    return Expected(snapshot.role, snapshot.project, snapshot.target,
                    card.message_id or "" if sent else "", card.target_lark_id or "",
                    snapshot.label if with_label else None, bool(card.buttons) and sent)


def guard_ending(run: ActionRun, state: GuardedState, pending_statuses: list[str] | None, *,
                 look: bool) -> ActionResult | None:
    """How the guard ends the workflow, or None to go on.

    A verdict saved by an earlier step (the action resumed after it) ends the workflow again,
    without asking anyone. Else, with ``look``, the guard looks now: an ACK or an invalidation
    is saved as the action's ``outcome`` and ``reason`` and ends it. An ACK's comment is
    written once, by the action that found it."""
    if state.outcome is Outcome.SKIPPED and state.reason == ESCALATE_PRESSED:
        return ActionResult.proceed()  # resumed after the press was saved
    if not state.ended_workflow and look and _escalate_pressed(run, state):
        return ActionResult.proceed()
    if not state.ended_workflow and not (look and _record_verdict(run, state,
                                                                  pending_statuses)):
        return None
    if state.outcome is Outcome.ACK:
        target = state.expected.target if state.expected else None
        write_comment_at_most_once(run, state, state.ack_comment, ack_comment(target),
                                   retry=state.may_retry(run.now), hold=True)
    return ActionResult.terminate()


def _record_verdict(run: ActionRun, state: GuardedState,
                    pending_statuses: list[str] | None) -> bool:
    """Look; save an ACK or an invalidation (True). A press of the card's Acknowledge is an
    ACK before anything else is asked."""
    press = _press(run, state)
    if press is not None and press.action is PressAction.ACK:
        verdict = GuardVerdict(ack=AckSource.BUTTON, ack_at=press.pressed_at)
    else:
        verdict = look_now(run, state, pending_statuses)
    if not verdict.ended:
        return False
    if verdict.ack is not None:
        state.outcome, state.reason = Outcome.ACK, ACK_REASON[verdict.ack]
        state.ack_source, state.ack_at = verdict.ack, verdict.ack_at or run.now
    else:
        state.outcome, state.reason = Outcome.INVALIDATED, verdict.invalidated
    state.save(run)
    log_step(run, state, "assignment acknowledged" if verdict.ack
             else "assignment notification invalidated", reason=state.reason)
    return True


def look_now(run: ActionRun, state: GuardedState,
             pending_statuses: list[str] | None) -> GuardVerdict:
    """Invalidated or ACKed now? ``pending_statuses`` None: only a read of the card is an
    ACK. Unreadable Jira or Lark is a warning and no verdict: the phone channel must not be
    blocked by a failed read."""
    expected = state.expected
    if expected is None:
        raise ActionError("the guard has nothing to compare: the action was never planned",
                          FailureCode.EXECUTE_FAILED)
    issue = fresh_issue(run, state, "guard")
    if issue is not None:
        if expected.target is None or not same_target(expected.role.user(issue),
                                                      expected.target):
            return GuardVerdict(invalidated="target changed")
        if issue.project_key != expected.project:
            return GuardVerdict(invalidated="project changed")
        if not urgency(run.execution, issue, run.now).urgent:
            return GuardVerdict(invalidated="urgency downgraded")
        # a missing status is no ACK; only leaving the pending statuses is
        if pending_statuses is not None and issue.status and \
                issue.status not in pending_statuses:
            return GuardVerdict(ack=AckSource.STATUS_CHANGE, ack_at=issue.status_changed_at)
    # a card with buttons is acknowledged by a press, not by being read
    if not expected.buttons:
        read, read_at = _read_by_target(run, state, expected)
        if read:
            return GuardVerdict(ack=AckSource.CARD_READ, ack_at=read_at)
    return GuardVerdict()


def _press(run: ActionRun, state: GuardedState) -> CardPress | None:
    """The press of the card's buttons that acts on this wait; None for a card without."""
    if state.expected is None or not state.expected.buttons:
        return None
    return run.ports.presses.pressed(run.execution.id)


def _escalate_pressed(run: ActionRun, state: GuardedState) -> bool:
    """The target pressed Escalate now: App-urgent and every page are skipped (saved so, and
    on to the next step), and the escalation, which goes on, comes at once."""
    if isinstance(state, EscalationState):
        return False
    press = _press(run, state)
    if press is None or press.action is not PressAction.ESCALATE:
        return False
    state.outcome, state.reason = Outcome.SKIPPED, ESCALATE_PRESSED
    state.save(run)
    log_step(run, state, "notification step skipped: the target pressed Escalate now",
             reason=state.reason)
    return True


def _read_by_target(run: ActionRun, state: GuardedState,
                    expected: Expected) -> tuple[bool, datetime | None]:
    """Only the expected target reading this very card counts; when, where Lark says."""
    if not expected.message_id or not expected.target_lark_id:
        return False, None
    try:
        readers = run.ports.lark.read_user_ids(expected.message_id)
    except DispatcherError as exc:
        state.warn(f"guard: the card's read users could not be read ({exc.message})")
        return False, None
    if expected.target_lark_id not in readers:
        return False, None
    return True, read_time(readers, expected.target_lark_id)
