"""Dispatch contexts: default rows, guarded delete, per-role slot updates."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from ticket_dispatcher.domain.actions.escalation_slot import slot_verdict
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.store import unit_of_work
from ticket_dispatcher.store.models import ContextRow

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
INTENT = {
    "owner_execution_id": 123,
    "from_account_id": "jira-account-A",
    "to_account_id": "jira-account-B",
    "to_email": "leader@example.com",
    "state": "prepared",
}


def put_slot(value):
    return lambda slot: value


def test_ensure_default_creates_an_empty_context_once(store, query_counter):
    with query_counter() as queries:
        created = store.contexts.ensure_default("TCID-1", T0)
    again = store.contexts.ensure_default("TCID-1", T0 + timedelta(1))

    context = store.contexts.get("TCID-1")
    assert (created, again) == (True, False)
    assert queries.count == 1
    assert (context.assignee, context.assignee_l2) == ("", "")
    assert context.assignment_notification_state == {}
    assert context.created_at == context.updated_at == T0


def test_get_of_a_missing_context_is_not_found(store):
    with pytest.raises(NotFound, match="TCID-404"):
        store.contexts.get("TCID-404")


def test_update_notification_slot_creates_the_context_and_touches_one_role(store):
    later = T0 + timedelta(minutes=1)

    store.contexts.update_notification_slot(
        "TCID-1", "assignee", put_slot({"escalation_intent": INTENT,
                                        "auto_escalated_to_account_id": None}), T0)
    context = store.contexts.update_notification_slot(
        "TCID-1", "l2_assignee", put_slot({"escalation_intent": None,
                                           "auto_escalated_to_account_id": "jira-account-C"}),
        later)

    assert context == store.contexts.get("TCID-1")
    assert context.assignment_notification_state == {
        "assignee": {"escalation_intent": INTENT, "auto_escalated_to_account_id": None},
        "l2_assignee": {"escalation_intent": None,
                        "auto_escalated_to_account_id": "jira-account-C"},
    }
    assert context.created_at == T0 and context.updated_at == later


def test_mutation_sees_the_current_slot_as_a_copy(store):
    store.contexts.update_notification_slot("TCID-1", "assignee",
                                            put_slot({"escalation_intent": INTENT}), T0)
    seen = []

    def apply_intent(slot):
        seen.append(slot)
        slot["escalation_intent"]["state"] = "applied"
        slot["auto_escalated_to_account_id"] = slot["escalation_intent"]["to_account_id"]
        return slot

    context = store.contexts.update_notification_slot("TCID-1", "assignee", apply_intent, T0)

    assert seen[0]["escalation_intent"]["owner_execution_id"] == 123
    slot = context.assignment_notification_state["assignee"]
    assert slot["escalation_intent"]["state"] == "applied"
    assert slot["auto_escalated_to_account_id"] == "jira-account-B"
    assert store.contexts.update_notification_slot(
        "TCID-2", "l2_assignee", lambda slot: seen.append(slot), T0
    ).assignment_notification_state == {"l2_assignee": None}
    assert seen[-1] is None


def test_unknown_role_is_refused(store):
    with pytest.raises(ValueError, match="unknown notification role"):
        store.contexts.update_notification_slot("TCID-1", "reporter", put_slot({}), T0)


def test_delete_is_refused_while_an_intent_or_marker_exists(store):
    store.contexts.update_notification_slot("TCID-1", "assignee",
                                            put_slot({"escalation_intent": INTENT}), T0)
    store.contexts.update_notification_slot(
        "TCID-2", "l2_assignee", put_slot({"auto_escalated_to_account_id": "jira-account-B"}), T0)

    for issue_key in ("TCID-1", "TCID-2"):
        with pytest.raises(Conflict, match="intent or marker"):
            store.contexts.delete(issue_key)
        assert store.contexts.get(issue_key)


def test_delete_succeeds_once_both_slots_are_clear(store):
    store.contexts.update_notification_slot("TCID-1", "assignee",
                                            put_slot({"escalation_intent": INTENT}), T0)
    store.contexts.update_notification_slot("TCID-1", "assignee", put_slot(None), T0)

    store.contexts.delete("TCID-1")

    with pytest.raises(NotFound):
        store.contexts.get("TCID-1")
    with pytest.raises(NotFound):
        store.contexts.delete("TCID-1")


def test_slot_update_leaves_the_assignee_columns_alone(store):
    store.contexts.ensure_default("TCID-1", T0)
    with unit_of_work(store.db):
        ContextRow.update(assignee="a@x.com", assignee_l2="b@x.com").where(
            ContextRow.issue_key == "TCID-1").execute()

    context = store.contexts.update_notification_slot("TCID-1", "assignee",
                                                      put_slot({"escalation_intent": INTENT}), T0)

    assert (context.assignee, context.assignee_l2) == ("a@x.com", "b@x.com")
    assert store.contexts.get("TCID-1") == context


def test_concurrent_updates_of_the_two_roles_lose_nothing(store):
    rounds = 10
    barrier = threading.Barrier(2)
    errors = []

    def count(slot):
        slot = slot or {"count": 0}
        slot["count"] += 1
        return slot

    def bump(role):
        barrier.wait()
        try:
            for _ in range(rounds):
                store.contexts.update_notification_slot("TCID-1", role, count, T0)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=bump, args=(role,)) for role in ("assignee", "l2_assignee")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    state = store.contexts.get("TCID-1").assignment_notification_state
    assert errors == []
    assert state == {"assignee": {"count": rounds}, "l2_assignee": {"count": rounds}}


def test_concurrent_intents_for_one_role_admit_exactly_one_owner(store):
    """Two executions racing to persist an escalation intent for the same role:
    under the row lock one wins, the other sees a pending intent and fails closed."""
    barrier = threading.Barrier(2)
    verdicts, errors = {}, []

    def persist(owner):
        def put(slot):
            new, verdict = slot_verdict(slot, "jira-account-A")
            verdicts[owner] = verdict
            return {"escalation_intent": {**INTENT, "owner_execution_id": owner},
                    "auto_escalated_to_account_id": None} if verdict == "go" else new
        barrier.wait()
        try:
            store.contexts.update_notification_slot("TCID-1", "assignee", put, T0)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=persist, args=(owner,)) for owner in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    slot = store.contexts.get("TCID-1").assignment_notification_state["assignee"]
    assert errors == []
    assert sorted(verdicts.values()) == ["go", "pending_intent"]
    winner = next(owner for owner, verdict in verdicts.items() if verdict == "go")
    assert slot["escalation_intent"]["owner_execution_id"] == winner
