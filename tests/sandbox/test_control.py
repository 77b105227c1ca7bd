"""The control API under /sandbox/_control: issues, users, groups, teams, reads, what was sent,
forced page outcomes; bad input in the project's error shape."""

from __future__ import annotations

import pytest

from tests.sandbox.calls import (
    BEARER,
    CONTROL,
    DESK,
    JIRA,
    JIRA_AUTH,
    LARK,
    ONCALL,
    assert_project_error,
    lark_token,
    page,
    send_card,
)
from ticket_dispatcher.sandbox.base import MAX_BODY_BYTES


def test_control_creates_then_replaces_an_issue(client):
    body = {"key": "tcid-7", "summary": "New", "priority": "P3", "labels": ["auto-dispatch"],
            "assignee_email": "alice@example.com", "created_at": "2024-05-06T02:15:00Z"}

    created = client.simulate_post(f"{CONTROL}/issues", json=body)
    replaced = client.simulate_post(f"{CONTROL}/issues", json={"key": "TCID-7", "summary": "R"})

    assert created.status_code == 201
    assert created.json["key"] == "TCID-7" and created.json["project_key"] == "TCID"
    assert created.json["assignee_email"] == "alice@example.com"
    assert created.json["created_at"] == "2024-05-06T02:15:00.000Z"
    assert replaced.status_code == 200
    assert (replaced.json["summary"], replaced.json["assignee_email"]) == ("R", None)
    jira = client.simulate_get(f"{JIRA}/issue/TCID-7", headers=JIRA_AUTH).json
    assert jira["fields"]["summary"] == "R"


def test_control_patch_changes_an_issue_and_remembers_how(client):
    result = client.simulate_patch(f"{CONTROL}/issues/TCID-1", json={
        "status": "In Progress", "l2_assignee_email": "bob@example.com", "labels": [],
        "fields": {"customfield_1": 1}})

    view = result.json
    assert result.status_code == 200
    assert (view["status"], view["l2_assignee_email"], view["labels"]) == \
        ("In Progress", "bob@example.com", [])
    assert view["fields"] == {"customfield_1": 1}
    assert view["label_history"][0]["action"] == "remove"
    assert {h["field"] for h in view["history"]} == {"status", "l2_assignee"}
    assert all(h["via"] == "control" for h in view["history"])


def test_control_patch_changes_status_assignee_and_priority_as_jira_shows_them(client):
    result = client.simulate_patch(f"{CONTROL}/issues/TCID-1", json={
        "status": "Done", "assignee_email": "alice@example.com", "priority": "P0"})
    cleared = client.simulate_patch(f"{CONTROL}/issues/TCID-1", json={"assignee_email": None})

    assert (result.json["status"], result.json["assignee_email"], result.json["priority"]) == \
        ("Done", "alice@example.com", "P0")
    assert result.json["assignee_account_id"] == "acc-alice"
    assert [(h["field"], h["from"], h["to"]) for h in cleared.json["history"]] == [
        ("status", "Todo", "Done"), ("assignee", None, "acc-alice"), ("priority", "P1", "P0"),
        ("assignee", "acc-alice", None)]
    fields = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH).json["fields"]
    assert (fields["status"]["name"], fields["priority"]["name"], fields["assignee"]) == \
        ("Done", "P0", None)


def test_control_patched_assignee_is_what_jira_answers(client):
    client.simulate_patch(f"{CONTROL}/issues/TCID-1", json={"assignee_email": "bob@example.com"})

    fields = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH).json["fields"]

    assert fields["assignee"]["accountId"] == "acc-bob"
    assert fields["assignee"]["emailAddress"] == "bob@example.com"


def test_control_reads_an_issue_with_its_comments(client):
    client.simulate_post(f"{DESK}/request/TCID-1/comment", headers=JIRA_AUTH,
                         json={"body": "hello", "public": False})

    view = client.simulate_get(f"{CONTROL}/issues/TCID-1").json
    listed = client.simulate_get(f"{CONTROL}/comments", params={"issue_key": "TCID-1"}).json

    assert [c["body"] for c in view["comments"]] == ["hello"]
    assert listed["total"] == 1 and listed["items"][0]["issue_key"] == "TCID-1"


@pytest.mark.parametrize("method,path,body,status", [
    ("GET", "/issues/NOPE-1", None, 404),
    ("PATCH", "/issues/NOPE-1", {"status": "x"}, 404),
    ("PATCH", "/issues/TCID-1", {"assignee_email": "who@example.com"}, 400),
    ("PATCH", "/issues/TCID-1", {"key": "TCID-2"}, 400),
    ("POST", "/issues", {"summary": "no key"}, 400),
    ("POST", "/issues", {"key": "not a key"}, 400),
    ("POST", "/issues", {"key": "TCID-8", "labels": [1]}, 400),
    ("POST", "/issues", {"key": "TCID-8", "colour": "red"}, 400),
    ("POST", "/issues", {"key": "TCID-8", "created_at": "yesterday"}, 400),
    ("GET", "/comments?issue_key=NOPE-1", None, 404),
])
def test_control_issue_errors_use_the_project_shape(client, method, path, body, status):
    path, _, query = path.partition("?")
    result = client.simulate_request(method, f"{CONTROL}{path}", json=body, query_string=query)

    assert_project_error(result, status)


def test_control_adds_users_generating_an_account_id(client, sandbox):
    created = client.simulate_post(f"{CONTROL}/users", json={
        "email": "New@Example.com", "display_name": "New Person", "open_id": "ou_new",
        "has_phone": True, "leader_email": "dora@example.com"})
    replaced = client.simulate_post(f"{CONTROL}/users", json={"email": "new@example.com",
                                                              "active": False})

    assert created.status_code == 201
    assert created.json["email"] == "new@example.com" and created.json["account_id"]
    assert replaced.status_code == 200
    assert replaced.json["account_id"] == created.json["account_id"]  # kept on replace
    assert sandbox.people.user("new@example.com").active is False


@pytest.mark.parametrize("body", [
    {"display_name": "no email"}, {"email": "not-an-email"},
    {"email": "x@example.com", "account_id": "acc-alice"},
    {"email": "x@example.com", "open_id": "ou_bob"}, {"email": "x@example.com", "active": "y"},
])
def test_control_refuses_bad_users(client, body):
    assert_project_error(client.simulate_post(f"{CONTROL}/users", json=body), 400)


def test_control_puts_groups_and_teams(client):
    group = client.simulate_put(f"{CONTROL}/groups/leads", json={"members": ["dora@example.com"]})
    team = client.simulate_put(f"{CONTROL}/teams/sre", json={
        "responders": ["alice@example.com", "bob@example.com"]})

    assert group.json == {"group": "leads", "members": ["dora@example.com"]}
    assert team.json["responders"] == ["alice@example.com", "bob@example.com"]
    assert client.simulate_get(f"{ONCALL}/teams/sre/responders", headers=BEARER) \
        .json["responders"][0]["email"] == "alice@example.com"


@pytest.mark.parametrize("path,body", [
    ("/groups/g", {"members": ["who@example.com"]}), ("/teams/t", {"responders": "a"}),
    ("/teams/t", {}),
])
def test_control_refuses_groups_and_teams_of_strangers(client, path, body):
    assert_project_error(client.simulate_put(f"{CONTROL}{path}", json=body), 400)


def test_control_marks_a_card_read_once(client, sandbox):
    message_id = send_card(client, lark_token(client)).json["data"]["message_id"]
    url = f"{CONTROL}/lark/messages/{message_id}/reads"

    first = client.simulate_post(url, json={"email": "alice@example.com"})
    again = client.simulate_post(url, json={"open_id": "ou_alice", "timestamp_ms": 5})

    assert first.json == {"message_id": message_id, "open_id": "ou_alice", "newly_read": True}
    assert again.json["newly_read"] is False
    assert sandbox.lark.read_users(message_id, 0, 10)[1] == 1


@pytest.mark.parametrize("message,body,status", [
    ("om_nope", {"open_id": "ou_alice"}, 404),
    (None, {"email": "ivan@example.com"}, 400),
    (None, {"open_id": "ou_ghost"}, 400),
    (None, {"email": "alice@example.com", "open_id": "ou_alice"}, 400),
    (None, {}, 400),
])
def test_control_read_errors(client, message, body, status):
    message = message or send_card(client, lark_token(client)).json["data"]["message_id"]

    result = client.simulate_post(f"{CONTROL}/lark/messages/{message}/reads", json=body)

    assert_project_error(result, status)


def test_control_lists_what_was_sent(client):
    auth = lark_token(client)
    message_id = send_card(client, auth).json["data"]["message_id"]
    client.simulate_patch(f"{LARK}/im/v1/messages/{message_id}/urgent_app",
                          params={"user_id_type": "open_id"},
                          json={"user_id_list": ["ou_alice"]}, headers=auth)
    page(client, "bob@example.com")

    messages = client.simulate_get(f"{CONTROL}/messages").json
    urgents = client.simulate_get(f"{CONTROL}/urgents").json
    pages = client.simulate_get(f"{CONTROL}/pages").json

    assert messages["total"] == 1 and messages["items"][0]["uuid"] == "u-1"
    assert urgents["items"][0]["user_ids"] == ["ou_alice"]
    assert pages["items"][0]["call_error"] == "no_phone_number"


def test_control_body_over_the_limit_is_413_in_the_project_shape(client):
    result = client.simulate_post(f"{CONTROL}/users", body=b"[" + b" " * MAX_BODY_BYTES + b"]",
                                  content_type="application/json")

    assert_project_error(result, 413)


# --- forced page outcomes ------------------------------------------------------------------

OUTCOME = f"{CONTROL}/oncall/outcome"


def force(client, **body) -> dict:
    result = client.simulate_put(OUTCOME, json=body)
    assert result.status_code == 200, result.text
    return result.json


@pytest.mark.parametrize("outcome,email,answer", [
    ("accepted", "bob@example.com", {"accepted": True, "call_id": "call-000001",
                                     "call_error": ""}),
    ("no_phone_number", "alice@example.com", {"accepted": False,
                                              "call_error": "no_phone_number"}),
    ("call_error", "alice@example.com", {"accepted": False, "call_error": "call_failed"}),
])
def test_control_forced_outcome_is_what_oncall_answers(client, outcome, email, answer):
    stored = force(client, outcome=outcome)

    assert stored == {"outcome": outcome, "email": None, "times": None}
    assert page(client, email).json == answer
    assert page(client, email, dedup_key="exec-1-page-2").json["accepted"] is answer["accepted"]


def test_control_forced_no_phone_answers_exactly_as_a_person_without_a_phone(client):
    normal = page(client, "bob@example.com").json
    force(client, outcome="no_phone_number", email="alice@example.com")

    assert page(client, "alice@example.com", dedup_key="exec-1-page-2").json == normal


def test_control_forced_pages_are_recorded_with_their_call_error(client):
    force(client, outcome="call_error")
    page(client, "alice@example.com")

    [recorded] = client.simulate_get(f"{CONTROL}/pages").json["items"]

    assert (recorded["email"], recorded["accepted"], recorded["call_id"],
            recorded["call_error"], recorded["forced"]) == \
        ("alice@example.com", False, "", "call_failed", True)


def test_control_outcome_for_one_person_leaves_the_others_alone(client):
    force(client, outcome="call_error", email="Alice@Example.com")

    alice = page(client, "alice@example.com").json
    dora = page(client, "dora@example.com", dedup_key="exec-2-page-1").json

    assert alice == {"accepted": False, "call_error": "call_failed"}
    assert dora["accepted"] is True
    assert client.simulate_get(OUTCOME).json["items"] == [
        {"outcome": "call_error", "email": "alice@example.com", "times": None}]


def test_control_a_persons_outcome_wins_over_everybodys(client):
    force(client, outcome="call_error")
    force(client, outcome="accepted", email="bob@example.com")

    bob = page(client, "bob@example.com").json
    dora = page(client, "dora@example.com", dedup_key="exec-2-page-1").json

    assert (bob["accepted"], dora["call_error"]) == (True, "call_failed")
    assert [o["email"] for o in client.simulate_get(OUTCOME).json["items"]] == \
        [None, "bob@example.com"]


def test_control_outcome_for_times_pages_then_back_to_the_directory(client):
    force(client, outcome="accepted", email="bob@example.com", times=2)

    first = page(client, "bob@example.com", dedup_key="d-1").json
    left = client.simulate_get(OUTCOME).json["items"]
    second = page(client, "bob@example.com", dedup_key="d-2").json
    third = page(client, "bob@example.com", dedup_key="d-3").json

    assert (first["accepted"], second["accepted"]) == (True, True)
    assert left == [{"outcome": "accepted", "email": "bob@example.com", "times": 1}]
    assert third == {"accepted": False, "call_error": "no_phone_number"}
    assert client.simulate_get(OUTCOME).json == {"items": [], "total": 0}


def test_control_outcome_put_again_replaces_the_same_persons(client):
    force(client, outcome="call_error", email="alice@example.com", times=5)
    force(client, outcome="no_phone_number", email="alice@example.com")

    assert client.simulate_get(OUTCOME).json["items"] == [
        {"outcome": "no_phone_number", "email": "alice@example.com", "times": None}]


def test_control_outcome_delete_goes_back_to_the_directory(client):
    force(client, outcome="call_error")
    force(client, outcome="accepted", email="bob@example.com")

    cleared = client.simulate_delete(OUTCOME)

    assert cleared.json == {"cleared": 2}
    assert page(client, "alice@example.com").json["accepted"] is True
    assert page(client, "bob@example.com", dedup_key="d-2").json == \
        {"accepted": False, "call_error": "no_phone_number"}
    assert [p["forced"] for p in client.simulate_get(f"{CONTROL}/pages").json["items"]] == \
        [False, False]


@pytest.mark.parametrize("body,path", [
    ({}, "outcome"),
    ({"outcome": None}, "outcome"),
    ({"outcome": "busy"}, "outcome"),
    ({"outcome": "ACCEPTED"}, "outcome"),
    ({"outcome": "accepted", "times": 0}, "times"),
    ({"outcome": "accepted", "times": -1}, "times"),
    ({"outcome": "accepted", "times": "2"}, "times"),
    ({"outcome": "accepted", "times": True}, "times"),
    ({"outcome": "accepted", "times": 1.5}, "times"),
    ({"outcome": "accepted", "email": "who@example.com"}, "email"),
    ({"outcome": "accepted", "email": ""}, "email"),
    ({"outcome": "accepted", "email": 7}, "email"),
    ({"outcome": "accepted", "colour": "red"}, "colour"),
    (["accepted"], "body"),
])
def test_control_refuses_bad_outcome_bodies_naming_the_field(client, body, path):
    result = client.simulate_put(OUTCOME, json=body)

    error = assert_project_error(result, 400)
    assert [problem["path"] for problem in error["errors"]] == [path]
    assert client.simulate_get(OUTCOME).json["total"] == 0
