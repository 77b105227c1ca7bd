"""What the assignment-notification executors share (N§6, N§8.1): the Rule 1 snapshot they all
read, urgency classification, the fresh Jira guard and read ACK (N§6.5), and at-most-once
external steps with ``started``/``finished`` phases (N§8.2). The card, App-urgent and page
calls are counted through ``ports.calls`` as soon as their result is saved (``count_call``).

Context written by ``send_assignment_notification`` under ``context["notification"]`` and read
by the later actions (see ``rule1_context``): ``snapshot`` (``role``, ``label``, ``source``,
``project``, ``target`` {account_id, email, display_name, active} or null, ``urgency``
{field, value, urgent}, ``status``), ``target_lark_id``, ``card_phase``, ``card_status``,
``message_id``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ticket_dispatcher.domain.actions.base import ActionRun
from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES, URGENCY_FIELDS, ActionType
from ticket_dispatcher.domain.conditions import ConditionError, evaluate
from ticket_dispatcher.domain.execution import ActionExecution, Execution, RuleExecution
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.domain.observations import CALL_RESULTS
from ticket_dispatcher.errors import DispatcherError, OutcomeUnknown

log = logging.getLogger("ticket_dispatcher.notification")

SEND = ActionType.SEND_ASSIGNMENT_NOTIFICATION.value
PAGE = ActionType.PAGE_ASSIGNMENT.value
ROLE_NAMES = {"assignee": "Assignee", "l2_assignee": "L2 Assignee"}


def source_of(role: str) -> str:
    """The reserved trigger source of a role (N§3, catalog)."""
    return next(r.source for r in NOTIFICATION_ROLES if r.role == role)


def role_user(issue: Issue, role: str) -> JiraUser | None:
    return issue.l2_assignee if role == "l2_assignee" else issue.assignee


def target_json(user: JiraUser | None) -> dict | None:
    if user is None:
        return None
    return {"account_id": user.account_id, "email": user.email,
            "display_name": user.display_name, "active": user.active}


def same_target(user: JiraUser | None, snapshot: dict | None) -> bool:
    """Targets compare by Jira account ID (N§4); both empty is the same (no target)."""
    if user is None or not user.account_id:
        return snapshot is None or not snapshot.get("account_id")
    return snapshot is not None and user.account_id == snapshot.get("account_id")


# -- the execution's own rules ------------------------------------------------------------------


def urgency_condition(execution: Execution) -> dict | None:
    """Rule 2's condition: the first rule testing an urgency field with ``in`` (N§5.2, N§5.4)."""
    for rule in execution.rule_executions:
        when = rule.when or {}
        if when.get("field") in URGENCY_FIELDS and when.get("operator") == "in":
            return when
    return None


def urgency(execution: Execution, issue: Issue, now: datetime) -> dict:
    """``{field, value, urgent}`` of ``issue`` by the execution's frozen Rule 2; a missing or
    unknown value is non-urgent (N§1.7)."""
    when = urgency_condition(execution)
    if when is None:
        return {"field": None, "value": None, "urgent": False}
    field = when["field"]
    value = issue.severity if field == "issue.custom_fields.severity" else issue.priority
    try:
        urgent, _ = evaluate(when, issue, now)
    except ConditionError:
        urgent = False
    return {"field": field, "value": value, "urgent": urgent}


def find_action(execution: Execution, context: dict) -> tuple[RuleExecution, ActionExecution]:
    """The rule and action execution whose context is ``context`` (the one running now)."""
    for rule in execution.rule_executions:
        for action in rule.action_executions:
            if action.context is context:
                return rule, action
    raise LookupError("the running action is not part of its execution")


def rule1_context(execution: Execution) -> dict | None:
    """The ``notification`` context of the execution's ``send_assignment_notification``."""
    for rule in execution.rule_executions:
        for action in rule.action_executions:
            if action.type == SEND:
                return action.context.get("notification")
    return None


def ack_pending_statuses(rule: RuleExecution, after: int) -> list[str] | None:
    """The statuses of the next ``page_assignment`` of ``rule`` after action ``after``; None
    when there is none (then only a read ACK counts)."""
    for action in rule.action_executions[after + 1:]:
        if action.type == PAGE:
            return list(action.config.get("ack_pending_statuses") or [])
    return None


# -- context bookkeeping ------------------------------------------------------------------------


def warn(context: dict, text: str) -> None:
    """A business warning (completed-with-warning, N§8.3); never a token or phone number."""
    context.setdefault("warnings", []).append(text)


def log_step(run: ActionRun, context: dict, message: str, *, warning: bool = False,
             **fields: Any) -> None:
    """One log line per notification step (N§12): card, urgent, page attempt, comments, ACK,
    invalidation, escalation, with the N§12 context keys. Only account IDs and the reason go
    out: no email, phone number or message text."""
    expected = context.get("expected") or context.get("snapshot") or {}  # urgent ones or card
    target = expected.get("target") or {}
    role = expected.get("role", "")
    extra = {"issue_key": run.execution.issue_key, "trigger_id": run.execution.trigger_id,
             "execution_id": run.execution.id, "policy_id": run.execution.policy_id,
             "source": source_of(role) if role else "", "role": role,
             "target_account_id": target.get("account_id", "")}
    if "attempt" in context:
        extra["attempt"] = context["attempt"]
    if "deadline" in context:
        extra["deadline"] = context["deadline"]
    extra.update(fields)
    (log.warning if warning else log.info)(message, extra=extra)


def once(run: ActionRun, context: dict, name: str, call: Callable[[], Any], success: str,
         record: Callable[[Any], None] | None = None,
         status_of: Callable[[Any], str] | None = None, counted: bool = False) -> None:
    """Run ``call`` at most once across restarts (N§8.2): ``<name>_phase`` is saved ``started``
    before it; a ``started`` phase found on entry means the result was lost, so the status is
    ``unknown`` and nothing is called. On success ``record`` keeps the answer in the context,
    saved with the status; ``status_of`` names the status from the answer instead of
    ``success`` (a page answers accepted|failed|unknown). ``OutcomeUnknown`` → ``unknown``;
    any other ``DispatcherError`` → ``failed``; ``CallAbandoned`` (shutdown) passes through
    with the phase ``started``. ``counted``: the settled status goes to ``ports.calls``
    (``count_call``) right after the checkpoint that saved it."""
    phase, status = f"{name}_phase", f"{name}_status"
    if context.get(phase) == "finished":
        return
    if context.get(phase) == "started":
        context[status] = "unknown"
        warn(context, f"{name}: interrupted after it started; not repeated (outcome unknown)")
        context[phase] = "finished"
        run.checkpoint()
        if counted:
            count_call(run, context, name)
        log_step(run, context, f"{name.replace('_', ' ')} unknown", warning=True,
                 reason="interrupted after it started; not repeated")
        return
    context[phase] = "started"
    run.checkpoint()
    try:
        answer = call()
        if record is not None:
            record(answer)
        context[status] = status_of(answer) if status_of is not None else success
    except OutcomeUnknown as exc:
        context[status] = "unknown"
        warn(context, f"{name}: outcome unknown ({exc.message})")
    except DispatcherError as exc:
        context[status] = "failed"
        warn(context, f"{name}: failed ({exc.message})")
    context[phase] = "finished"
    run.checkpoint()
    if counted:
        count_call(run, context, name)
    done = context[status]
    log_step(run, context, f"{name.replace('_', ' ')} {done}",
             warning=done not in (success, "sent"),
             reason=context["warnings"][-1] if done != success and context.get("warnings")
             else "")


def count_call(run: ActionRun, context: dict, call: str) -> None:
    """Tell ``ports.calls`` the saved ``<call>_status`` of a card, urgent or page call as it
    happens, so an alert need not wait for the workflow's end (docs/operations.md, "Metrics").
    Called only after the checkpoint that saved the status: a restart finds the phase
    ``finished`` and counts nothing, and a call whose ``started`` phase is found after a
    restart counts once, as ``unknown``. A process that dies between that checkpoint and this
    call loses the count; it never counts twice. Live executions only: a dry run never calls
    out, and is never counted."""
    result = CALL_RESULTS.get(context.get(f"{call}_status", ""))
    if result is None or run.execution.dry_run:
        return
    expected = context.get("expected") or context.get("snapshot") or {}
    attempt = str(context["attempt"]) if call == "page" else ""
    run.ports.calls.call_settled(call, result, expected.get("role", ""), attempt)


def fresh_issue(run: ActionRun, context: dict, purpose: str) -> Issue | None:
    """A live read of the issue (not the rule snapshot, N§5.3); None with a warning when Jira
    cannot answer. The issue loaded for this step counts once: a woken wait's guard need not
    read Jira twice in a row, while a later read in the step (the label post-check) asks."""
    if run.live_issue is not None:
        issue, run.live_issue = run.live_issue, None
        return issue
    try:
        return run.ports.jira.load_issue(run.issue.key)
    except DispatcherError as exc:
        warn(context, f"{purpose}: the issue could not be read ({exc.message})")
        return None
