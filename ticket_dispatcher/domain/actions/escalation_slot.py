"""The escalation slot: the one piece of state the executions of an issue share, one per role,
in the issue's dispatch context (docs/design.md, "The escalation slot")::

    {"escalation_intent": {"owner_execution_id", "from_account_id", "to_account_id",
                           "to_email", "state": "prepared"|"applied"} | null,
     "auto_escalated_to_account_id": "<B>" | null}

It is read and changed through ``ports.contexts`` one role at a time under a row lock, never
around a call to a peer. The card settles it for its target (``settle_slot``); the escalation
settles it too, then stores its intent (``store_intent``) and, once Jira shows the leader,
marks it applied (``mark_applied``) or drops it (``drop_intent``).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

from ticket_dispatcher.domain.actions.base import ActionError, ActionRun
from ticket_dispatcher.domain.actions.notification_state import Intent, IntentState, Role
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.errors import DispatcherError

INTENT, MARKER = "escalation_intent", "auto_escalated_to_account_id"
Slot = dict | None  # as stored; None: nothing there
V = TypeVar("V")


class SlotVerdict(StrEnum):
    """What the slot allows the workflow of the current target."""

    MAY_ESCALATE = "go"  # nothing about the current target; what was about others is cleared
    # the current target was reached by an escalation (a marker, or an intent whose ``to`` is
    # the target, completed on the spot): never a second hop
    NO_GRAND_LEADER = "no_grand_leader"
    PENDING_INTENT = "pending_intent"  # another escalation's write may still land: fail closed
    # fail closed too: the slot changed between this workflow's look and its lock (another
    # escalation got there first), or Jira no longer shows the target it looked at
    SLOT_CHANGED = "slot_changed"
    TARGET_CHANGED = "target_changed"


# -- the rules, on a slot as stored -------------------------------------------------------------


def slot_verdict(slot: Slot, current: str) -> tuple[Slot, SlotVerdict]:
    """The slot to store, and what it allows, for the current target ``current``.

    ``no_grand_leader``: ``current`` was reached by an escalation (a marker, or an intent whose
    ``to`` is ``current``, completed here idempotently); ``pending_intent``: another
    escalation's write may still land; ``go``: the slot is cleared of anything about someone
    else (a manual change gives the new target a hop of its own)."""
    if not slot:
        return slot, SlotVerdict.MAY_ESCALATE
    intent = slot_intent(slot)
    if intent is not None and intent.state in (IntentState.PREPARED, IntentState.APPLIED) \
            and intent.to_account_id == current:
        return applied_slot(intent), SlotVerdict.NO_GRAND_LEADER
    if slot.get(MARKER) == current:
        return slot, SlotVerdict.NO_GRAND_LEADER
    if intent is not None and intent.state is IntentState.PREPARED:
        return slot, SlotVerdict.PENDING_INTENT
    return None, SlotVerdict.MAY_ESCALATE


def slot_intent(slot: Slot) -> Intent | None:
    raw = (slot or {}).get(INTENT)
    return Intent.from_json(raw) if raw else None


def applied_slot(intent: Intent) -> dict:
    """The slot once ``intent`` landed: applied, with the marker on its ``to``."""
    return {INTENT: intent.with_state(IntentState.APPLIED).to_json(),
            MARKER: intent.to_account_id}


def _empty(slot: Slot) -> bool:
    return slot_intent(slot) is None and not (slot or {}).get(MARKER)


def _clears(slot: Slot, current: str) -> bool:
    """Whether ``slot_verdict`` would clear a non-empty slot as being about someone else."""
    new, verdict = slot_verdict(slot, current)
    return verdict is SlotVerdict.MAY_ESCALATE and not _empty(slot) and _empty(new)


# -- the slot in the store ------------------------------------------------------------------------


def settle_slot(run: ActionRun, role: Role, current: str) -> SlotVerdict:
    """Settle the role's slot for the current target ``current`` and store what
    ``slot_verdict`` leaves; the verdict.

    ``current`` is what this workflow last read, perhaps before another escalation's write
    landed. So a slot that would be cleared as "about someone else" is cleared only when a
    fresh Jira read still shows ``current`` (only a target clearly seen to have changed
    clears another's marker), and only when the slot under the lock is still the one looked
    at; anything else fails closed. Raises ``ActionError`` when the slot or Jira cannot be
    read, or the slot cannot be saved."""
    seen = read_slot(run, role)
    if _empty(seen):
        return SlotVerdict.MAY_ESCALATE  # nothing to settle: no row lock, no write
    if _clears(seen, current) and role_holder_now(run, role) != current:
        return SlotVerdict.TARGET_CHANGED

    def settle(slot: Slot) -> tuple[Slot, SlotVerdict]:
        if slot != seen:
            return slot, SlotVerdict.SLOT_CHANGED
        return slot_verdict(slot, current)

    return _update_slot(run, role, settle)


def store_intent(run: ActionRun, role: Role, intent: Intent) -> SlotVerdict:
    """Store ``intent`` (``go``) only into a slot still empty: the first look cleared or found
    nothing, so anything there now is another escalation's, never to be overwritten. Else its
    verdict (``no_grand_leader``, completing it; ``pending_intent``) or ``slot_changed``."""

    def put(slot: Slot) -> tuple[Slot, SlotVerdict]:
        if _empty(slot):
            return {INTENT: intent.to_json(), MARKER: None}, SlotVerdict.MAY_ESCALATE
        new, verdict = slot_verdict(slot, intent.from_account_id)
        if verdict is SlotVerdict.MAY_ESCALATE:
            return slot, SlotVerdict.SLOT_CHANGED
        return new, verdict

    return _update_slot(run, role, put)


def mark_applied(run: ActionRun, role: Role, intent: Intent) -> None:
    """The intent landed in Jira: applied, with the marker."""
    _update_slot(run, role, lambda slot: (applied_slot(intent), None))


def drop_intent(run: ActionRun, role: Role, intent: Intent) -> None:
    """Remove ``intent`` from the slot if it is still there (its owner's); keep the rest."""

    def drop(slot: Slot) -> tuple[Slot, None]:
        slot = dict(slot or {})
        mine = slot_intent(slot)
        if mine is not None and mine.owner_execution_id == intent.owner_execution_id:
            slot[INTENT] = None
        return slot, None

    _update_slot(run, role, drop)


def read_slot(run: ActionRun, role: Role) -> Slot:
    try:
        found = run.ports.contexts.find(run.issue.key)
    except DispatcherError as exc:
        raise ActionError(f"the escalation state could not be read ({exc.message})",
                          FailureCode.EXECUTE_FAILED) from exc
    return found.assignment_notification_state.get(role.value) if found else None


def _update_slot(run: ActionRun, role: Role, decide: Callable[[Slot], tuple[Slot, V]]) -> V:
    """Apply ``decide`` to the role's slot under the row lock; its answer. ``decide`` returns
    the slot to store and its answer; the answer of the run the store kept is returned."""
    answer: V | None = None

    def mutate(slot: Slot) -> Slot:
        nonlocal answer
        new, answer = decide(slot)
        return new

    try:
        run.ports.contexts.update_notification_slot(run.issue.key, role.value, mutate, run.now)
    except DispatcherError as exc:
        raise ActionError(f"the escalation state could not be saved ({exc.message})",
                          FailureCode.EXECUTE_FAILED) from exc
    return answer  # type: ignore[return-value]  # set: the store ran ``mutate``


def role_holder_now(run: ActionRun, role: Role) -> str:
    """The role's account ID as Jira shows it now ("" when empty), never from a read kept from
    moments ago: a person's change in between must stop the write. Unreadable while an intent
    may be pending is a technical failure: the intent stays and blocks (fail closed)."""
    run.ports.reads.forget()
    try:
        issue = run.ports.jira.load_issue(run.issue.key)
    except DispatcherError as exc:
        raise ActionError(f"escalation: the issue could not be read ({exc.message})",
                          FailureCode.EXECUTE_FAILED) from exc
    user = role.user(issue)
    return user.account_id if user is not None and user.account_id else ""
