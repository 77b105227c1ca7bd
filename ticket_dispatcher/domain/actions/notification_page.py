"""``page_assignment``: one Oncall phone page and one ACK wait (docs/design.md, "The
assignment-notification workflow").

Three attempts are three actions of the policy; each pages at most once, so there is never a
fourth page. ``plan`` copies the expected target and the card's message from the card's state.
``execute`` is entered again after every park and after a restart, and goes by its own phases:

1. no ``page_phase`` yet: the fresh guard; an ACK or an invalidation ends the workflow
   without a page (the ACK comment once, by this action);
2. the ``deadline`` (now + ``ack_timeout``, absolute) is saved with ``page_phase`` ``started``
   before the Oncall call and never computed again; the page (``page_status``
   accepted|failed|unknown, ``call_id``, ``call_error``) runs at most once: a ``started``
   phase found after a restart is ``unknown`` and not repeated;
3. an accepted page writes its own ``Urgent: yes`` comment with the attempt number (at most
   once; a failure only warns);
4. the wait: parked until ``min(next poll, deadline)``; each poll runs the guard again (an
   ACK or an invalidation ends the workflow); the deadline passed without an ACK: on to the
   next attempt or the escalation (``outcome`` ``timeout``).

Every page result (no phone number, another ``call_error``, a timeout) uses up the attempt and
still waits. ``polls`` counts the guard's looks during the wait. A page that was not accepted
completes the action ``failed`` all the same (``NotificationState.result``): the workflow going
on is not the page succeeding.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification import validate_page_config
from ticket_dispatcher.domain.actions.notification_common import (
    call_at_most_once,
    idempotency_key,
    log_step,
    notification_comment,
    write_comment_at_most_once,
)
from ticket_dispatcher.domain.actions.notification_guard import GuardedAction, guard_ending
from ticket_dispatcher.domain.actions.notification_state import Outcome, PageState
from ticket_dispatcher.domain.actions.state import CallPhase, CallStatus
from ticket_dispatcher.domain.availability import LOOKAHEAD, on_time_off
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.domain.ports import PageOutcome, PageResult
from ticket_dispatcher.errors import DispatcherError
from ticket_dispatcher.timeutil import parse_duration

NO_PHONE = "no_phone_number"


class PageAssignment(GuardedAction):
    type = ActionType.PAGE_ASSIGNMENT.value
    state_type = PageState
    goes_on_unread = True
    config_check = staticmethod(validate_page_config)

    def created(self, config: dict) -> PageState:
        return PageState(attempt=config.get("attempt"))

    def plan_state(self, run: ActionRun, page: PageState) -> None:
        page.attempt = run.config["attempt"]

    def execute_state(self, run: ActionRun, page: PageState) -> ActionResult:
        statuses = list(run.config["ack_pending_statuses"])
        ending = guard_ending(run, page, statuses, look=page.page.phase is None)
        if ending is not None:
            return ending
        if page.outcome in (Outcome.TIMEOUT, Outcome.SKIPPED):
            return ActionResult.proceed()
        if page.page.phase is None and (away := self._on_leave(run, page)) is not None:
            page.outcome, page.reason = Outcome.SKIPPED, away
            page.save(run)
            log_step(run, page, "page skipped: its target is on time off", reason=away)
            return ActionResult.proceed()
        if page.page.phase is None:  # the guard let it through: this attempt's deadline
            page.deadline = _as_stored(run.now + _seconds(run, "ack_timeout"))
        paging = page.page.phase is not CallPhase.FINISHED
        if paging:
            self._page(run, page)
        if page.page.status is CallStatus.ACCEPTED:
            target = page.expected.target if page.expected else None
            write_comment_at_most_once(run, page, page.comment,
                                       notification_comment(target, attempt=page.attempt),
                                       retry=True, hold=False)  # again at the next poll
        if paging and run.now < _deadline(page):
            return self._park(run, page)  # the first look is one poll after the page
        return self._poll(run, page, statuses)

    # -- steps ----------------------------------------------------------------------------------

    def _on_leave(self, run: ActionRun, page: PageState) -> str | None:
        """With ``"when_unavailable": "escalate"``: why the target may not be paged (on time
        off at the page's time), else None. A failed read pages as without the key: the phone
        channel is not blocked by the engineers' table."""
        if run.config.get("when_unavailable") != "escalate":
            return None
        target = page.expected.target if page.expected else None
        if target is None or not target.email:
            return None
        email = target.email.lower()
        try:
            entries = run.ports.engineers.time_off([email], run.now, run.now + LOOKAHEAD)
        except DispatcherError as exc:
            page.warn(f"page attempt {page.attempt}: time off not read ({exc.message}); paged")
            return None
        hindrance = on_time_off(None, entries.get(email, []), run.now)  # times in UTC
        return f"{email} {hindrance.sentence}" if hindrance is not None else None

    def _page(self, run: ActionRun, page: PageState) -> None:
        """The Oncall call, at most once: ``started`` is saved (with the deadline already in
        the state) before it, so a restart never pages this attempt again."""
        expected = page.expected
        target = expected.target if expected else None
        role = expected.role.display_name if expected else ""
        title = f"Urgent {run.issue.key}: you are the {role}"
        message = f"{run.issue.key} {run.issue.summary} (attempt {page.attempt})"
        dedup_key = idempotency_key(run)

        def keep_result(result: PageResult) -> None:
            page.call_id, page.call_error = result.call_id, result.call_error
            if result.outcome is not PageOutcome.ACCEPTED:
                what = "no phone number" if result.call_error == NO_PHONE else (
                    result.call_error or result.outcome.value)
                page.warn(f"page attempt {page.attempt}: not accepted ({what})")

        call_at_most_once(
            run, page, page.page,
            lambda: run.ports.oncall.page(target.email if target else "", title, message,
                                          run.issue.key, dedup_key),
            CallStatus.ACCEPTED, on_answer=keep_result,
            status_of=lambda result: CallStatus(result.outcome.value), counted=True)

    def _poll(self, run: ActionRun, page: PageState, statuses: list[str]) -> ActionResult:
        """One look of the ACK wait, against the saved absolute deadline."""
        page.polls = (page.polls or 0) + 1
        ending = guard_ending(run, page, statuses, look=True)
        if ending is not None:
            return ending
        if run.now >= _deadline(page):
            page.outcome = Outcome.TIMEOUT
            log_step(run, page, "ACK wait timed out", warning=True, reason="timeout")
            return ActionResult.proceed()
        return self._park(run, page)

    def _park(self, run: ActionRun, page: PageState) -> ActionResult:
        return ActionResult.park(min(run.now + _seconds(run, "poll_interval"),
                                     _deadline(page)))


def _seconds(run: ActionRun, key: str) -> timedelta:
    return parse_duration(run.config[key])


def _as_stored(time: datetime) -> datetime:
    """``time`` to the millisecond, as it is stored: the wait keeps the deadline it saved."""
    return time.replace(microsecond=time.microsecond // 1000 * 1000)


def _deadline(page: PageState) -> datetime:
    if page.deadline is None:
        raise ActionError("the page has no deadline: it never started",
                          FailureCode.EXECUTE_FAILED)
    return page.deadline
