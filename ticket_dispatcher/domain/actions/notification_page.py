"""``page_assignment`` (SPEC §8.2, N§6.4, N§6.5): one Oncall phone page plus one ACK wait.

Three attempts are three actions of the policy; each one pages at most once, so there is never
a fourth page. ``plan`` copies the expected target and this card's message ID from Rule 1's
context. ``execute`` is re-entered after every park (SPEC §3) and after a restart, and
consults its own phases in order:

1. no ``page_phase`` yet: the fresh guard (N§6.4 steps 2–3); an ACK or an invalidation
   terminates without a page (the ACK comment once, by this action);
2. ``deadline`` (now + ``ack_timeout``, absolute) is saved with ``page_phase=started`` before
   the Oncall call and never recomputed (N§8.2); the page (``page_status``
   accepted|failed|unknown, ``call_id``, ``call_error``) runs at most once — a ``started``
   phase found after a restart is ``unknown`` and not repeated;
3. an accepted page writes its own ``Urgent: yes`` comment with the attempt number
   (``notification_comment_phase/status``, at most once, a failure only warns);
4. the wait: parked until ``min(next poll, deadline)``; each poll re-runs the guard (ACK →
   ACK comment once → terminate; invalidated → terminate); the deadline passed without an ACK
   → continue to the next attempt or the escalation.

Every page outcome — no phone number, another ``call_error``, a timeout — uses up the attempt
and still waits (N§6.4). ``outcome`` is ack|invalidated|timeout once decided, ``polls`` counts
the guard's looks during the wait.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ticket_dispatcher.domain.actions.base import ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification import validate_page_config
from ticket_dispatcher.domain.actions.notification_common import (
    ROLE_NAMES,
    find_action,
    log_step,
    once,
    warn,
)
from ticket_dispatcher.domain.actions.notification_guard import (
    decided,
    end_workflow,
    expected_context,
)
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.model import DispatchContext, Issue
from ticket_dispatcher.domain.ports import PageOutcome, PageResult
from ticket_dispatcher.errors import Problem
from ticket_dispatcher.timeutil import format_time, parse_duration, parse_rfc3339

NO_PHONE = "no_phone_number"


class PageAssignment:
    type = ActionType.PAGE_ASSIGNMENT.value

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return validate_page_config(config, path)

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict:
        return {"page": {"attempt": config.get("attempt")}}

    def plan(self, run: ActionRun) -> None:
        context = run.context.setdefault("page", {})
        context["attempt"] = run.config["attempt"]
        context["expected"] = expected_context(run)

    def execute(self, run: ActionRun) -> ActionResult:
        context = run.context["page"]
        if context.get("outcome") in ("ack", "invalidated"):
            return end_workflow(run, context)  # resumed after the verdict was saved
        if context.get("outcome") == "timeout":
            return ActionResult.proceed()
        if "page_phase" not in context:  # N§6.4 steps 2–3: no page once ACKed or invalidated
            if decided(run, context, list(run.config["ack_pending_statuses"])):
                return end_workflow(run, context)
            context["deadline"] = format_time(run.now + _seconds(run, "ack_timeout"))
        paging = context.get("page_phase") != "finished"
        if paging:
            self._page(run, context)
        if context.get("page_status") == "accepted":
            once(run, context, "notification_comment",
                 lambda: run.ports.jira.add_internal_comment(run.issue.key,
                                                             _comment(context)), "written")
        if paging and run.now < _deadline(context):
            return self._park(run, context)  # the first look is one poll after the page
        return self._poll(run, context)

    # -- steps ----------------------------------------------------------------------------------

    def _page(self, run: ActionRun, context: dict) -> None:
        """The Oncall call at most once; ``once`` saves ``started`` (with the deadline already
        in the context) before it, so a restart never pages this attempt again (N§8.2)."""
        target = context["expected"]["target"] or {}
        rule, action = find_action(run.execution, run.context)
        dedup_key = f"td-{run.execution.id}-{rule.sequence}-{action.index}"
        role = ROLE_NAMES[context["expected"]["role"]]
        title = f"Urgent {run.issue.key}: you are the {role}"
        message = f"{run.issue.key} {run.issue.summary} (attempt {context['attempt']})"

        def record(result: PageResult) -> None:
            context.update(call_id=result.call_id, call_error=result.call_error)
            if result.outcome is not PageOutcome.ACCEPTED:
                what = "no phone number" if result.call_error == NO_PHONE else (
                    result.call_error or result.outcome.value)
                warn(context, f"page attempt {context['attempt']}: not accepted ({what})")

        once(run, context, "page",
             lambda: run.ports.oncall.page(target.get("email", ""), title, message,
                                           run.issue.key, dedup_key),
             PageOutcome.ACCEPTED.value, record=record,
             status_of=lambda result: result.outcome.value, counted=True)

    def _poll(self, run: ActionRun, context: dict) -> ActionResult:
        """One look of the ACK wait (N§6.4 step 8), against the saved absolute deadline."""
        context["polls"] = context.get("polls", 0) + 1
        if decided(run, context, list(run.config["ack_pending_statuses"])):
            return end_workflow(run, context)
        if run.now >= _deadline(context):
            context["outcome"] = "timeout"
            log_step(run, context, "ACK wait timed out", warning=True, reason="timeout")
            return ActionResult.proceed()
        return self._park(run, context)

    def _park(self, run: ActionRun, context: dict) -> ActionResult:
        return ActionResult.park(min(run.now + _seconds(run, "poll_interval"),
                                     _deadline(context)))


def _seconds(run: ActionRun, key: str) -> timedelta:
    return parse_duration(run.config[key])


def _deadline(context: dict) -> datetime:
    return parse_rfc3339(context["deadline"])


def _comment(context: dict) -> str:
    """This attempt's own notification comment (N§6.4 step 6): only an accepted page says
    ``Urgent: yes``."""
    target = context["expected"]["target"] or {}
    name = target.get("display_name") or target.get("email", "")
    return ("[ticket-manager] Assignment notification sent\n"
            f"Target: {name} ({target.get('email', '')})\n"
            "Urgent: yes\n"
            f"Attempt: {context['attempt']}")
