"""What the assignment-notification actions share: where the running action sits in its
execution, its idempotency key, the issue's urgency by the execution's own rule, the ACK
statuses of a page, fresh reads of the issue, the comments, the log lines, and external calls
made at most once (docs/design.md, "Checkpoints and at-most-once"). Card, App-urgent and page
calls are counted through ``ports.calls`` as soon as their result is saved (``count_call``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ticket_dispatcher.domain.actions.base import ActionResult, ActionRun, ResultKind
from ticket_dispatcher.domain.actions.notification_state import (
    CALL_RESULTS,
    NotificationState,
    Target,
    Urgency,
)
from ticket_dispatcher.domain.actions.retrying import PassingFault, hold_for_next_try
from ticket_dispatcher.domain.actions.state import CallPhase, CallRecord, CallStatus
from ticket_dispatcher.domain.catalog import URGENCY_FIELDS, ActionType
from ticket_dispatcher.domain.conditions import ConditionError, evaluate
from ticket_dispatcher.domain.execution import ActionExecution, Execution, RuleExecution
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.errors import DispatcherError, fault_of

log = logging.getLogger("ticket_dispatcher.notification")

COMMENT_PREFIX = "[ticket-manager] "


# -- the running action in its execution ----------------------------------------------------------


def find_action(execution: Execution, context: dict) -> tuple[RuleExecution, ActionExecution]:
    """The rule and action execution whose context is ``context`` (the one running now)."""
    for rule in execution.rule_executions:
        for action in rule.action_executions:
            if action.context is context:
                return rule, action
    raise LookupError("the running action is not part of its execution")


def idempotency_key(run: ActionRun) -> str:
    """The running action's key for a peer that refuses a duplicate: Lark a second card with
    it, Oncall a second page. Stable across restarts: the execution, the rule, the action."""
    rule, action = find_action(run.execution, run.context)
    return f"td-{run.execution.id}-{rule.sequence}-{action.index}"


def ack_pending_statuses(rule: RuleExecution, index: int, *,
                         before: bool = False) -> list[str] | None:
    """The ``ack_pending_statuses`` of the ``page_assignment`` nearest to action ``index`` of
    ``rule``: the next one after it, or with ``before`` the last one before it. None when
    there is none: then only the target reading the card is an ACK."""
    actions = rule.action_executions
    nearest = reversed(actions[:index]) if before else iter(actions[index + 1:])
    for action in nearest:
        if action.type == ActionType.PAGE_ASSIGNMENT:
            return list(action.config.get("ack_pending_statuses") or [])
    return None


# -- the issue ------------------------------------------------------------------------------------


def urgency_condition(execution: Execution) -> dict | None:
    """The urgency rule's condition: the first rule testing an urgency field with ``in``
    (docs/policies.md, "Assignment-notification policies")."""
    for rule in execution.rule_executions:
        when = rule.when or {}
        if when.get("field") in URGENCY_FIELDS and when.get("operator") == "in":
            return when
    return None


def urgency(execution: Execution, issue: Issue, now: datetime) -> Urgency:
    """The urgency of ``issue`` by the execution's frozen urgency rule; a missing or unknown
    value is not urgent."""
    when = urgency_condition(execution)
    if when is None:
        return Urgency(None, None, False)
    field = when["field"]
    value = issue.severity if field == "issue.custom_fields.severity" else issue.priority
    try:
        urgent, _ = evaluate(when, issue, now)
    except ConditionError:
        urgent = False
    return Urgency(field, value, urgent)


def fresh_issue(run: ActionRun, state: NotificationState, purpose: str, *,
                retry: bool = False) -> Issue | None:
    """A live read of the issue (not the execution's snapshot); None with a warning when Jira
    cannot answer, or with ``retry`` ``PassingFault`` when a passing fault kept it from
    answering. What the load for this step answered (the issue, or its error) counts once: a
    woken wait's guard need not read Jira twice in a row, while a later read in the step (the
    label post-check) asks."""
    loaded, run.live_issue = run.live_issue, None
    try:
        if isinstance(loaded, DispatcherError):
            raise loaded
        return loaded if loaded is not None else run.ports.jira.load_issue(run.issue.key)
    except DispatcherError as exc:
        hold_for_next_try(exc, purpose, retry)
        state.warn(f"{purpose}: the issue could not be read ({exc.message})")
        return None


# -- the comments ---------------------------------------------------------------------------------


def notification_comment(target: Target | None, *, attempt: int | None = None) -> str:
    """The comment of a card (``Urgent: no``) or of an accepted page (``Urgent: yes`` with its
    attempt): only an accepted page says yes."""
    lines = ["Assignment notification sent", _target_line(target)]
    lines += ["Urgent: no"] if attempt is None else ["Urgent: yes", f"Attempt: {attempt}"]
    return COMMENT_PREFIX + "\n".join(lines)


def ack_comment(target: Target | None) -> str:
    """The ACK comment: the target only, no role, channel or reason."""
    return COMMENT_PREFIX + "\n".join(["Assignment notification acknowledged",
                                       _target_line(target)])


def _target_line(target: Target | None) -> str:
    name, email = (target.name, target.email) if target else ("", "")
    return f"Target: {name} ({email})"


def write_comment_at_most_once(run: ActionRun, state: NotificationState, call: CallRecord,
                               text: str, *, retry: bool, hold: bool) -> None:
    """Write ``text`` as an internal Jira comment, at most once (``call``).

    With ``retry``, a comment Jira refused with certainty (a 429, a call that never left) was
    not written, so it is tried again: with ``hold`` the step parks for it (``PassingFault``);
    without, it stays unwritten for the step's next entry (a page's next poll) and warns. A
    comment whose answer was lost (a 5xx, no answer) may be in Jira: never written again."""
    try:
        call_at_most_once(run, state, call,
                          lambda: run.ports.jira.add_internal_comment(run.issue.key, text),
                          CallStatus.WRITTEN, retry_refused=retry)
    except PassingFault as fault:
        if hold:
            raise
        state.warn(f"{fault}; tried again at the next look")


# -- calls made at most once ----------------------------------------------------------------------


def call_at_most_once(run: ActionRun, state: NotificationState, call: CallRecord,
                      make_call: Callable[[], Any], success: CallStatus, *,
                      on_answer: Callable[[Any], None] | None = None,
                      status_of: Callable[[Any], CallStatus] | None = None,
                      counted: bool = False, retry_refused: bool = False) -> None:
    """Make ``make_call`` at most once across restarts.

    ``call.phase`` is saved ``started`` before the call; a ``started`` phase found on entry
    means the result was lost, so the status is ``unknown`` and nothing is called. On an
    answer, ``on_answer`` keeps it in the state, saved with the status; ``status_of`` names
    the status from the answer instead of ``success`` (a page answers accepted, failed or
    unknown). A lost answer (``Fault.answer_lost``) is ``unknown``, any other
    ``DispatcherError`` ``failed``; ``CallAbandoned`` (shutdown) passes through with the phase
    ``started``. ``counted``: the settled status goes to ``ports.calls`` right after the
    checkpoint that saved it. ``retry_refused``: a call refused with certainty
    (``Fault.repeatable``: never sent, or held by a rate limit) is not settled; its phase goes
    back to none and ``PassingFault`` is raised, so the caller decides when to make it again."""
    if call.phase is CallPhase.FINISHED:
        return
    if call.phase is CallPhase.STARTED:
        call.status = CallStatus.UNKNOWN
        state.warn(f"{call.name}: interrupted after it started; not repeated (outcome unknown)")
        _settle(run, state, call, counted, warning=True,
                reason="interrupted after it started; not repeated")
        return
    call.phase = CallPhase.STARTED
    state.save(run)
    try:
        call.status = _make(state, call.name, make_call, success, on_answer, status_of,
                            retry_refused)
    except PassingFault:
        call.phase = None  # nothing reached the peer: as if never started
        state.save(run)
        raise
    reason = state.warnings[-1] if call.status != success and state.warnings else ""
    _settle(run, state, call, counted, warning=call.status not in (success, CallStatus.SENT),
            reason=reason)


def _make(state: NotificationState, name: str, make_call: Callable[[], Any],
          success: CallStatus, on_answer: Callable[[Any], None] | None,
          status_of: Callable[[Any], CallStatus] | None, retry_refused: bool) -> CallStatus:
    """The call's status; a failure is a warning, never an error."""
    try:
        answer = make_call()
    except DispatcherError as exc:
        fault = fault_of(exc)
        if fault.answer_lost:
            state.warn(f"{name}: outcome unknown ({exc.message})")
            return CallStatus.UNKNOWN
        if retry_refused and fault.repeatable:
            raise PassingFault(exc, name.replace("_", " ")) from exc
        state.warn(f"{name}: failed ({exc.message})")  # a 5xx too: the peer answered
        return CallStatus.FAILED
    if on_answer is not None:
        on_answer(answer)
    return status_of(answer) if status_of is not None else success


def _settle(run: ActionRun, state: NotificationState, call: CallRecord, counted: bool, *,
            warning: bool, reason: str) -> None:
    """Save the settled status (phase ``finished``), count it, and log it."""
    call.phase = CallPhase.FINISHED
    state.save(run)
    if counted:
        count_call(run, state, call)
    log_step(run, state, f"{call.name.replace('_', ' ')} {call.status}", warning=warning,
             reason=reason)


def count_call(run: ActionRun, state: NotificationState, call: CallRecord) -> None:
    """Tell ``ports.calls`` the saved status of a card, urgent or page call as it happens, so
    an alert need not wait for the workflow's end (docs/operations.md, "Metrics").

    Called only after the checkpoint that saved the status: a restart finds the phase
    ``finished`` and counts nothing, and a call whose ``started`` phase is found after a
    restart counts once, as ``unknown``. A process that dies between that checkpoint and this
    call loses the count; it never counts twice. Live executions only: a dry run never calls
    out, and is never counted."""
    result = CALL_RESULTS.get(call.status) if call.status is not None else None
    if result is None or run.execution.dry_run:
        return
    role = state.role.value if state.role else ""
    attempt = state.metric_attempt if call.name == "page" else ""
    run.ports.calls.call_settled(call.name, result.value, role, attempt)


# -- how the action ended ------------------------------------------------------------------------


def completed(result: ActionResult, state: NotificationState) -> ActionResult:
    """``result`` with the action's own status, judged from its saved state the way its
    metrics judge it (``NotificationState.result``): a page that was not sent completes
    ``failed`` though the workflow goes on; a step with no call to make, ``skipped``. A park
    is not an end."""
    if result.kind is ResultKind.PARK:
        return result
    return result.ended(*state.action_status())


# -- logs -----------------------------------------------------------------------------------------


def log_step(run: ActionRun, state: NotificationState, message: str, *, warning: bool = False,
             **fields: Any) -> None:
    """One log line per notification step (card, urgent, page attempt, comments, ACK,
    invalidation, escalation) with the workflow's keys (docs/operations.md, "Logs"). Only
    account IDs and the reason go out: no email, phone number or message text."""
    role, target = state.role, state.target
    extra = {"issue_key": run.execution.issue_key, "trigger_id": run.execution.trigger_id,
             "execution_id": run.execution.id, "policy_id": run.execution.policy_id,
             "source": role.source if role else "", "role": role.value if role else "",
             "target_account_id": target.account_id if target else "",
             **state.log_fields(), **fields}
    (log.warning if warning else log.info)(message, extra=extra)
