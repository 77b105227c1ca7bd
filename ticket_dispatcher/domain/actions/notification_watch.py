"""A parked page wait as the ACK watcher sees it (docs/design.md, "ACK waits without a slot").

Between its page and its deadline, a ``page_assignment`` action wakes every ``poll_interval``
to look for an ACK, and most looks find nothing: ``_poll`` counts the look, runs the guard and
parks again. ``AckWatch`` lets the watcher do exactly that without the execution: it records
the look the way ``_poll`` saves it (``polls`` + 1, the next ``wake_at``), and it asks the
same guard (``look_now``) about Jira's and Lark's answers read in batches for many waits at
once. Whenever the guard has something to say — an ACK, an invalidation, a read that failed
(the execution records its own warning) — or the deadline has come, the watcher wakes the
execution instead, which reads everything again and decides as it always has.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar, cast

from ticket_dispatcher.domain.actions.base import ActionRun
from ticket_dispatcher.domain.actions.notification_guard import look_now
from ticket_dispatcher.domain.actions.notification_state import PageState
from ticket_dispatcher.domain.actions.state import CallPhase, StateError
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import (
    ActionExecution,
    ActionStatus,
    Execution,
    ExecutionStatus,
    RuleExecution,
)
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.errors import DispatcherError
from ticket_dispatcher.timeutil import parse_duration


@dataclass
class AckWatch:
    """One parked page wait: the execution as it parked (its last checkpoint), the rule and
    the action that wait. ``record_look`` keeps it in step with what is stored."""

    execution: Execution
    rule: RuleExecution
    action: ActionExecution
    deadline: datetime
    poll: timedelta
    # the page's state as stored, read once: only ``record_look`` changes it while the watcher
    # holds the wait, and it writes it back at once
    _page: PageState | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def execution_id(self) -> int:
        return self.execution.id

    @property
    def issue_key(self) -> str:
        return self.execution.issue_key

    @property
    def wake_at(self) -> datetime:
        wake_at = self.execution.wake_at
        if wake_at is None:  # ack_watch takes only a parked execution; record_look keeps it so
            raise AssertionError(f"execution {self.execution.id} is watched but not parked")
        return wake_at

    @property
    def message_id(self) -> str:
        """The card whose readers the guard asks about; "" when it asks nobody (a card that
        was not sent, a target without a Lark id, or a card with buttons: a press is its
        ACK, not a read)."""
        expected = self._state().expected
        if expected is None or not expected.target_lark_id or expected.buttons:
            return ""
        return expected.message_id

    @property
    def at_deadline(self) -> bool:
        """The wake is the deadline's: the execution itself ends (or times out) the wait."""
        return self.wake_at >= self.deadline

    def record_look(self, now: datetime, next_look: datetime | None = None) -> datetime:
        """Count a look at ``now`` and park until the next one, as ``_poll`` does: after
        ``poll``, or at ``next_look`` (the watcher's pace), never past the deadline; the
        ``wake_at`` it replaces."""
        state = self._state()
        state.polls = (state.polls or 0) + 1
        state.write(self.action.context)
        previous = self.wake_at
        self.execution.wake_at = min(next_look or now + self.poll, self.deadline)
        self.execution.updated_at = now
        return previous

    def needs_execution(self, issue: Issue | DispatcherError,
                        readers: list[str] | DispatcherError | None, now: datetime) -> bool:
        """Whether the guard, given these answers, would do more than park again: a verdict,
        or a warning to record. ``readers`` None: the guard asks Lark nothing."""
        state = PageState.load(self.action.context.get(PageState.KEY))  # the guard's own
        snapshot = issue if isinstance(issue, Issue) else Issue(self.issue_key, "")
        # The guard's look reads only ports.jira.load_issue and ports.lark.read_user_ids
        # (look_now), both of which _Answered answers: it stands in for the whole Ports.
        ports = cast(Ports, _Answered(issue, readers))
        run = ActionRun(execution=self.execution, issue=snapshot,
                        config=self.action.config, context=copy.deepcopy(self.action.context),
                        now=now, ports=ports, checkpoint=_never)
        verdict = look_now(run, state, list(self.action.config["ack_pending_statuses"]))
        return verdict.ended or bool(state.warnings)

    def _state(self) -> PageState:
        if self._page is None:
            self._page = PageState.load(self.action.context.get(PageState.KEY))
        return self._page


def ack_watch(execution: Execution) -> AckWatch | None:
    """The watch of a just-parked execution whose wait the watcher can keep, or None: its
    executing action is a ``page_assignment`` whose page is done and whose wait goes on
    (no verdict, no timeout, a deadline still ahead of ``wake_at``), with nothing half done
    (an ACK comment or page comment ``started``) that the execution must settle itself."""
    if execution.status is not ExecutionStatus.EXECUTING or execution.wake_at is None \
            or execution.dry_run:
        return None
    for rule in execution.rule_executions:
        for action in rule.action_executions:
            if action.status is ActionStatus.EXECUTING:
                return _watch_of(execution, rule, action)
    return None


def _watch_of(execution: Execution, rule: RuleExecution,
              action: ActionExecution) -> AckWatch | None:
    if action.type != ActionType.PAGE_ASSIGNMENT.value:
        return None
    try:
        state = PageState.load(action.context.get(PageState.KEY))
        poll = parse_duration(action.config["poll_interval"])
    except (StateError, KeyError, ValueError):
        return None
    settled = (state.page.phase is CallPhase.FINISHED and state.outcome is None
               and state.comment.phase is not CallPhase.STARTED
               and state.ack_comment.phase is None)
    if not settled or state.deadline is None or execution.wake_at is None \
            or execution.wake_at >= state.deadline:
        return None
    return AckWatch(execution, rule, action, state.deadline, poll)


class _Answered:
    """The two ports the guard reads, answering from what the watcher already read."""

    def __init__(self, issue: Issue | DispatcherError,
                 readers: list[str] | DispatcherError | None):
        self.jira = _Reads(issue=issue)
        self.lark = _Reads(readers=readers)


class _Reads:
    def __init__(self, *, issue: Issue | DispatcherError | None = None,
                 readers: list[str] | DispatcherError | None = None):
        self._issue, self._readers = issue, readers

    def load_issue(self, key: str) -> Issue:
        return _answer(self._issue)

    def read_user_ids(self, message_id: str) -> list[str]:
        return _answer(self._readers)


_T = TypeVar("_T")


def _answer(value: _T | DispatcherError | None) -> _T:
    if isinstance(value, DispatcherError):
        raise value
    if value is None:  # the watcher only leaves out what the guard does not ask
        raise AssertionError("the guard asked for an answer the watcher did not read")
    return value


def _never() -> None:
    raise AssertionError("the ACK watcher's look saves nothing through the behavior")
