"""The action contexts as the previous release stored them: no ``version``, and the keys it
wrote (taken from its executions' ``action_executions_json``), for the Assignee workflow of
Alice (card, App-urgent, three pages, the escalation to her leader Bob). Only the execution ID
and the times of a run are filled in."""

from __future__ import annotations

LABEL = "notify-assignee"
PENDING = "WAITING FOR FIRST RESPONSE"
ALICE_TARGET = {"account_id": "acc-alice", "email": "alice@example.com",
                "display_name": "Alice", "active": True}


def expected(execution_id: int, **more) -> dict:
    return {"role": "assignee", "project": "TCID", "target": ALICE_TARGET,
            "message_id": f"om_td-{execution_id}-0-0", "target_lark_id": "ou_alice", **more}


def card(execution_id: int) -> dict:
    return {"notification": {
        "role": "assignee", "label": LABEL,
        "snapshot": {"role": "assignee", "label": LABEL, "project": "TCID",
                     "target": ALICE_TARGET,
                     "urgency": {"field": "issue.custom_fields.severity", "value": "S1",
                                 "urgent": True},
                     "status": PENDING},
        "card_uuid": f"td-{execution_id}-0-0", "label_phase": "removed",
        "card_phase": "finished", "target_lark_id": "ou_alice",
        "message_id": f"om_td-{execution_id}-0-0", "card_status": "sent",
        "notification_comment_phase": "finished", "notification_comment_status": "written",
        "label_check": {"after_delete": "unchanged"}, "outcome": "sent"}}


def urgent(execution_id: int) -> dict:
    return {"urgent": {"expected": expected(execution_id), "urgent_phase": "finished",
                       "invalid_user_ids": [], "urgent_status": "sent",
                       "outcome": "continued"}}


def page(execution_id: int, attempt: int, deadline: str, *, waited: bool) -> dict:
    """A page that was accepted; ``waited``: its wait ran out (else it is parked in it)."""
    context = {"attempt": attempt, "expected": expected(execution_id), "deadline": deadline,
               "page_phase": "finished", "call_id": f"call-{attempt}", "call_error": "",
               "page_status": "accepted", "notification_comment_phase": "finished",
               "notification_comment_status": "written"}
    if waited:
        context.update(polls=1, outcome="timeout")
    return {"page": context}


def escalating(execution_id: int, intent_state: str, **more) -> dict:
    return {"escalation": {
        "expected": expected(execution_id, label=LABEL),
        "leader": {"email": "bob@example.com", "account_id": "acc-bob"},
        "intent": {"owner_execution_id": execution_id, "from_account_id": "acc-alice",
                   "to_account_id": "acc-bob", "to_email": "bob@example.com",
                   "state": intent_state},
        **more}}
