"""Test data built in one place: tests build their objects here, not inline."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from ticket_dispatcher.store.audit import Author, Via

EXAMPLES = Path(__file__).resolve().parent.parent / "ops" / "examples"


def policy_body(**overrides) -> dict:
    """A valid ordinary policy: round-robin assign over two users for TCID tickets."""
    body = {
        "name": "Assign TCID tickets",
        "description": "round robin over the TCID squad",
        "trigger": {"enable": True, "source_in": [], "project_key_in": ["TCID"],
                    "issue_label_all": []},
        "rules": [
            {
                "name": "urgent",
                "priority": 10,
                "when": {"field": "issue.priority", "operator": "in", "values": ["P0", "P1"]},
                "then": [{"type": "assign", "assign": {
                    "receiver": {"type": "users", "users": ["a@example.com", "b@example.com"]},
                    "strategy": "round_robin"}}],
                "transition": {"on_success": "terminate"},
            }
        ],
    }
    body.update(copy.deepcopy(overrides))
    return body


def example_policy(name: str) -> dict:
    """One of the policies shipped in ``ops/examples/policies/`` (e.g. ``severity-assignee``)."""
    return json.loads((EXAMPLES / "policies" / f"{name}.json").read_text())


def jira_user_json(account_id: str, email: str = "") -> dict:
    """A user as Jira's REST API v2 (and its webhooks) write one."""
    return {"accountId": account_id, "emailAddress": email, "displayName": account_id,
            "active": True, "accountType": "atlassian", "timeZone": "Asia/Shanghai",
            "avatarUrls": {"48x48": f"https://avatar.example/{account_id}.png"}}


def jira_delivery(event: str = "jira:issue_created", *, key: str = "TCID-1",
                  project: str = "TCID", priority: str = "P1", labels=(),
                  assignee: str | None = None, l2: str | None = None,
                  severity: str | None = None, changes=(), timestamp: int = 1796000000000,
                  padding: int = 0) -> dict:
    """A Jira admin webhook's body, as Jira Cloud sends it: the event, the issue with its
    fields (``customfield_10053`` the L2 Assignee, ``customfield_10076`` the severity), and
    for an update the changelog's ``changes`` (``(field_id, from, to, fromString,
    toString)``). ``padding``: that many characters of description, for a body as large as a
    real issue's."""
    fields = {
        "summary": "Payment page is down", "description": "x" * padding,
        "project": {"id": "10000", "key": project, "name": project},
        "issuetype": {"id": "10001", "name": "Bug"},
        "priority": {"id": "2", "name": priority},
        "status": {"id": "1", "name": "Todo"},
        "labels": list(labels), "components": [{"id": "1", "name": "payments"}],
        "reporter": jira_user_json("acc-reporter", "reporter@example.com"),
        "assignee": jira_user_json(assignee) if assignee else None,
        "customfield_10053": jira_user_json(l2) if l2 else None,
        "customfield_10076": {"id": "1", "value": severity} if severity else None,
        "created": "2026-11-30T08:00:00.000+0000", "environment": None,
    }
    body: dict = {"timestamp": timestamp, "webhookEvent": event,
                  "issue_event_type_name": "issue_created" if event.endswith("created")
                  else "issue_updated",
                  "user": jira_user_json("acc-actor"),
                  "issue": {"id": "10042", "self": f"https://jira.example/rest/api/2/issue/{key}",
                            "key": key, "fields": fields}}
    if changes:
        body["changelog"] = {"id": "20001", "items": [
            {"field": field_id, "fieldtype": "custom" if field_id.startswith("customfield_")
             else "jira", "fieldId": field_id, "from": before, "fromString": before_text,
             "to": after, "toString": after_text}
            for field_id, before, after, before_text, after_text in changes]}
    return body


# The operator a test's cancel or replay is made by (its audit record names it).
OPERATOR_AUTHOR = Author("ops", Via.API)
