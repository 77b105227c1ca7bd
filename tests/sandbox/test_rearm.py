"""POST /sandbox/_control/issues/{key}/rearm: an issue goes back to how it was put (from
ops/examples/sandbox.json or POST /issues), so a demo a workflow has finished can run again."""

from __future__ import annotations

import json
from pathlib import Path

from falcon import testing

from tests.sandbox.calls import (
    CONTROL,
    DESK,
    JIRA,
    JIRA_AUTH,
    assert_project_error,
    sandbox_app,
)
from ticket_dispatcher.sandbox import Sandbox, load_examples

EXAMPLES = Path(__file__).resolve().parents[2] / "ops" / "examples"
ISSUE_KEYS = ("key", "summary", "priority", "severity", "status", "labels", "components",
              "assignee_email", "l2_assignee_email", "reporter_email", "environment")


def rearm(client, key: str):
    return client.simulate_post(f"{CONTROL}/issues/{key}/rearm")


def test_rearm_puts_back_every_field_a_workflow_and_a_person_changed(client):
    before = client.simulate_get(f"{CONTROL}/issues/TCID-1").json
    client.simulate_put(f"{JIRA}/issue/TCID-1/assignee", headers=JIRA_AUTH,
                        json={"accountId": "acc-bob"})
    client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH, json={
        "update": {"labels": [{"remove": "auto-dispatch"}]}, "fields": {"customfield_1": "x"}})
    client.simulate_patch(f"{CONTROL}/issues/TCID-1", json={
        "status": "Done", "priority": "P3", "components": [], "l2_assignee_email":
        "alice@example.com", "summary": "changed"})
    changed = client.simulate_get(f"{CONTROL}/issues/TCID-1").json
    assert [k for k in ISSUE_KEYS if changed[k] != before[k]] == [
        "summary", "priority", "status", "labels", "components", "assignee_email",
        "l2_assignee_email"]
    assert changed["fields"] == {"customfield_1": "x"}

    result = rearm(client, "TCID-1")

    assert result.status_code == 200, result.text
    after = result.json
    assert {k: after[k] for k in ISSUE_KEYS} == {k: before[k] for k in ISSUE_KEYS}
    assert (after["fields"], after["created_at"]) == (before["fields"], before["created_at"])
    jira = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH).json["fields"]
    assert (jira["assignee"], jira["labels"], jira["status"]["name"]) == \
        (None, ["auto-dispatch"], "Todo")


def test_rearm_keeps_the_comments_and_records_itself_in_the_histories(client):
    client.simulate_post(f"{DESK}/request/TCID-1/comment", headers=JIRA_AUTH,
                         json={"body": "first run", "public": False})
    client.simulate_patch(f"{CONTROL}/issues/TCID-1", json={"status": "Done", "labels": []})

    view = rearm(client, "TCID-1").json

    assert [c["body"] for c in view["comments"]] == ["first run"]
    assert [(h["field"], h["from"], h["to"], h["via"]) for h in view["history"]] == [
        ("status", "Todo", "Done", "control"), ("status", "Done", "Todo", "rearm")]
    assert [(h["action"], h["label"], h["via"]) for h in view["label_history"]] == [
        ("remove", "auto-dispatch", "control"), ("add", "auto-dispatch", "rearm")]


def test_rearm_of_an_unchanged_issue_changes_nothing(client):
    view = rearm(client, "TCID-1").json

    assert (view["history"], view["label_history"]) == ([], [])


def test_rearm_restores_the_labels_in_their_original_order(client):
    client.simulate_post(f"{CONTROL}/issues", json={"key": "TCID-5", "labels": ["a", "b", "c"]})
    client.simulate_patch(f"{CONTROL}/issues/TCID-5", json={"labels": ["c"]})

    assert rearm(client, "TCID-5").json["labels"] == ["a", "b", "c"]


def test_rearm_goes_back_to_the_last_post_of_the_issue(client):
    client.simulate_post(f"{CONTROL}/issues", json={"key": "TCID-1", "status": "Open",
                                                     "assignee_email": "dora@example.com"})
    client.simulate_patch(f"{CONTROL}/issues/TCID-1", json={"status": "Closed",
                                                           "assignee_email": None})

    view = rearm(client, "TCID-1").json

    assert (view["status"], view["assignee_email"], view["labels"]) == \
        ("Open", "dora@example.com", [])


def test_rearm_of_an_unknown_issue_is_404_in_the_project_shape(client):
    assert_project_error(rearm(client, "NOPE-1"), 404)


def test_rearm_whose_person_lost_their_account_is_a_conflict(client, sandbox):
    client.simulate_post(f"{CONTROL}/issues", json={"key": "TCID-6",
                                                     "assignee_email": "bob@example.com"})
    client.simulate_post(f"{CONTROL}/users", json={"email": "bob@example.com",
                                                    "account_id": "acc-bob-2"})

    body = assert_project_error(rearm(client, "TCID-6"), 409)

    assert "acc-bob" in body["description"]
    assert sandbox.jira.issue("TCID-6").assignee == "acc-bob"  # left as it was


def test_rearm_puts_the_example_issues_back_as_sandbox_json_defines_them():
    sandbox = Sandbox()
    load_examples(sandbox, EXAMPLES)
    client = testing.TestClient(sandbox_app(sandbox))
    defined = {i["key"]: i for i in json.loads((EXAMPLES / "sandbox.json").read_text())["issues"]}
    # What the README's demos leave behind: a notification workflow took notify-assignee off
    # GTOC-1 and a person moved it on; an assignment took auto-dispatch off TCID-2.
    sandbox.jira.update_issue("GTOC-1", {"status": "In Progress"},
                              label_ops=[("remove", "notify-assignee")], via="jira")
    sandbox.jira.update_issue("TCID-2", {"assignee": "sbx-bob"},
                              label_ops=[("remove", "auto-dispatch")], via="jira")

    for key in ("GTOC-1", "TCID-2"):
        view = rearm(client, key).json
        expected = defined[key]
        assert {k: view[k] for k in ("status", "priority", "labels", "assignee_email")} == {
            "status": expected["status"], "priority": expected["priority"],
            "labels": expected["labels"], "assignee_email": expected.get("assignee_email")}
