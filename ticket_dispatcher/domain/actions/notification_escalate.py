"""``escalate_assignment_to_leader`` (SPEC §8.2, N§7): at most one hop, to the expected
target's direct leader, after the last page timed out.

The role slot of ``dispatch_contexts.assignment_notification_state`` (N§7.2) is the only shared
state; it is read and changed through ``ports.contexts`` one role at a time under a row lock,
never around an external call::

    {"escalation_intent": {"owner_execution_id", "from_account_id", "to_account_id",
                           "to_email", "state": "prepared"|"applied"} | null,
     "auto_escalated_to_account_id": "<B>" | null}

``execute`` (re-entered after a restart, N§8.2):

1. this execution's own ``prepared`` (or ``applied``, its outcome not yet saved) intent in
   the slot → reconcile it by the Jira current target (= to: applied; = from: the guarded
   write again; other: superseded), never choosing another leader (N§7.3);
2. the fresh guard (N§7.1 step 1): ACK → ACK comment once → terminate; invalidated → terminate;
3. the slot (N§7.3): a ``prepared|applied`` intent whose ``to`` is the current target is
   completed to ``applied`` + marker, and like a marker equal to the current target blocks
   (no Grand Leader); a pending intent of another execution blocks (fail closed, no write);
   a marker or intent about someone else (a manual change to D) is cleared;
4. the direct leader from Core; empty, inactive, self or not mappable to a Jira account →
   ``no_leader``, a warning and no Jira write (N§7.1; by design); a lookup that failed (Core
   or Jira's user search refusing or not answering) → ``leader_lookup_failed``, also without
   a write, but a failed escalation (the metrics count it failed and
   ``TicketDispatcherLeaderEscalationFailed`` fires, docs/runbook.md);
5. the intent is persisted (``prepared``, re-judging the slot under the lock) before the
   guarded write: re-read Jira, write the role field only while it still holds ``from``,
   re-read to reconcile;
6. the applied marker, then the same-role label and the reserved-source wake-up
   (``wakeup_phase`` required → done; both are idempotent and redone after a restart).

Context ``escalation``: ``expected`` (Rule 1's role, project, target, message, label),
``leader`` {email, account_id}, ``intent`` (what was persisted), ``outcome``
escalated|blocked|no_leader|leader_lookup_failed|superseded|failed|ack|invalidated, ``reason``,
``warnings``.
Every outcome but a technical error (Jira unreadable while an intent is pending) completes
the action; only ACK and invalidation terminate.
"""

from __future__ import annotations

from typing import Any

from ticket_dispatcher.domain.actions.base import ActionError, ActionResult, ActionRun
from ticket_dispatcher.domain.actions.notification import validate_no_config
from ticket_dispatcher.domain.actions.notification_common import (
    PAGE,
    find_action,
    log_step,
    role_user,
    rule1_context,
    source_of,
    warn,
)
from ticket_dispatcher.domain.actions.notification_guard import (
    decided,
    end_workflow,
    expected_context,
)
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import FailureCode, RuleExecution
from ticket_dispatcher.domain.model import DispatchContext, Issue
from ticket_dispatcher.errors import DispatcherError, OutcomeUnknown, Problem

PREPARED, APPLIED = "prepared", "applied"
GO, NO_GRAND_LEADER, PENDING_INTENT = "go", "no_grand_leader", "pending_intent"
# Fail closed (N§7.3): the slot changed between this execution's look and its lock (another
# escalation got there first), or Jira no longer shows the expected target.
SLOT_CHANGED, TARGET_CHANGED = "slot_changed", "target_changed"


class EscalateAssignmentToLeader:
    type = ActionType.ESCALATE_ASSIGNMENT_TO_LEADER.value

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        return validate_no_config(config, path)

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict:
        return {"escalation": {}}

    def plan(self, run: ActionRun) -> None:
        expected = expected_context(run)
        expected["label"] = (rule1_context(run.execution) or {})["snapshot"]["label"]
        run.context.setdefault("escalation", {})["expected"] = expected

    def execute(self, run: ActionRun) -> ActionResult:
        context = run.context["escalation"]
        outcome = context.get("outcome")
        if outcome in ("ack", "invalidated"):
            return end_workflow(run, context)  # resumed after the verdict was saved
        if outcome == "escalated" and context.get("wakeup_phase") == "required":
            _wake_up(run, context)
        if outcome:
            return ActionResult.proceed()
        role = context["expected"]["role"]
        intent = _intent(_read_slot(run, role))
        # N§8.2: this execution's own intent, prepared or already applied (the process died
        # before saving the outcome), is reconciled with the same leader: the marker and the
        # wake-up are completed, never a new leader chosen
        if intent and intent.get("state") in (PREPARED, APPLIED) and \
                intent["owner_execution_id"] == run.execution.id:
            return self._guarded_write(run, context, intent)
        rule, action = find_action(run.execution, run.context)
        if decided(run, context, _previous_pending_statuses(rule, action.index)):
            return end_workflow(run, context)
        target = context["expected"]["target"]
        verdict = _judge_under_lock(run, role, target["account_id"])
        if verdict != GO:
            return self._blocked(run, context, verdict)
        leader = self._leader(run, context, target)
        if leader is None:
            return ActionResult.proceed()
        intent = {"owner_execution_id": run.execution.id,
                  "from_account_id": target["account_id"],
                  "to_account_id": leader["account_id"], "to_email": leader["email"],
                  "state": PREPARED}
        verdict = _persist_intent(run, role, intent)
        if verdict != GO:
            return self._blocked(run, context, verdict)
        context["intent"] = intent
        run.checkpoint()
        return self._guarded_write(run, context, intent)

    # -- steps ----------------------------------------------------------------------------------

    def _leader(self, run: ActionRun, context: dict, target: dict) -> dict | None:
        """The direct leader as ``{email, account_id}``, or None with a warning and the
        outcome saved: ``no_leader`` when there is none to escalate to (N§7.1),
        ``leader_lookup_failed`` when Core or Jira could not say."""
        email = (target.get("email") or "").lower()
        outcome, reason = "no_leader", ""
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
                elif account.account_id == target["account_id"]:
                    reason = "the leader is the target"
                else:
                    context["leader"] = {"email": leader.email.lower(),
                                         "account_id": account.account_id}
                    return context["leader"]
        except DispatcherError as exc:  # not "no leader": nobody knows whether there is one
            outcome, reason = "leader_lookup_failed", \
                f"the leader could not be looked up ({exc.message})"
        context["outcome"], context["reason"] = outcome, reason
        warn(context, f"escalation: {reason}; Jira not changed")
        run.checkpoint()
        log_step(run, context, "escalation without a leader" if outcome == "no_leader"
                 else "escalation leader lookup failed", warning=True, reason=reason)
        return None

    def _guarded_write(self, run: ActionRun, context: dict, intent: dict) -> ActionResult:
        """Write the role field only while it still holds ``from``; reconcile by a re-read
        (N§7.1 steps 5–7, N§7.3). The write is unconditional in Jira, so a manual change
        between the read and the write can still be overwritten (N§7.1's accepted risk)."""
        role = context["expected"]["role"]
        current = _current(run, role)
        if current == intent["to_account_id"]:
            return self._applied(run, context, intent)
        # an applied intent was written for sure: ``from`` again is a hand-made change back
        if current != intent["from_account_id"] or intent.get("state") == APPLIED:
            return self._superseded(run, context, intent, "someone else holds the role now")
        write = run.ports.jira.set_l2_assignee if role == "l2_assignee" else run.ports.jira.assign
        try:
            write(run.issue.key, intent["to_account_id"])
        except OutcomeUnknown as exc:  # the re-read below tells
            warn(context, f"escalation: the Jira write's outcome is unknown ({exc.message})")
        except DispatcherError as exc:
            return self._superseded(run, context, intent, f"the Jira write failed ({exc.message})",
                                    outcome="failed")
        current = _current(run, role)
        if current == intent["to_account_id"]:
            return self._applied(run, context, intent)
        if current == intent["from_account_id"]:
            return self._superseded(run, context, intent, "the Jira write did not apply",
                                    outcome="failed")
        return self._superseded(run, context, intent, "someone else holds the role now")

    def _applied(self, run: ActionRun, context: dict, intent: dict) -> ActionResult:
        role = context["expected"]["role"]
        _update(run, role, lambda slot: _mark_applied(slot, intent))
        context["intent"] = {**intent, "state": APPLIED}
        context["outcome"], context["wakeup_phase"] = "escalated", "required"
        run.checkpoint()
        log_step(run, context, "escalated to the direct leader",
                 escalation_from=intent["from_account_id"], escalation_to=intent["to_account_id"])
        _wake_up(run, context)
        return ActionResult.proceed()

    def _superseded(self, run: ActionRun, context: dict, intent: dict, why: str,
                    outcome: str = "superseded") -> ActionResult:
        """Drop this execution's intent: nothing (more) is written to Jira (N§7.3)."""
        role = context["expected"]["role"]

        def drop(slot: dict | None) -> dict | None:
            slot = dict(slot or {})
            mine = slot.get("escalation_intent") or {}
            if mine.get("owner_execution_id") == intent["owner_execution_id"]:
                slot["escalation_intent"] = None
            return slot

        _update(run, role, drop)
        context["intent"] = {**intent, "state": "superseded"}
        context["outcome"], context["reason"] = outcome, why
        warn(context, f"escalation: {why}; intent dropped")
        run.checkpoint()
        log_step(run, context, f"escalation {outcome}", warning=True, reason=why,
                 escalation_from=intent["from_account_id"], escalation_to=intent["to_account_id"])
        return ActionResult.proceed()

    def _blocked(self, run: ActionRun, context: dict, verdict: str) -> ActionResult:
        context["outcome"], context["reason"] = "blocked", verdict
        if verdict == PENDING_INTENT:  # fail closed: another write may be in flight (N§7.3)
            warn(context, "escalation: another execution's escalation of this role is pending; "
                          "nothing written")
        elif verdict in (SLOT_CHANGED, TARGET_CHANGED):
            warn(context, f"escalation: {verdict.replace('_', ' ')} since this workflow looked; "
                          "nothing written")
        run.checkpoint()
        log_step(run, context, "escalation blocked", warning=verdict != NO_GRAND_LEADER,
                 reason=verdict)
        return ActionResult.proceed()


# -- the role slot ----------------------------------------------------------------------------


def judge(slot: dict | None, current: str) -> tuple[dict | None, str]:
    """What the slot allows for the current target ``current``, and the slot to store (N§7.3).

    ``no_grand_leader``: ``current`` was reached by an escalation (marker, or an intent whose
    ``to`` is ``current``, completed here idempotently); ``pending_intent``: another
    escalation's write may still land; ``go``: the slot is cleared of anything about
    someone else (a manual change to D)."""
    if not slot:
        return slot, GO
    intent = _intent(slot)
    if intent and intent.get("state") in (PREPARED, APPLIED) and \
            intent.get("to_account_id") == current:
        return _mark_applied(slot, intent), NO_GRAND_LEADER
    if slot.get("auto_escalated_to_account_id") == current:
        return slot, NO_GRAND_LEADER
    if _pending(intent):
        return slot, PENDING_INTENT
    return None, GO


def settle_slot(run: ActionRun, role: str, current: str) -> str | None:
    """For a workflow that is not escalating (the card, N§7.3): complete an intent whose ``to``
    is the current target, clear a marker or intent about someone else (a manual change to D
    gives D its own hop), leave a pending intent to its owner. Returns the verdict, or None
    with a warning when the slot could not be read or saved: a card is never held up by it."""
    try:
        return _judge_under_lock(run, role, current)
    except ActionError as exc:
        warn(run.context.setdefault("notification", {}), exc.message)
        return None


def _judge_under_lock(run: ActionRun, role: str, current: str) -> str:
    """Judge the slot for ``current`` and store what ``judge`` leaves.

    ``current`` is what this workflow last read, perhaps before another escalation's write
    landed. So a slot that would be cleared as "about someone else" is cleared only when a
    fresh Jira read still shows ``current`` (N§7.3: only a target clearly seen to have changed
    to D clears B's marker), and only when the slot under the lock is still the one looked at;
    anything else fails closed."""
    seen = _read_slot(run, role)
    if _empty(seen):
        return GO  # nothing to judge: no row lock, no write
    if _clears(seen, current) and _current(run, role) != current:
        return TARGET_CHANGED
    verdict: list[str] = []

    def decide(slot: dict | None) -> dict | None:
        if slot != seen:
            verdict.append(SLOT_CHANGED)
            return slot
        new, answer = judge(slot, current)
        verdict.append(answer)
        return new

    _update(run, role, decide)
    return verdict[-1]


def _persist_intent(run: ActionRun, role: str, intent: dict) -> str:
    """Store ``intent`` (``go``) only into a slot still empty: the first look cleared or found
    nothing, so anything there now is another escalation's, never to be overwritten; its
    verdict (``no_grand_leader`` completing it, ``pending_intent``) or ``slot_changed``."""
    verdict: list[str] = []

    def put(slot: dict | None) -> dict | None:
        if _empty(slot):
            verdict.append(GO)
            return {"escalation_intent": dict(intent), "auto_escalated_to_account_id": None}
        new, answer = judge(slot, intent["from_account_id"])
        verdict.append(SLOT_CHANGED if answer == GO else answer)
        return slot if answer == GO else new

    _update(run, role, put)
    return verdict[-1]


def _empty(slot: dict | None) -> bool:
    return not _intent(slot) and not (slot or {}).get("auto_escalated_to_account_id")


def _clears(slot: dict | None, current: str) -> bool:
    """Whether ``judge`` would clear a non-empty slot as being about someone else."""
    new, answer = judge(slot, current)
    return answer == GO and not _empty(slot) and _empty(new)


def _mark_applied(slot: dict | None, intent: dict) -> dict:
    return {"escalation_intent": {**intent, "state": APPLIED},
            "auto_escalated_to_account_id": intent["to_account_id"]}


def _intent(slot: dict | None) -> dict | None:
    return (slot or {}).get("escalation_intent") or None


def _pending(intent: dict | None) -> bool:
    return bool(intent) and intent.get("state") == PREPARED


def _read_slot(run: ActionRun, role: str) -> dict | None:
    try:
        found = run.ports.contexts.find(run.issue.key)
    except DispatcherError as exc:
        raise ActionError(f"the escalation state could not be read ({exc.message})",
                          FailureCode.EXECUTE_FAILED) from exc
    return found.assignment_notification_state.get(role) if found else None


def _update(run: ActionRun, role: str, mutate) -> None:
    try:
        run.ports.contexts.update_notification_slot(run.issue.key, role, mutate, run.now)
    except DispatcherError as exc:
        raise ActionError(f"the escalation state could not be saved ({exc.message})",
                          FailureCode.EXECUTE_FAILED) from exc


# -- Jira -------------------------------------------------------------------------------------


def _current(run: ActionRun, role: str) -> str:
    """The role's account ID now ("" when empty). Unreadable while an intent may be pending
    is a technical failure: the intent stays and blocks (fail closed, N§7.3)."""
    try:
        issue = run.ports.jira.load_issue(run.issue.key)
    except DispatcherError as exc:
        raise ActionError(f"escalation: the issue could not be read ({exc.message})",
                          FailureCode.EXECUTE_FAILED) from exc
    user = role_user(issue, role)
    return user.account_id if user is not None and user.account_id else ""


def _wake_up(run: ActionRun, context: dict) -> None:
    """The same-role label and a reserved-source trigger, so the leader's own workflow runs
    (N§7.1 step 8); both are idempotent, a failure only warns."""
    role, label = context["expected"]["role"], context["expected"]["label"]
    try:
        run.ports.jira.edit_labels(run.issue.key, add=[label])
    except DispatcherError as exc:
        warn(context, f"escalation: label {label} could not be added ({exc.message})")
    try:
        run.ports.triggers.ensure_reserved_trigger(source_of(role), run.issue.key, run.now)
    except DispatcherError as exc:
        warn(context, f"escalation: the wake-up could not be ensured ({exc.message})")
    context["wakeup_phase"] = "done"
    run.checkpoint()


def _previous_pending_statuses(rule: RuleExecution, before: int) -> list[str] | None:
    """The ACK statuses of the last ``page_assignment`` before this action (N§7.1 step 1)."""
    for action in reversed(rule.action_executions[:before]):
        if action.type == PAGE:
            return list(action.config.get("ack_pending_statuses") or [])
    return None
