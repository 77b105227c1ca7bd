"""Engineer and dispatch-context endpoints."""

from __future__ import annotations

import pytest


def test_put_creates_then_updates_an_engineer(api):
    created = api.put("/engineers/Alice@Example.COM",
                      json={"dispatch_enabled": True, "display_name": "Alice"})
    updated = api.put("/engineers/alice@example.com", json={"dispatch_enabled": False})

    assert created.status_code == 201
    assert created.json["email"] == "alice@example.com"
    assert updated.status_code == 200
    assert updated.json["dispatch_enabled"] is False
    assert updated.json["display_name"] == "Alice"  # omitted fields keep their value


def test_list_engineers_filters_by_dispatch_switch(api):
    api.put("/engineers/a@example.com", json={"dispatch_enabled": True})
    api.put("/engineers/b@example.com", json={"dispatch_enabled": False})

    enabled = api.get("/engineers", params={"dispatch_enabled": "true"}).json

    assert api.get("/engineers").json["total"] == 2
    assert [e["email"] for e in enabled["items"]] == ["a@example.com"]


def test_delete_engineer(api):
    api.put("/engineers/a@example.com", json={"dispatch_enabled": True})

    assert api.delete("/engineers/a@example.com").status_code == 204
    assert api.get("/engineers/a@example.com").status_code == 404
    assert api.delete("/engineers/a@example.com").status_code == 404


@pytest.mark.parametrize("body,path", [
    ({}, "dispatch_enabled"),
    ({"dispatch_enabled": "yes"}, "dispatch_enabled"),
    ({"dispatch_enabled": True, "display_name": 3}, "display_name"),
    ({"dispatch_enabled": True, "team": "sre"}, "team"),
])
def test_bad_engineer_body_is_400_naming_the_field(api, body, path):
    result = api.put("/engineers/a@example.com", json=body)

    assert result.status_code == 400
    assert [p["path"] for p in result.json["errors"]] == [path]


@pytest.mark.parametrize(("key", "length"), [("display_name", 201), ("jira_account_id", 129)])
def test_an_engineers_name_and_account_id_are_bounded(api, key, length):
    result = api.put("/engineers/a@example.com",
                     json={"dispatch_enabled": True, key: "x" * length})

    assert result.status_code == 400
    assert [p["path"] for p in result.json["errors"]] == [key]
    assert api.services.store.engineers.page()[1] == 0


@pytest.mark.parametrize("path", ["/engineers/not-an-email",
                                  "/engineers/%ff%fe@example.com",  # no UTF-8: decoded as U+FFFD
                                  "/engineers/a%00b@example.com"])
def test_engineer_path_must_be_an_email(api, path):
    result = api.put(path, json={"dispatch_enabled": True})

    assert result.status_code == 400
    assert api.services.store.engineers.page()[1] == 0


def test_context_read_and_404(api, clock):
    api.services.store.contexts.ensure_default("TCID-7", now=clock.now())

    found = api.get("/dispatch/contexts/TCID-7")

    assert found.status_code == 200
    assert found.json["issue_key"] == "TCID-7"
    assert found.json["assignee"] == "" and found.json["assignment_notification_state"] == {}
    assert api.get("/dispatch/contexts/TCID-8").status_code == 404


def test_context_key_must_look_like_an_issue_key(api):
    assert api.get("/dispatch/contexts/not a key").status_code == 400


def test_context_delete_is_refused_while_an_escalation_intent_exists(api, clock):
    store = api.services.store
    intent = {"escalation_intent": {"owner_execution_id": 1, "from_account_id": "A",
                                    "to_account_id": "B", "to_email": "b@example.com",
                                    "state": "prepared"},
              "auto_escalated_to_account_id": None}
    store.contexts.update_notification_slot("TCID-9", "assignee", lambda slot: intent,
                                            now=clock.now())

    refused = api.delete("/dispatch/contexts/TCID-9")
    store.contexts.update_notification_slot("TCID-9", "assignee", lambda slot: None,
                                            now=clock.now())
    allowed = api.delete("/dispatch/contexts/TCID-9")

    assert refused.status_code == 409
    assert allowed.status_code == 204
    assert api.get("/dispatch/contexts/TCID-9").status_code == 404
