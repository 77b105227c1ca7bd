"""``escalate_assignment_to_leader``: at most one hop, to the expected target's direct leader,
after the last page's wait ran out (docs/design.md, "The escalation slot").

``execute`` is entered again after a restart, and goes in this order:

1. this execution's own intent, ``prepared`` (or ``applied``, its outcome not yet saved), in
   the role's slot: reconcile it by the role's holder in Jira (the leader: applied; the old
   target: the guarded write again; someone else: superseded), never choosing another leader;
2. the fresh guard: an ACK (its comment once) or an invalidation ends the workflow;
3. the slot (``escalation_slot.settle_slot``): a hop that reached the current target blocks
   (no Grand Leader), another execution's pending intent blocks (fail closed, no write), a
   marker or intent about someone else is cleared;
4. the direct leader from Core. Empty, inactive, the target themselves or without a Jira
   account: ``no_leader``, a warning and no write (by design). A lookup that failed (Core or
   Jira's user search refusing or not answering): ``leader_lookup_failed``, also without a
   write, but a failed escalation (the metrics count it failed and
   ``TicketDispatcherLeaderEscalationFailed`` fires, docs/runbook.md);
5. the intent is stored ``prepared`` (settling the slot again under the lock) before the
   guarded write: re-read Jira, write the role only while it still shows ``from``; a write
   Jira answered is applied, one whose answer was lost is reconciled by a re-read;
6. the intent applied with the marker, then the role label put back and a reserved-source
   trigger ensured, so the leader's own workflow runs (``restore_label_and_wake``).

Every outcome but a technical error (Jira unreadable while an intent is pending, past the retry
budget of a passing fault) completes the action; only an ACK and an invalidation end the
workflow. A read or a write a passing fault kept from Jira parks the action for another try.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.escalation_slot import (
    SlotVerdict,
    drop_intent,
    mark_applied,
    read_slot,
    role_holder_now,
    settle_slot,
    slot_intent,
    store_intent,
)
from ticket_dispatcher.domain.actions.notification import validate_no_config
from ticket_dispatcher.domain.actions.notification_common import (
    ack_pending_statuses,
    find_action,
    log_step,
)
from ticket_dispatcher.domain.actions.notification_guard import GuardedAction, guard_ending
from ticket_dispatcher.domain.actions.notification_label import restore_label_and_wake
from ticket_dispatcher.domain.actions.notification_state import (
    EscalationState,
    Expected,
    Intent,
    IntentState,
    Leader,
    Outcome,
    Role,
    Target,
    Wakeup,
)
from ticket_dispatcher.domain.actions.retrying import hold_for_next_try
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.errors import DispatcherError, fault_of


class EscalateAssignmentToLeader(GuardedAction):
    type = ActionType.ESCALATE_ASSIGNMENT_TO_LEADER.value
    state_type = EscalationState
    config_check = staticmethod(validate_no_config)
    with_label = True

    def execute_state(self, run: ActionRun, escalation: EscalationState) -> ActionResult:
        rule, action = find_action(run.execution, run.context)
        statuses = ack_pending_statuses(rule, action.index, before=True)  # the last page's
        resumed = self._resume(run, escalation, statuses)
        if resumed is not None:
            return resumed
        ending = guard_ending(run, escalation, statuses, look=True)
        if ending is not None:
            return ending
        return self._escalate(run, escalation)

    def _resume(self, run: ActionRun, escalation: EscalationState,
                statuses: list[str] | None) -> ActionResult | None:
        """Where an earlier step of this action got to decides; None: it got nowhere yet."""
        ending = guard_ending(run, escalation, statuses, look=False)
        if ending is not None:
            return ending  # resumed after the verdict was saved
        expected = _expected(escalation)
        if escalation.outcome is Outcome.ESCALATED:
            restore_label_and_wake(run, escalation, expected.role, _label(expected))
        if escalation.outcome is not None:
            return ActionResult.proceed()
        own = slot_intent(read_slot(run, expected.role))
        # this execution's own intent, prepared or already applied (the process died before
        # saving the outcome), is reconciled with the same leader: never a new one chosen
        if own is not None and own.state in (IntentState.PREPARED, IntentState.APPLIED) and \
                own.owner_execution_id == run.execution.id:
            return self._guarded_write(run, escalation, own)
        return None

    def _escalate(self, run: ActionRun, escalation: EscalationState) -> ActionResult:
        """Settle the slot, find the leader, store the intent, then the guarded write."""
        expected = _expected(escalation)
        target = expected.target
        current = target.account_id if target else ""
        with _read_again_if_passing(run, escalation):
            verdict = settle_slot(run, expected.role, current)
        if verdict is not SlotVerdict.MAY_ESCALATE:
            return self._blocked(run, escalation, verdict)
        leader = self._leader(run, escalation, target)
        if leader is None:
            return ActionResult.proceed()
        intent = Intent(run.execution.id, current, leader.account_id, leader.email,
                        IntentState.PREPARED)
        verdict = store_intent(run, expected.role, intent)
        if verdict is not SlotVerdict.MAY_ESCALATE:
            return self._blocked(run, escalation, verdict)
        escalation.intent = intent
        escalation.save(run)
        return self._guarded_write(run, escalation, intent)

    # -- steps ----------------------------------------------------------------------------------

    def _leader(self, run: ActionRun, escalation: EscalationState,
                target: Target | None) -> Leader | None:
        """The direct leader, or None with a warning and the outcome saved: ``no_leader`` when
        there is none to escalate to, ``leader_lookup_failed`` when Core or Jira could not
        say."""
        email = (target.email if target else "").lower()
        outcome, reason = Outcome.NO_LEADER, ""
        try:
            leader = run.ports.core.leader(email) if email else None
            if leader is None:
                reason = "no direct leader"
            elif not leader.active:
                reason = "the leader is inactive"
            elif leader.email.lower() == email:
                reason = "the leader is the target"
            else:
                account = run.ports.jira.find_user_by_email(leader.email)
                if account is None or not account.account_id:
                    reason = "the leader has no Jira account"
                elif target is not None and account.account_id == target.account_id:
                    reason = "the leader is the target"
                else:
                    escalation.leader = Leader(leader.email.lower(), account.account_id)
                    return escalation.leader
        except DispatcherError as exc:  # not "no leader": nobody knows whether there is one
            outcome, reason = Outcome.LEADER_LOOKUP_FAILED, \
                f"the leader could not be looked up ({exc.message})"
        escalation.outcome, escalation.reason = outcome, reason
        escalation.warn(f"escalation: {reason}; Jira not changed")
        escalation.save(run)
        log_step(run, escalation, "escalation without a leader" if outcome is Outcome.NO_LEADER
                 else "escalation leader lookup failed", warning=True, reason=reason)
        return None

    def _guarded_write(self, run: ActionRun, escalation: EscalationState,
                       intent: Intent) -> ActionResult:
        """Write the role only while Jira still shows ``from``. The write itself is
        unconditional in Jira, so a manual change between the read and the write can still be
        overwritten: an accepted risk. A write Jira answered is applied; one whose answer was
        lost is reconciled by a re-read.

        A read or a write kept from Jira by a passing fault, or a write the re-read shows did
        not land, is tried again within the retry budget (``PassingFault``): the intent stays
        prepared, and the next try starts again from the read, so the role is written only
        while Jira still shows ``from``."""
        role = _expected(escalation).role
        current = _holder(run, escalation, role)
        if current == intent.to_account_id:
            return self._applied(run, escalation, intent)
        # an applied intent was written for sure: ``from`` again is a hand-made change back
        if current != intent.from_account_id or intent.state is IntentState.APPLIED:
            return self._superseded(run, escalation, intent, "someone else holds the role now")
        try:
            _write_role(run, role, intent.to_account_id)
        except DispatcherError as exc:
            if not fault_of(exc).answer_lost:
                hold_for_next_try(exc, "escalation: the role write", escalation.may_retry(run.now))
                return self._superseded(run, escalation, intent,
                                        f"the Jira write failed ({exc.message})",
                                        outcome=Outcome.FAILED)
            escalation.warn(f"escalation: the Jira write's outcome is unknown ({exc.message})")
            return self._reconcile(run, escalation, intent, exc)
        # answered: written (a re-read would spend a call of the site's budget to say so)
        return self._applied(run, escalation, intent)

    def _reconcile(self, run: ActionRun, escalation: EscalationState, intent: Intent,
                   unknown: DispatcherError) -> ActionResult:
        """After a write whose answer was lost: what Jira shows now tells whether it landed."""
        current = _holder(run, escalation, _expected(escalation).role)
        if current == intent.to_account_id:
            return self._applied(run, escalation, intent)
        if current == intent.from_account_id:
            hold_for_next_try(unknown, "escalation: the role write did not land",
                              escalation.may_retry(run.now))
            return self._superseded(run, escalation, intent, "the Jira write did not apply",
                                    outcome=Outcome.FAILED)
        return self._superseded(run, escalation, intent, "someone else holds the role now")

    def _applied(self, run: ActionRun, escalation: EscalationState,
                 intent: Intent) -> ActionResult:
        expected = _expected(escalation)
        mark_applied(run, expected.role, intent)
        escalation.intent = intent.with_state(IntentState.APPLIED)
        escalation.outcome, escalation.wakeup = Outcome.ESCALATED, Wakeup.REQUIRED
        escalation.save(run)
        log_step(run, escalation, "escalated to the direct leader",
                 escalation_from=intent.from_account_id, escalation_to=intent.to_account_id)
        restore_label_and_wake(run, escalation, expected.role, _label(expected))
        return ActionResult.proceed()

    def _superseded(self, run: ActionRun, escalation: EscalationState, intent: Intent,
                    why: str, outcome: Outcome = Outcome.SUPERSEDED) -> ActionResult:
        """Drop this execution's intent: nothing (more) is written to Jira."""
        drop_intent(run, _expected(escalation).role, intent)
        escalation.intent = intent.with_state(IntentState.SUPERSEDED)
        escalation.outcome, escalation.reason = outcome, why
        escalation.warn(f"escalation: {why}; intent dropped")
        escalation.save(run)
        log_step(run, escalation, f"escalation {outcome}", warning=True, reason=why,
                 escalation_from=intent.from_account_id, escalation_to=intent.to_account_id)
        return ActionResult.proceed()

    def _blocked(self, run: ActionRun, escalation: EscalationState,
                 verdict: SlotVerdict) -> ActionResult:
        escalation.outcome, escalation.reason = Outcome.BLOCKED, verdict.value
        if verdict is SlotVerdict.PENDING_INTENT:  # fail closed: another write may be in flight
            escalation.warn("escalation: another execution's escalation of this role is "
                            "pending; nothing written")
        elif verdict in (SlotVerdict.SLOT_CHANGED, SlotVerdict.TARGET_CHANGED):
            escalation.warn(f"escalation: {verdict.value.replace('_', ' ')} since this workflow "
                            "looked; nothing written")
        escalation.save(run)
        log_step(run, escalation, "escalation blocked",
                 warning=verdict is not SlotVerdict.NO_GRAND_LEADER, reason=verdict.value)
        return ActionResult.proceed()


def _expected(escalation: EscalationState) -> Expected:
    if escalation.expected is None:
        raise ActionError("the escalation has nothing to compare: it was never planned",
                          FailureCode.EXECUTE_FAILED)
    return escalation.expected


def _label(expected: Expected) -> str:
    return expected.label or ""


def _holder(run: ActionRun, escalation: EscalationState, role: Role) -> str:
    with _read_again_if_passing(run, escalation):
        return role_holder_now(run, role)


@contextmanager
def _read_again_if_passing(run: ActionRun, escalation: EscalationState) -> Iterator[None]:
    """A read of the issue kept from Jira by a passing fault is tried again within the retry
    budget (``PassingFault``); it fails the step only once the budget is spent."""
    try:
        yield
    except ActionError as exc:
        cause = exc.__cause__
        if isinstance(cause, DispatcherError):
            hold_for_next_try(cause, "escalation: reading the issue", escalation.may_retry(run.now))
        raise


def _write_role(run: ActionRun, role: Role, account_id: str) -> None:
    if role is Role.L2_ASSIGNEE:
        run.ports.jira.set_l2_assignee(run.issue.key, account_id)
    else:
        run.ports.jira.assign(run.issue.key, account_id)
