"""The sandbox (SPEC §11 *Sandbox*): the four fake services with the paths and shapes of §11,
their own errors and fake auth, injected faults, the control API, and the example world."""

from __future__ import annotations

import base64
import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import falcon
import pytest
from falcon import testing

from ticket_dispatcher.clock import ManualClock
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.issues import issue_from_jira
from ticket_dispatcher.domain.model import PolicyStatus
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.http import errors
from ticket_dispatcher.http.app import Services, create_app
from ticket_dispatcher.integrations.sandbox import (
    SandboxState,
    load_examples,
    mount_sandbox,
    seed_store,
    service_urls,
)
from ticket_dispatcher.integrations.sandbox.state import SandboxIssue

EXAMPLES = Path(__file__).resolve().parents[2] / "ops" / "examples"
JIRA = "/sandbox/jira/rest/api/2"
DESK = "/sandbox/jira/rest/servicedeskapi"
LARK = "/sandbox/lark/open-apis"
ONCALL = "/sandbox/oncall/api/v1"
CORE = "/sandbox/core/api/v1"
CONTROL = "/sandbox/_control"
JIRA_AUTH = {"Authorization": "Basic " + base64.b64encode(b"bot@example.com:api-token").decode()}
BEARER = {"Authorization": "Bearer internal-token"}
CREATED = datetime(2021, 1, 17, 12, 34, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def state(clock, sleeps) -> SandboxState:
    """A small world: alice (Lark, phone, leader dora), bob (Lark, no phone), dora (no leader),
    ivan (inactive, not on Lark); group l1; team sre (bob primary); issue TCID-1."""
    world = SandboxState(now=clock.now, sleep=sleeps.append)
    world.put_user("alice@example.com", display_name="Alice Wang", account_id="acc-alice",
                   open_id="ou_alice", has_phone=True, leader_email="dora@example.com")
    world.put_user("bob@example.com", display_name="Bob Li", account_id="acc-bob",
                   open_id="ou_bob", leader_email="dora@example.com")
    world.put_user("dora@example.com", display_name="Dora Zhao", account_id="acc-dora",
                   open_id="ou_dora", has_phone=True)
    world.put_user("ivan@example.com", display_name="Ivan Old", account_id="acc-ivan",
                   active=False)
    world.put_group("l1", ["alice@example.com", "bob@example.com", "ivan@example.com"])
    world.put_team("sre", ["bob@example.com", "alice@example.com"])
    world.put_issue(SandboxIssue(
        key="TCID-1", project_key="TCID", summary="Login fails", environment="prod",
        priority="P1", status="Todo", severity="S1", labels=["auto-dispatch"],
        components=["API"], reporter="acc-dora", created_at=CREATED,
    ))
    return world


def sandbox_app(state: SandboxState) -> falcon.App:
    app = falcon.App()
    errors.install(app)
    mount_sandbox(app, state)
    return app


@pytest.fixture
def client(state) -> testing.TestClient:
    return testing.TestClient(sandbox_app(state))


def lark_token(client) -> dict:
    result = client.simulate_post(f"{LARK}/auth/v3/tenant_access_token/internal",
                                  json={"app_id": "cli_x", "app_secret": "s3cret"})
    return {"Authorization": f"Bearer {result.json['tenant_access_token']}"}


def send_card(client, auth: dict, receive_id: str = "ou_alice", uuid: str | None = "u-1"):
    body = {"receive_id": receive_id, "msg_type": "interactive",
            "content": json.dumps({"elements": []})}
    if uuid is not None:
        body["uuid"] = uuid
    return client.simulate_post(f"{LARK}/im/v1/messages", params={"receive_id_type": "open_id"},
                                json=body, headers=auth)


def assert_project_error(result, status: int) -> dict:
    assert result.status_code == status, result.text
    assert set(result.json) == {"code", "title", "description", "errors"}
    return result.json


def assert_jira_error(result, status: int) -> dict:
    assert result.status_code == status, result.text
    assert set(result.json) == {"errorMessages", "errors"}
    return result.json


# --- Jira -------------------------------------------------------------------------------------


def test_jira_issue_has_the_standard_jira_shape(client):
    result = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)

    assert result.status_code == 200
    assert result.json == {"key": "TCID-1", "fields": {
        "summary": "Login fails",
        "project": {"key": "TCID", "name": "TCID"},
        "environment": "prod",
        "reporter": {"accountId": "acc-dora", "accountType": "atlassian",
                     "emailAddress": "dora@example.com", "displayName": "Dora Zhao",
                     "active": True},
        "assignee": None,
        "customfield_10053": None,
        "created": "2021-01-17T12:34:00.000+0000",
        "components": [{"name": "API"}],
        "labels": ["auto-dispatch"],
        "priority": {"name": "P1"},
        "status": {"name": "Todo"},
        "customfield_10076": {"value": "S1"},
    }}


def test_jira_issue_answer_parses_into_the_issue_snapshot(client):
    fields = ("summary,project,environment,reporter,assignee,created,components,labels,"
              "priority,status,customfield_10053,customfield_10076")

    result = client.simulate_get(f"{JIRA}/issue/TCID-1", params={"fields": fields},
                                 headers=JIRA_AUTH)

    issue = issue_from_jira(result.json)
    assert (issue.key, issue.project_key, issue.priority, issue.severity) == \
        ("TCID-1", "TCID", "P1", "S1")
    assert issue.reporter.email == "dora@example.com"
    assert issue.created_at == CREATED


def test_jira_fields_parameter_limits_the_fields(client):
    result = client.simulate_get(f"{JIRA}/issue/TCID-1", params={"fields": "summary,labels"},
                                 headers=JIRA_AUTH)

    assert result.json == {"key": "TCID-1",
                           "fields": {"summary": "Login fails", "labels": ["auto-dispatch"]}}


def test_jira_field_ids_are_configurable_on_the_state(state):
    state.l2_field_id, state.severity_field_id = "customfield_1", "customfield_2"
    state.update_issue("TCID-1", {"l2_assignee": "acc-bob"}, via="test")
    client = testing.TestClient(sandbox_app(state))

    fields = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH).json["fields"]

    assert fields["customfield_1"]["accountId"] == "acc-bob"
    assert fields["customfield_2"] == {"value": "S1"}
    assert "customfield_10053" not in fields


def test_jira_unknown_issue_is_404_in_jira_shape(client):
    result = client.simulate_get(f"{JIRA}/issue/TCID-99", headers=JIRA_AUTH)

    assert assert_jira_error(result, 404) == {
        "errorMessages": ["Issue does not exist or you do not have permission to see it."],
        "errors": {}}


@pytest.mark.parametrize("headers", [
    {}, BEARER, {"Authorization": "Basic not-base64!"},
    {"Authorization": "Basic " + base64.b64encode(b"no-colon").decode()},
])
def test_jira_needs_basic_auth(client, headers):
    result = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=headers)

    assert assert_jira_error(result, 401)["errorMessages"]


def test_jira_assign_sets_and_clears_the_assignee(client, state):
    assigned = client.simulate_put(f"{JIRA}/issue/TCID-1/assignee",
                                   json={"accountId": "acc-alice"}, headers=JIRA_AUTH)
    assignee = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH) \
        .json["fields"]["assignee"]
    cleared = client.simulate_put(f"{JIRA}/issue/TCID-1/assignee", json={"accountId": None},
                                  headers=JIRA_AUTH)

    assert assigned.status_code == 204 and cleared.status_code == 204
    assert assignee["emailAddress"] == "alice@example.com"
    assert state.issue("TCID-1").assignee is None
    assert [(h["from"], h["to"]) for h in state.issue("TCID-1").history] == \
        [(None, "acc-alice"), ("acc-alice", None)]


@pytest.mark.parametrize("body", [{"accountId": "acc-nobody"}, {"accountId": "acc-ivan"},
                                  {"accountId": 5}, {}])
def test_jira_assign_refuses_unknown_inactive_or_missing_accounts(client, state, body):
    result = client.simulate_put(f"{JIRA}/issue/TCID-1/assignee", json=body, headers=JIRA_AUTH)

    assert "accountId" in assert_jira_error(result, 400)["errors"] or \
        "assignee" in result.json["errors"]
    assert state.issue("TCID-1").assignee is None


def test_jira_assign_unknown_issue_is_404(client):
    result = client.simulate_put(f"{JIRA}/issue/NOPE-1/assignee", json={"accountId": "acc-bob"},
                                 headers=JIRA_AUTH)

    assert_jira_error(result, 404)


def test_jira_edit_sets_l2_priority_components_severity_and_raw_fields(client, state):
    result = client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH, json={"fields": {
        "customfield_10053": {"accountId": "acc-bob"},
        "priority": {"name": "P2"},
        "components": [{"name": "Web"}, {"name": "API"}],
        "customfield_10076": {"value": "S3"},
        "customfield_30000": {"value": "raw"},
    }})

    assert result.status_code == 204
    fields = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH).json["fields"]
    assert fields["customfield_10053"]["emailAddress"] == "bob@example.com"
    assert fields["priority"] == {"name": "P2"}
    assert fields["components"] == [{"name": "Web"}, {"name": "API"}]
    assert fields["customfield_10076"] == {"value": "S3"}
    assert fields["customfield_30000"] == {"value": "raw"}


def test_jira_label_updates_add_and_remove_and_are_remembered(client, state):
    result = client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH, json={
        "update": {"labels": [{"remove": "auto-dispatch"}, {"add": "notify-assignee"},
                              {"add": "notify-assignee"}, {"remove": "absent"}]}})

    assert result.status_code == 204
    issue = state.issue("TCID-1")
    assert issue.labels == ["notify-assignee"]
    assert [(h["action"], h["label"], h["via"]) for h in issue.label_history] == \
        [("remove", "auto-dispatch", "jira"), ("add", "notify-assignee", "jira")]


def test_jira_labels_field_replaces_the_labels(client, state):
    client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH,
                        json={"fields": {"labels": ["a", "auto-dispatch"]}})

    assert state.issue("TCID-1").labels == ["auto-dispatch", "a"]


@pytest.mark.parametrize("body,field", [
    ({"fields": {"status": {"name": "Done"}}}, "status"),
    ({"fields": {"priority": "P1"}}, "priority"),
    ({"fields": {"customfield_10053": {"accountId": "acc-nobody"}}}, "customfield_10053"),
    ({"fields": {"components": ["API"]}}, "components"),
    ({"update": {"labels": [{"set": ["x"]}]}}, "labels"),
    ({"update": {"components": [{"add": {"name": "x"}}]}}, "components"),
])
def test_jira_edit_refuses_bad_fields_with_jira_errors(client, state, body, field):
    result = client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH, json=body)

    assert field in assert_jira_error(result, 400)["errors"]
    assert state.issue("TCID-1").history == []


def test_jira_malformed_body_is_a_jira_400(client):
    result = client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH, body="{nope",
                                 content_type="application/json")

    assert assert_jira_error(result, 400)["errorMessages"] == ["the body is not valid JSON"]


def test_jira_user_search_is_a_contains_match_on_email_or_name(client):
    def search(query):
        result = client.simulate_get(f"{JIRA}/user/search", params={"query": query},
                                     headers=JIRA_AUTH)
        return [user["emailAddress"] for user in result.json]

    assert search("ALICE@example.com") == ["alice@example.com"]
    assert search("Li") == ["alice@example.com", "bob@example.com"]  # "alice", "Bob Li"
    assert search("nobody") == []


def test_jira_user_search_answers_bare_user_objects(client):
    result = client.simulate_get(f"{JIRA}/user/search", params={"query": "bob"},
                                 headers=JIRA_AUTH)

    assert result.json == [{"accountId": "acc-bob", "accountType": "atlassian",
                            "emailAddress": "bob@example.com", "displayName": "Bob Li",
                            "active": True}]


def test_jira_user_search_needs_a_query(client):
    result = client.simulate_get(f"{JIRA}/user/search", headers=JIRA_AUTH)

    assert_jira_error(result, 400)


def test_service_desk_comment_is_201_and_stored_on_the_issue(client, state):
    result = client.simulate_post(f"{DESK}/request/TCID-1/comment", headers=JIRA_AUTH,
                                  json={"body": "Assigned to alice", "public": False})

    assert result.status_code == 201
    assert result.json["body"] == "Assigned to alice" and result.json["public"] is False
    assert result.json["id"]
    assert [c["body"] for c in state.issue("TCID-1").comments] == ["Assigned to alice"]


@pytest.mark.parametrize("key,body,status", [
    ("TCID-9", {"body": "x", "public": False}, 404),
    ("TCID-1", {"body": "", "public": False}, 400),
    ("TCID-1", {"body": "x", "public": "no"}, 400),
])
def test_service_desk_comment_errors(client, key, body, status):
    result = client.simulate_post(f"{DESK}/request/{key}/comment", headers=JIRA_AUTH, json=body)

    assert_jira_error(result, status)


# --- Lark -------------------------------------------------------------------------------------


def test_lark_token_answer_is_flat(client):
    result = client.simulate_post(f"{LARK}/auth/v3/tenant_access_token/internal",
                                  json={"app_id": "cli_x", "app_secret": "s3cret"})

    assert result.status_code == 200
    assert result.json["code"] == 0 and result.json["expire"] == 7200
    assert result.json["tenant_access_token"].startswith("t-")
    assert "data" not in result.json


@pytest.mark.parametrize("body", [{"app_id": "cli_x"}, {"app_id": "", "app_secret": "s"}, [1]])
def test_lark_token_needs_app_id_and_secret(client, body):
    result = client.simulate_post(f"{LARK}/auth/v3/tenant_access_token/internal", json=body)

    assert result.status_code == 400 and result.json["code"] != 0


@pytest.mark.parametrize("headers,code", [
    ({}, 99991661), ({"Authorization": "Bearer t-not-issued"}, 99991663),
])
def test_lark_calls_need_a_token_it_issued(client, headers, code):
    result = send_card(client, headers)

    assert result.status_code == 400
    assert result.json["code"] == code


def test_lark_token_expires_after_two_hours(client, clock):
    auth = lark_token(client)
    clock.advance(7199)
    assert send_card(client, auth, uuid="a").json["code"] == 0

    clock.advance(1)

    assert send_card(client, auth, uuid="b").json["code"] == 99991663


def test_lark_revoked_tokens_are_refused(client):
    auth = lark_token(client)

    revoked = client.simulate_delete(f"{CONTROL}/lark/tokens")

    assert revoked.json == {"revoked": 1}
    assert send_card(client, auth).json["code"] == 99991663


def test_lark_batch_get_id_maps_known_emails_only(client):
    result = client.simulate_post(
        f"{LARK}/contact/v3/users/batch_get_id", params={"user_id_type": "open_id"},
        json={"emails": ["Alice@Example.com", "ivan@example.com", "who@example.com"]},
        headers=lark_token(client))

    assert result.json == {"code": 0, "msg": "ok", "data": {"user_list": [
        {"email": "Alice@Example.com", "user_id": "ou_alice"},
        {"email": "ivan@example.com"},
        {"email": "who@example.com"},
    ]}}


def test_lark_batch_get_id_refuses_bad_input(client):
    auth = lark_token(client)
    url = f"{LARK}/contact/v3/users/batch_get_id"

    no_type = client.simulate_post(url, json={"emails": []}, headers=auth)
    bad_emails = client.simulate_post(url, params={"user_id_type": "open_id"},
                                      json={"emails": "a@b"}, headers=auth)

    assert no_type.status_code == 400 and no_type.json["code"] != 0
    assert bad_emails.status_code == 400 and bad_emails.json["code"] != 0


def test_lark_send_answers_a_message_id_and_records_the_card(client, state):
    result = send_card(client, lark_token(client))

    assert result.json["code"] == 0
    message_id = result.json["data"]["message_id"]
    [message] = state.messages()
    assert (message.message_id, message.receive_id, message.msg_type) == \
        (message_id, "ou_alice", "interactive")


def test_lark_same_uuid_is_one_message(client, state):
    auth = lark_token(client)

    first = send_card(client, auth, uuid="exec-7-action-2")
    again = send_card(client, auth, uuid="exec-7-action-2")
    other = send_card(client, auth, uuid="exec-7-action-3")

    assert first.json["data"]["message_id"] == again.json["data"]["message_id"]
    assert other.json["data"]["message_id"] != first.json["data"]["message_id"]
    assert len(state.messages()) == 2


def test_lark_same_uuid_from_many_threads_is_one_message(state):
    ids = []

    def send():
        ids.append(state.send_message("ou_alice", "interactive", "{}", "same")[0])

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(set(ids)) == 1 and len(state.messages()) == 1


@pytest.mark.parametrize("change", [
    {"receive_id": "ou_nobody"}, {"content": "not json"}, {"msg_type": "video"},
    {"uuid": "x" * 51},
])
def test_lark_send_refuses_bad_cards(client, state, change):
    body = {"receive_id": "ou_alice", "msg_type": "interactive", "content": "{}", **change}

    result = client.simulate_post(f"{LARK}/im/v1/messages", json=body,
                                  params={"receive_id_type": "open_id"},
                                  headers=lark_token(client))

    assert result.status_code == 400 and result.json["code"] != 0
    assert state.messages() == []


def test_lark_urgent_reports_invalid_user_ids(client, state):
    auth = lark_token(client)
    message_id = send_card(client, auth).json["data"]["message_id"]

    result = client.simulate_patch(f"{LARK}/im/v1/messages/{message_id}/urgent_app",
                                   params={"user_id_type": "open_id"},
                                   json={"user_id_list": ["ou_alice", "ou_ghost"]}, headers=auth)

    assert result.json == {"code": 0, "msg": "ok",
                           "data": {"invalid_user_id_list": ["ou_ghost"]}}
    [urgent] = state.urgents()
    assert urgent.user_ids == ("ou_alice", "ou_ghost")


def test_lark_urgent_on_unknown_message_fails(client):
    result = client.simulate_patch(f"{LARK}/im/v1/messages/om_nope/urgent_app",
                                   params={"user_id_type": "open_id"},
                                   json={"user_id_list": ["ou_alice"]}, headers=lark_token(client))

    assert result.status_code == 400 and result.json["code"] != 0


def test_lark_read_users_paginate_by_page_size(client, state, clock):
    auth = lark_token(client)
    message_id = send_card(client, auth).json["data"]["message_id"]
    for open_id in ("ou_alice", "ou_bob", "ou_dora"):
        clock.advance(1)
        state.mark_read(message_id, open_id)
    url = f"{LARK}/im/v1/messages/{message_id}/read_users"

    first = client.simulate_get(url, params={"user_id_type": "open_id", "page_size": "2"},
                                headers=auth).json["data"]
    second = client.simulate_get(url, headers=auth, params={
        "user_id_type": "open_id", "page_size": "2", "page_token": first["page_token"]},
    ).json["data"]

    assert [item["user_id"] for item in first["items"]] == ["ou_alice", "ou_bob"]
    assert first["has_more"] is True
    assert second == {"items": [{"user_id_type": "open_id", "user_id": "ou_dora",
                                 "timestamp": str(int(clock.now().timestamp() * 1000))}],
                      "has_more": False, "page_token": ""}


@pytest.mark.parametrize("params", [{"page_size": "0"}, {"page_size": "101"},
                                    {"page_token": "abc"}, {"user_id_type": "union_id"}])
def test_lark_read_users_refuses_bad_paging(client, state, params):
    auth = lark_token(client)
    message_id = send_card(client, auth).json["data"]["message_id"]

    result = client.simulate_get(f"{LARK}/im/v1/messages/{message_id}/read_users",
                                 params={"user_id_type": "open_id", **params}, headers=auth)

    assert result.status_code == 400 and result.json["code"] != 0


# --- Oncall -----------------------------------------------------------------------------------


def test_oncall_responders_primary_first(client):
    result = client.simulate_get(f"{ONCALL}/teams/sre/responders", headers=BEARER)

    assert result.json == {"responders": [{"email": "bob@example.com", "name": "Bob Li"},
                                          {"email": "alice@example.com", "name": "Alice Wang"}]}


def test_oncall_unknown_team_is_404(client):
    result = client.simulate_get(f"{ONCALL}/teams/nope/responders", headers=BEARER)

    assert result.status_code == 404 and "error" in result.json


def page(client, email: str, dedup_key: str = "exec-1-page-1"):
    return client.simulate_post(f"{ONCALL}/page", headers=BEARER, json={
        "email": email, "title": "P1 TCID-1", "message": "please look", "issue_key": "TCID-1",
        "dedup_key": dedup_key})


def test_oncall_page_is_accepted_for_someone_with_a_phone(client, state):
    result = page(client, "alice@example.com")

    assert result.json["accepted"] is True and result.json["call_error"] == ""
    assert result.json["call_id"]
    [recorded] = state.pages()
    assert (recorded.email, recorded.issue_key, recorded.accepted) == \
        ("alice@example.com", "TCID-1", True)


def test_oncall_page_without_a_phone_is_not_accepted(client):
    result = page(client, "bob@example.com")

    assert result.json == {"accepted": False, "call_error": "no_phone_number"}


def test_oncall_repeated_dedup_key_keeps_its_call_and_is_recorded(client, state):
    first = page(client, "alice@example.com").json
    again = page(client, "alice@example.com").json

    assert first["call_id"] == again["call_id"]
    assert [p.repeated for p in state.pages()] == [False, True]


def test_oncall_page_refuses_a_bad_body(client, state):
    result = client.simulate_post(f"{ONCALL}/page", headers=BEARER,
                                  json={"email": "alice@example.com"})

    assert result.status_code == 400 and "error" in result.json
    assert state.pages() == []


@pytest.mark.parametrize("method,path", [("GET", f"{ONCALL}/teams/sre/responders"),
                                         ("POST", f"{ONCALL}/page"),
                                         ("GET", f"{CORE}/groups/l1/members"),
                                         ("GET", f"{CORE}/users/alice@example.com")])
def test_internal_services_need_a_bearer_token(client, method, path):
    result = client.simulate_request(method, path, json={},
                                     headers={"Authorization": "Basic abc"})

    assert result.status_code == 401 and "error" in result.json


# --- Core -------------------------------------------------------------------------------------


def test_core_group_members_carry_active(client):
    result = client.simulate_get(f"{CORE}/groups/l1/members", headers=BEARER)

    assert result.json == {"members": [{"email": "alice@example.com", "active": True},
                                       {"email": "bob@example.com", "active": True},
                                       {"email": "ivan@example.com", "active": False}]}


def test_core_user_by_email_with_open_id_when_on_lark(client):
    alice = client.simulate_get(f"{CORE}/users/Alice@example.com", headers=BEARER)
    ivan = client.simulate_get(f"{CORE}/users/ivan@example.com", headers=BEARER)

    assert alice.json == {"email": "alice@example.com", "name": "Alice Wang", "active": True,
                          "open_id": "ou_alice"}
    assert ivan.json == {"email": "ivan@example.com", "name": "Ivan Old", "active": False}


def test_core_leader_is_the_direct_leader(client):
    result = client.simulate_get(f"{CORE}/users/alice@example.com/leader", headers=BEARER)

    assert result.json["email"] == "dora@example.com"


@pytest.mark.parametrize("path", ["/groups/none/members", "/users/who@example.com",
                                  "/users/dora@example.com/leader",
                                  "/users/who@example.com/leader"])
def test_core_unknown_things_are_404(client, path):
    result = client.simulate_get(f"{CORE}{path}", headers=BEARER)

    assert result.status_code == 404 and "error" in result.json


def test_the_sandbox_cannot_hold_a_phone_number(client, state):
    result = client.simulate_post(f"{CONTROL}/users", json={
        "email": "zed@example.com", "phone": "+86 138 0000 0000"})

    assert_project_error(result, 400)
    assert state.user("zed@example.com") is None
    with pytest.raises(TypeError):
        state.put_user("zed@example.com", phone="+86 138 0000 0000")


# --- faults -----------------------------------------------------------------------------------


def add_fault(client, **body):
    result = client.simulate_post(f"{CONTROL}/faults", json=body)
    assert result.status_code == 201, result.text
    return result.json


def test_fault_429_with_retry_after_hits_once_then_success(client):
    add_fault(client, service="jira", path_contains="/issue/TCID-1", status=429, retry_after=2)

    limited = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)
    retried = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)

    assert assert_jira_error(limited, 429) and limited.headers["Retry-After"] == "2"
    assert retried.status_code == 200


def test_fault_500_answers_in_the_service_shape_only_on_matching_paths(client):
    auth = lark_token(client)
    add_fault(client, service="lark", path_contains="/read_users", status=500, times=2)

    sent = send_card(client, auth)
    url = f"{LARK}/im/v1/messages/{sent.json['data']['message_id']}/read_users"
    failed = client.simulate_get(url, params={"user_id_type": "open_id"}, headers=auth)

    assert sent.status_code == 200
    assert failed.status_code == 500 and failed.json["code"] != 0
    assert "Retry-After" not in failed.headers
    assert client.simulate_get(f"{CONTROL}/faults").json["items"][0]["times"] == 1


def test_fault_on_lark_429_uses_the_rate_limit_code(client):
    add_fault(client, service="lark", status=429, retry_after=1)

    result = client.simulate_post(f"{LARK}/auth/v3/tenant_access_token/internal",
                                  json={"app_id": "a", "app_secret": "b"})

    assert result.status_code == 429 and result.json["code"] == 99991400


def test_fault_on_internal_services_uses_their_error_shape(client):
    add_fault(client, service="oncall", status=503, retry_after=5)

    result = page(client, "alice@example.com")

    assert result.status_code == 503 and "error" in result.json
    assert result.headers["Retry-After"] == "5"


def test_fault_latency_sleeps_then_answers(client, sleeps):
    add_fault(client, service="core", latency_ms=1)

    result = client.simulate_get(f"{CORE}/users/alice@example.com", headers=BEARER)

    assert result.status_code == 200
    assert sleeps == [0.001]


def test_faults_are_listed_and_cleared(client):
    add_fault(client, service="jira", status=500, times=3)
    add_fault(client, service="core", latency_ms=5)

    listed = client.simulate_get(f"{CONTROL}/faults").json
    cleared = client.simulate_delete(f"{CONTROL}/faults").json

    assert listed["total"] == 2 and cleared == {"cleared": 2}
    assert client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH).status_code == 200


@pytest.mark.parametrize("body", [
    {"service": "github", "status": 500}, {"service": "jira"}, {"service": "jira", "status": 200},
    {"service": "jira", "status": 500, "times": 0}, {"service": "jira", "latency_ms": -1},
    {"service": "jira", "status": "500"}, {"status": 500},
])
def test_bad_fault_is_400_in_the_project_shape(client, body):
    result = client.simulate_post(f"{CONTROL}/faults", json=body)

    assert_project_error(result, 400)


def test_requests_are_logged_with_the_fault_they_hit(client):
    add_fault(client, service="jira", status=429)
    client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)
    client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)

    logged = client.simulate_get(f"{CONTROL}/requests").json["items"]

    assert [(r["service"], r["path"], r["fault"]) for r in logged] == [
        ("jira", f"{JIRA}/issue/TCID-1", 429), ("jira", f"{JIRA}/issue/TCID-1", None)]


# --- control API ------------------------------------------------------------------------------


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


def test_control_adds_users_generating_an_account_id(client, state):
    created = client.simulate_post(f"{CONTROL}/users", json={
        "email": "New@Example.com", "display_name": "New Person", "open_id": "ou_new",
        "has_phone": True, "leader_email": "dora@example.com"})
    replaced = client.simulate_post(f"{CONTROL}/users", json={"email": "new@example.com",
                                                              "active": False})

    assert created.status_code == 201
    assert created.json["email"] == "new@example.com" and created.json["account_id"]
    assert replaced.status_code == 200
    assert replaced.json["account_id"] == created.json["account_id"]  # kept on replace
    assert state.user("new@example.com").active is False


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


def test_control_marks_a_card_read_once(client, state):
    message_id = send_card(client, lark_token(client)).json["data"]["message_id"]
    url = f"{CONTROL}/lark/messages/{message_id}/reads"

    first = client.simulate_post(url, json={"email": "alice@example.com"})
    again = client.simulate_post(url, json={"open_id": "ou_alice", "timestamp_ms": 5})

    assert first.json == {"message_id": message_id, "open_id": "ou_alice", "newly_read": True}
    assert again.json["newly_read"] is False
    assert state.read_users(message_id, 0, 10)[1] == 1


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


# --- mounted on the real app ------------------------------------------------------------------


def test_sandbox_is_public_under_the_api_key_middleware(sqlite_store, state):
    config = load_config(None, environ={
        "TICKET_DISPATCHER_AUTH_API_KEYS": "op:operator:op-key-0123456789abcdefghij"})
    app = create_app(Services(store=sqlite_store, config=config, clock=ManualClock()))
    mount_sandbox(app, state)
    client = testing.TestClient(app)

    control = client.simulate_get(f"{CONTROL}/issues")
    jira = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)
    api = client.simulate_get("/api/v1/ticketmanager/engineers")

    assert control.status_code == 200 and jira.status_code == 200
    assert api.status_code == 401


def test_service_urls_point_the_clients_at_the_mount():
    assert service_urls("http://127.0.0.1:8080/") == {
        "jira": "http://127.0.0.1:8080/sandbox/jira",
        "lark": "http://127.0.0.1:8080/sandbox/lark",
        "oncall": "http://127.0.0.1:8080/sandbox/oncall",
        "core": "http://127.0.0.1:8080/sandbox/core",
    }


# --- ops/examples -----------------------------------------------------------------------------


def test_example_world_is_consistent_with_the_assign_policy():
    policy = json.loads((EXAMPLES / "policies" / "assign-tcid.json").read_text())
    engineers = json.loads((EXAMPLES / "engineers.json").read_text())["engineers"]
    enabled = {e["email"] for e in engineers if e["dispatch_enabled"]}
    state = SandboxState()

    summary = load_examples(state, EXAMPLES)

    receivers = [a["assign"]["receiver"] for r in policy["rules"] for a in r["then"]]
    [users] = [r["users"] for r in receivers if r["type"] == "users"]
    [team] = [r["oncall_team"] for r in receivers if r["type"] == "oncall_team"]
    responders = [u.email for u in state.team_responders(team)]
    assert set(users) <= enabled and all(state.user(email) for email in users)
    assert responders and set(responders) <= enabled
    assert all(state.user(e["email"]) for e in engineers)
    tcid = [state.issue(key) for key in ("TCID-1", "TCID-2", "TCID-3")]
    assert all(i.assignee is None and "auto-dispatch" in i.labels for i in tcid)
    assert {"P1", "P3"} <= {i.priority for i in tcid}
    assert any(key.startswith("GTOC-") for key in state.issue_keys())
    assert summary.groups >= 1 and any(state.group_members(g) for g in state.groups())
    leader = state.leader(users[0])
    assert leader is not None and state.leader(leader.email) is not None


def test_load_examples_names_the_file_and_path_of_a_bad_entry(tmp_path):
    (tmp_path / "sandbox.json").write_text(json.dumps(
        {"users": [{"email": "a@example.com"}, {"display_name": "no email"}]}))

    with pytest.raises(InvalidInput) as caught:
        load_examples(SandboxState(), tmp_path)

    assert "sandbox.json" in caught.value.message
    assert [p.path for p in caught.value.problems] == ["users[1].email"]


def test_load_examples_refuses_a_leader_the_file_does_not_define(tmp_path):
    (tmp_path / "sandbox.json").write_text(json.dumps(
        {"users": [{"email": "a@example.com", "leader_email": "boss@example.com"}]}))

    with pytest.raises(InvalidInput) as caught:
        load_examples(SandboxState(), tmp_path)

    assert [p.path for p in caught.value.problems] == ["users[0].leader_email"]


def test_seed_store_fills_an_empty_database(sqlite_store, clock):
    summary = seed_store(sqlite_store, EXAMPLES, clock.now())

    engineers, total = sqlite_store.engineers.list(limit=200)
    [policy] = sqlite_store.policies.list_active()
    expected = json.loads((EXAMPLES / "engineers.json").read_text())["engineers"]
    assert summary.seeded and summary.engineers == total == len(expected)
    assert {e.email for e in engineers} == {e["email"] for e in expected}
    assert summary.policy_ids == (policy.id,)
    assert policy.name == "Assign TCID tickets" and policy.status == PolicyStatus.ACTIVE


def test_second_seed_store_does_nothing(sqlite_store, clock):
    seed_store(sqlite_store, EXAMPLES, clock.now())

    again = seed_store(sqlite_store, EXAMPLES, clock.now())

    assert again.seeded is False
    assert sqlite_store.policies.list()[1] == 1


def test_seed_store_leaves_a_database_with_engineers_alone(sqlite_store, clock):
    sqlite_store.engineers.put("someone@example.com", dispatch_enabled=True, now=clock.now())

    summary = seed_store(sqlite_store, EXAMPLES, clock.now())

    assert summary.seeded is False
    assert sqlite_store.policies.list()[1] == 0
    assert sqlite_store.engineers.list()[1] == 1


def test_seed_store_writes_nothing_when_a_file_is_bad(sqlite_store, clock, tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "engineers.json").write_text(json.dumps({"engineers": []}))
    (tmp_path / "policies" / "assign-tcid.json").write_text("{broken")

    with pytest.raises(InvalidInput):
        seed_store(sqlite_store, tmp_path, clock.now())

    assert sqlite_store.engineers.list()[1] == 0


# --- the real clients against the served sandbox (both sides of SPEC §11) ----------------------


@pytest.fixture
def served(state):
    """The sandbox on a real local port, for the requests-based clients."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = make_server("127.0.0.1", 0, sandbox_app(state), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield service_urls(f"http://127.0.0.1:{server.server_port}")
    server.shutdown()
    server.server_close()


def test_the_real_clients_speak_the_sandbox(served, state):
    from ticket_dispatcher.config import CoreConfig, JiraConfig, LarkConfig, OncallConfig
    from ticket_dispatcher.integrations.core import CoreClient
    from ticket_dispatcher.integrations.jira import JiraClient
    from ticket_dispatcher.integrations.lark import LarkClient
    from ticket_dispatcher.integrations.oncall import OncallClient

    no_wait = {"sleep": lambda seconds: None}
    jira = JiraClient(JiraConfig(base_url=served["jira"], email="bot@example.com",
                                 api_token="token"), **no_wait)
    lark = LarkClient(LarkConfig(base_url=served["lark"], app_id="cli", app_secret="secret"),
                      **no_wait)
    oncall = OncallClient(OncallConfig(base_url=served["oncall"], token="t"), **no_wait)
    core = CoreClient(CoreConfig(base_url=served["core"], token="t"), **no_wait)
    state.add_fault("jira", status=429, retry_after=0)

    alice = jira.find_user_by_email("ALICE@example.com")
    jira.assign("TCID-1", alice.account_id)
    jira.edit_labels("TCID-1", remove=["auto-dispatch"])
    issue = jira.load_issue("TCID-1")
    open_id = lark.open_ids_by_email(["alice@example.com"])["alice@example.com"]
    message_id = lark.send_card(open_id, {"elements": []}, "exec-1-card")
    state.mark_read(message_id, open_id)
    state.revoke_tokens()  # the client must refresh on code 99991663

    assert (issue.assignee.email, issue.labels) == ("alice@example.com", ())
    assert lark.send_card(open_id, {"elements": []}, "exec-1-card") == message_id
    assert lark.read_user_ids(message_id) == ["ou_alice"]
    assert [r.email for r in oncall.responders("sre")] == ["bob@example.com", "alice@example.com"]
    assert oncall.page("bob@example.com", "t", "m", "TCID-1", "d").call_error == "no_phone_number"
    assert core.leader("alice@example.com").email == "dora@example.com"
    assert [r["fault"] for r in state.requests()][:2] == [429, None]  # retried after the 429
    for client in (jira, lark, oncall, core):
        client.close()
