"""Typed, versioned action state (domain/actions/state.py): each action's context loads from
the shape the previous release stored (no ``version``) and dumps the same keys plus
``version``; what a release does not know is kept; a newer version is refused."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from tests.previous_release import card, escalating, page, urgent
from ticket_dispatcher.domain.actions.assign import AssignState
from ticket_dispatcher.domain.actions.base import ActionError
from ticket_dispatcher.domain.actions.notification_state import (
    CardState,
    EscalationState,
    IntentState,
    LabelPhase,
    Outcome,
    PageState,
    Role,
    UrgentState,
    Wakeup,
)
from ticket_dispatcher.domain.actions.state import CallPhase, CallStatus, StateError
from ticket_dispatcher.domain.actions.triage import TriageState
from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES
from ticket_dispatcher.domain.execution import FailureCode

DEADLINE = "2026-11-30T01:00:30.000Z"
ASSIGN = {"assign": {"receiver": {"type": "users", "users": ["a@example.com"]},
                     "strategy": "first", "current_assignee": "", "candidates": ["a@example.com"],
                     "assignee": "a@example.com", "reason": "first: first dispatch-enabled "
                     "candidate in receiver order", "account_id": "acc-a",
                     "jira_updated": True, "label_removed": "auto-dispatch"}}
TRIAGE = {"triage": {"before": {"priority": "P2", "components": ["web"], "labels": ["a"]},
                     "changes": {"priority": {"from": "P2", "to": "P1"}},
                     "skipped_reason": "", "applied": True}}
PREVIOUS_RELEASE = [
    (CardState, card(7)), (UrgentState, urgent(7)),
    (PageState, page(7, 1, DEADLINE, waited=False)),
    (PageState, page(7, 2, DEADLINE, waited=True)), (PageState, {"page": {"attempt": 3}}),
    (EscalationState, escalating(7, "prepared")),
    (EscalationState, escalating(7, "applied", outcome="escalated", wakeup_phase="done")),
    (EscalationState, {"escalation": {}}), (AssignState, ASSIGN), (TriageState, TRIAGE),
]


@pytest.mark.parametrize("state_type,context", PREVIOUS_RELEASE)
def test_a_context_of_the_previous_release_dumps_the_same_keys_plus_its_version(state_type,
                                                                                context):
    stored = context[state_type.KEY]

    state = state_type.load(copy.deepcopy(stored))

    assert state.version == 0
    assert state.dump() == {**stored, "version": state_type.VERSION}
    assert state_type.load(state.dump()).dump() == state.dump()


def test_the_stored_words_read_as_typed_values():
    card_state = CardState.load(card(7)["notification"])
    page_state = PageState.load(page(7, 2, DEADLINE, waited=True)["page"])
    escalation = EscalationState.load(escalating(7, "prepared")["escalation"])

    assert card_state.role is Role.ASSIGNEE and card_state.label_phase is LabelPhase.REMOVED
    assert (card_state.card.phase, card_state.card.status) == (CallPhase.FINISHED,
                                                               CallStatus.SENT)
    assert card_state.planned_snapshot.target.account_id == "acc-alice"
    assert page_state.deadline == datetime(2026, 11, 30, 1, 0, 30, tzinfo=UTC)
    assert (page_state.outcome, page_state.page.status) == (Outcome.TIMEOUT,
                                                            CallStatus.ACCEPTED)
    assert escalation.intent.state is IntentState.PREPARED
    assert escalation.expected.label == "notify-assignee"


@pytest.mark.parametrize("stored,wakeup", [("required", Wakeup.LABEL_RESTORED),
                                           ("ensured", Wakeup.ENSURED),
                                           ("failed", Wakeup.FAILED)])
def test_the_cards_trigger_phase_is_saved_only_once_its_label_is_back(stored, wakeup):
    raw = {**card(7)["notification"], "label_phase": "restored", "trigger_phase": stored}

    state = CardState.load(raw)

    assert state.wakeup is wakeup
    assert state.dump()["trigger_phase"] == stored


@pytest.mark.parametrize("stored,wakeup", [("required", Wakeup.REQUIRED),
                                           ("done", Wakeup.ENSURED)])
def test_the_escalations_wakeup_phase_keeps_its_own_words(stored, wakeup):
    raw = escalating(7, "applied", outcome="escalated", wakeup_phase=stored)["escalation"]

    state = EscalationState.load(raw)

    assert state.wakeup is wakeup
    assert state.dump()["wakeup_phase"] == stored
    state.wakeup = Wakeup.FAILED  # the trigger could not be ensured: a warning says so
    assert state.dump()["wakeup_phase"] == "done"


def test_a_key_this_release_does_not_know_is_written_back_as_it_was():
    raw = {**page(7, 1, DEADLINE, waited=False)["page"], "escalation_hint": {"x": 1},
           "version": 1}

    state = PageState.load(raw)
    state.polls = 1

    assert state.dump() == {**raw, "polls": 1}


def test_a_newer_version_is_refused_rather_than_misread():
    raw = {"attempt": 1, "version": PageState.VERSION + 1}

    with pytest.raises(StateError, match="newer"):
        PageState.load(raw)
    with pytest.raises(ActionError, match="cannot be read") as refused:
        PageState.read({"page": raw})
    assert refused.value.code is FailureCode.EXECUTE_FAILED


def test_warnings_are_stored_from_the_first_one_on():
    state = UrgentState.load({})
    assert "warnings" not in state.dump()

    state.warn("urgent: no card message to mark urgent")

    assert state.dump()["warnings"] == ["urgent: no card message to mark urgent"]


def test_the_role_type_names_every_notification_role_of_the_catalog():
    assert {role.value for role in Role} == {r.role for r in NOTIFICATION_ROLES}
    assert {role.source for role in Role} == {r.source for r in NOTIFICATION_ROLES}
