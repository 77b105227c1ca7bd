"""A write to Jira that a passing fault refused is tried again, never done twice.

An action whose write met a transient failure (no answer, a failed connection, 429, a 5xx)
parks until the next try (domain/retries.py: a backoff, at least the ``Retry-After``, within
the retry budget) instead of failing. The execution reads the issue again when it wakes, and
the action writes only what the issue does not hold yet: a write whose answer was lost and
that landed is not made again (docs/design.md, "Passing faults").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.state import ActionState
from ticket_dispatcher.domain.retries import next_try, spent
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown, transient_cause

log = logging.getLogger(__name__)

DEFAULT_RETRY_BUDGET = timedelta(minutes=30)


class PassingFault(Exception):
    """A Jira write of a notification step, or the read that guards it, met a passing fault:
    the action parks and tries the step again (``retry_later``). Not a ``DispatcherError``:
    it never reaches the execution, whose action catches it."""

    def __init__(self, error: IntegrationError, what: str):
        super().__init__(f"{what}: {error.message}")
        self.error, self.what = error, what


def not_applied(error: IntegrationError) -> bool:
    """A write refused with certainty: Jira answered 429 (a rate limit refuses the request),
    or the call never left (a failed connection, a closed rate gate). A 5xx or no answer
    leaves the outcome unknown."""
    return error.status == 429 or (error.status is None
                                   and not isinstance(error, OutcomeUnknown))


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


def retry_later(run: ActionRun, state: RetryingState, error: IntegrationError, what: str,
                budget: timedelta) -> ActionResult:
    """Park the action until ``what`` is tried again after ``error``; raises ``ActionError``
    with the last reason once the retry budget is spent."""
    now = run.now
    since = state.retrying_since or now
    attempts = (state.retries or 0) + 1
    reason = f"{what}: {error.message}"
    due = next_try(error, attempts, since, now, budget)
    if due is None:
        raise ActionError(spent(reason, attempts, since, now, budget))
    state.retries, state.retrying_since, state.retry_reason = attempts, since, reason
    state.retry_until = since + budget
    if not run.execution.dry_run:
        run.ports.calls.transient_retry("execution_write", transient_cause(error))
    log.warning("a write met a passing fault; it is tried again", extra={
        "issue_key": run.issue.key, "execution_id": run.execution.id, "reason": reason,
        "attempt": attempts, "deadline": due.isoformat()})
    return ActionResult.park(due)
