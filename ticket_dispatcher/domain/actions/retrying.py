"""An action's Jira call that a passing fault kept from its end is tried again, never done
twice (docs/design.md, "Passing faults").

``errors.fault_of`` judges the failure; the actions act on it alike. A call refused for certain
(never sent, or held by a rate limit) is made again at the next try. A write whose outcome is
unknown (a 5xx, no answer) is not repeated blindly: the next try reads the issue first, and
writes only what it does not hold yet. A read is simply made again. Until the next try the
action parks (``park_for_next_try``: a backoff, at least the ``Retry-After``, within the retry
budget, domain/retries.py); once the budget is spent, it fails with the last reason. A
notification action whose steps lie deeper raises ``PassingFault`` from the step
(``hold_for_next_try``), and parks where it catches it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.state import ActionState
from ticket_dispatcher.domain.retries import next_try, spent
from ticket_dispatcher.errors import DispatcherError, fault_of

log = logging.getLogger(__name__)

DEFAULT_RETRY_BUDGET = timedelta(minutes=30)


class PassingFault(Exception):
    """A Jira call of a notification step met a passing fault: the action parks and makes
    the step again (``park_for_next_try``). Not a ``DispatcherError``: it never reaches the
    execution, whose action catches it."""

    def __init__(self, error: DispatcherError, what: str):
        super().__init__(f"{what}: {error.message}")
        self.error, self.what = error, what


def hold_for_next_try(error: DispatcherError, what: str, allowed: bool) -> None:
    """Raise ``PassingFault`` for ``what`` when ``error`` is a passing fault and ``allowed``
    (the retry budget lasts, and the step may wait); return, for the caller's own handling
    of a failure, otherwise."""
    if allowed and fault_of(error).passing:
        raise PassingFault(error, what) from error


@dataclass
class RetryingState(ActionState):
    """The retries of an action's writes, kept with the rest of its state."""

    retries: int | None = None  # tries put off so far
    retrying_since: datetime | None = None  # when the first of them failed
    retry_reason: str | None = None  # the last one's reason
    retry_until: datetime | None = None  # the end of the budget the first one started

    def may_retry(self, now: datetime) -> bool:
        """No passing fault yet, or the budget its first one started is not spent: a step
        refused by a passing fault now parks for another try (``PassingFault``) rather than
        ending as it would without retries."""
        return self.retry_until is None or now < self.retry_until


def park_for_next_try(run: ActionRun, state: RetryingState, error: DispatcherError,
                      what: str, budget: timedelta) -> ActionResult:
    """Park the action until ``what`` is tried again after the passing fault ``error``;
    raises ``ActionError`` with the last reason once the retry budget is spent."""
    now = run.now
    fault = fault_of(error)
    since = state.retrying_since or now
    attempts = (state.retries or 0) + 1
    reason = f"{what}: {error.message}"
    due = next_try(fault.retry_after, attempts, since, now, budget)
    if due is None:
        raise ActionError(spent(reason, attempts, since, now, budget))
    state.retries, state.retrying_since, state.retry_reason = attempts, since, reason
    state.retry_until = since + budget
    if not run.execution.dry_run:
        run.ports.calls.passing_fault_retry("execution_write", fault.cause_label)
    log.warning("a write met a passing fault; it is tried again", extra={
        "issue_key": run.issue.key, "execution_id": run.execution.id, "reason": reason,
        "attempt": attempts, "next_try": due.isoformat(),
        "deadline": state.retry_until.isoformat()})
    return ActionResult.park(due)
