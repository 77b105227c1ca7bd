"""The guarded consume of the role label (N§6.2 "Label 消费"), one phase at a time.

``label_phase``: ``pending`` → ``remove_started`` → ``removed`` → (``restored``), or ``kept``
when the target changed before the delete; ``label_check`` says what the guards saw.
Removing or adding a label is idempotent, so a restart redoes the phase it finds (N§8.2:
"Label remove 后未完成 post-check → 重做"). A reserved-source wake-up is ensured only when
the post-delete read saw the target or the urgency class differ from the plan snapshot: a
pending or processing duplicate trigger is no evidence of a new event (N§6.2 item 3).
``trigger_phase``: ``required`` → ``ensured|failed``.
"""

from __future__ import annotations

from ticket_dispatcher.domain.actions.base import ActionRun
from ticket_dispatcher.domain.actions.notification_common import (
    fresh_issue,
    role_user,
    same_target,
    source_of,
    urgency,
    warn,
)
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.errors import DispatcherError, OutcomeUnknown


def consume_label(run: ActionRun, context: dict) -> bool:
    """Consume the label under its guard; True when the workflow is stale (the target or the
    urgency changed) and must terminate."""
    phase = context.get("label_phase", "pending")
    if phase in ("pending", "remove_started"):
        stale = _remove(run, context)
        if stale is not None:
            return stale
        phase = context["label_phase"]
    if phase == "removed":
        if "after_delete" in context.get("label_check", {}):
            return False  # consumed and checked: nothing changed
        return _post_check(run, context)
    if phase == "restored":
        _ensure_trigger(run, context)
        return True
    return phase == "kept"


def _remove(run: ActionRun, context: dict) -> bool | None:
    """Pre-check and delete. None when the delete happened (go on to the post-check), else
    whether to terminate."""
    snapshot, label = context["snapshot"], context["snapshot"]["label"]
    issue = fresh_issue(run, context, "label consume")
    if issue is None:  # cannot guard: keep the marker rather than delete a newer one
        warn(context, f"label {label} not consumed")
        return False
    if not same_target(role_user(issue, snapshot["role"]), snapshot["target"]):
        context["label_phase"] = "kept"  # it belongs to the new target's notification
        context["label_check"] = {"before_delete": "target changed"}
        return True
    if label in issue.labels:
        context["label_phase"] = "remove_started"
        run.checkpoint()
        try:
            run.ports.jira.edit_labels(run.issue.key, remove=[label])
        except OutcomeUnknown as exc:  # the post-check reads what Jira now has
            warn(context, f"label {label} removal outcome unknown ({exc.message})")
        except DispatcherError as exc:
            context["label_phase"] = "pending"
            warn(context, f"label {label} not consumed ({exc.message})")
            return False
    context["label_phase"] = "removed"
    run.checkpoint()
    return None


def _post_check(run: ActionRun, context: dict) -> bool:
    snapshot = context["snapshot"]
    issue = fresh_issue(run, context, "label post-check")
    if issue is None:
        return False
    changes = _changes(run, snapshot, issue)
    context["label_check"] = {"after_delete": ", ".join(changes) or "unchanged"}
    if not changes:
        run.checkpoint()
        return False
    _restore(run, context)
    _ensure_trigger(run, context)
    return True


def _changes(run: ActionRun, snapshot: dict, issue: Issue) -> list[str]:
    changes = []
    if not same_target(role_user(issue, snapshot["role"]), snapshot["target"]):
        changes.append("target changed")
    now_urgent = urgency(run.execution, issue, run.now)["urgent"]
    if now_urgent != snapshot["urgency"]["urgent"]:
        changes.append("urgency changed")
    return changes


def _restore(run: ActionRun, context: dict) -> None:
    label = context["snapshot"]["label"]
    try:
        run.ports.jira.edit_labels(run.issue.key, add=[label])
    except DispatcherError as exc:  # the wake-up below still re-reads the latest state
        warn(context, f"label {label} could not be restored ({exc.message})")
    context["label_phase"] = "restored"
    context["trigger_phase"] = "required"
    run.checkpoint()


def _ensure_trigger(run: ActionRun, context: dict) -> None:
    if context.get("trigger_phase") != "required":
        return
    source = source_of(context["snapshot"]["role"])
    try:
        run.ports.triggers.ensure_reserved_trigger(source, run.issue.key, run.now)
        context["trigger_phase"] = "ensured"
    except DispatcherError as exc:
        context["trigger_phase"] = "failed"
        warn(context, f"the {source} wake-up could not be ensured ({exc.message})")
    run.checkpoint()
