"""The role label: the card's guarded consume of it, and putting it back with a wake-up trigger
(docs/design.md, "The assignment-notification workflow").

The consume runs one phase at a time (``LabelPhase``): ``pending`` → ``remove_started`` →
``removed`` → (``restored``), or ``kept`` when the target changed before the delete;
``label_check`` says what the guards saw. Removing or adding a label is idempotent, so a restart
redoes the phase it finds: a delete that may have happened is checked again, a post-check that
was not saved is made again. A wake-up is ensured only when the read right after the delete saw
the target or the urgency class differ from the card's snapshot: a pending or processing
duplicate trigger is no evidence of a new event.
"""

from __future__ import annotations

from ticket_dispatcher.domain.actions.base import ActionRun
from ticket_dispatcher.domain.actions.notification_common import fresh_issue, urgency
from ticket_dispatcher.domain.actions.notification_state import (
    CardState,
    EscalationState,
    LabelPhase,
    Role,
    Snapshot,
    Wakeup,
    same_target,
)
from ticket_dispatcher.domain.actions.retrying import hold_for_next_try
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.errors import DispatcherError, fault_of


def consume_label(run: ActionRun, card: CardState) -> bool:
    """Consume the label under its guard; True when the workflow is stale (the target or the
    urgency changed) and must end."""
    phase: LabelPhase | None = card.label_phase or LabelPhase.PENDING
    if phase in (LabelPhase.PENDING, LabelPhase.REMOVE_STARTED):
        stale = _remove(run, card)
        if stale is not None:
            return stale
        phase = card.label_phase
    if phase is LabelPhase.REMOVED:
        if "after_delete" in (card.label_check or {}):
            return False  # consumed and checked: nothing changed
        return _post_check(run, card)
    if phase is LabelPhase.RESTORED:
        snapshot = card.planned_snapshot
        restore_label_and_wake(run, card, snapshot.role, snapshot.label)
        return True
    return phase is LabelPhase.KEPT


def restore_label_and_wake(run: ActionRun, state: CardState | EscalationState, role: Role,
                           label: str) -> None:
    """Put ``label`` back on the issue, then ensure a trigger of the role's reserved source,
    so the workflow the change calls for runs: the new target's, or the leader's after an
    escalation. The label goes back first: a reserved trigger that meets a live workflow of
    the family is deferred only while the label is on the issue.

    ``state.wakeup`` says how far it got; each step is saved. Both calls are idempotent, so a
    restart redoes the step it finds. A label write refused by a passing fault is tried again
    within the retry budget (``PassingFault``); any other failure of either is a warning, and
    a trigger that could not be ensured ends ``failed``."""
    if state.wakeup is Wakeup.REQUIRED:
        try:
            run.ports.jira.edit_labels(run.issue.key, add=[label])
        except DispatcherError as exc:  # the wake-up below still re-reads the latest state
            hold_for_next_try(exc, f"label {label} restore", state.may_retry(run.now))
            state.warn(f"label {label} could not be restored ({exc.message})")
        state.wakeup = Wakeup.LABEL_RESTORED
        state.save(run)
    if state.wakeup is Wakeup.LABEL_RESTORED:
        try:
            run.ports.triggers.ensure_reserved_trigger(role.source, run.issue.key, run.now)
            state.wakeup = Wakeup.ENSURED
        except DispatcherError as exc:
            state.wakeup = Wakeup.FAILED
            state.warn(f"the {role.source} wake-up could not be ensured ({exc.message})")
        state.save(run)


def _remove(run: ActionRun, card: CardState) -> bool | None:
    """Pre-check and delete. None when the delete happened (go on to the post-check), else
    whether to end the workflow."""
    snapshot = card.planned_snapshot
    label = snapshot.label
    hold = card.may_hold(run.now)
    issue = fresh_issue(run, card, "label consume", retry=hold)
    if issue is None:  # cannot guard: keep the marker rather than delete a newer one
        card.warn(f"label {label} not consumed")
        return False
    if not same_target(snapshot.role.user(issue), snapshot.target):
        card.label_phase = LabelPhase.KEPT  # it belongs to the new target's notification
        card.label_check = {"before_delete": "target changed"}
        return True
    if label in issue.labels:
        card.label_phase = LabelPhase.REMOVE_STARTED
        card.save(run)
        try:
            run.ports.jira.edit_labels(run.issue.key, remove=[label])
        except DispatcherError as exc:
            if not fault_of(exc).answer_lost:
                card.label_phase = LabelPhase.PENDING
                hold_for_next_try(exc, f"label {label} removal", hold)
                card.warn(f"label {label} not consumed ({exc.message})")
                return False
            # the post-check reads what Jira now has
            card.warn(f"label {label} removal outcome unknown ({exc.message})")
    card.label_phase = LabelPhase.REMOVED
    card.save(run)
    return None


def _post_check(run: ActionRun, card: CardState) -> bool:
    snapshot = card.planned_snapshot
    issue = fresh_issue(run, card, "label post-check", retry=card.may_hold(run.now))
    if issue is None:
        return False
    changes = _changes(run, snapshot, issue)
    card.label_check = {"after_delete": ", ".join(changes) or "unchanged"}
    if not changes:
        card.save(run)
        return False
    card.label_phase, card.wakeup = LabelPhase.RESTORED, Wakeup.REQUIRED
    restore_label_and_wake(run, card, snapshot.role, snapshot.label)
    return True


def _changes(run: ActionRun, snapshot: Snapshot, issue: Issue) -> list[str]:
    changes = []
    if not same_target(snapshot.role.user(issue), snapshot.target):
        changes.append("target changed")
    if urgency(run.execution, issue, run.now).urgent != snapshot.urgency.urgent:
        changes.append("urgency changed")
    return changes
