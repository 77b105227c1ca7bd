"""The fake Jira: the issue shape, assign, edit, user search, comments, Basic auth."""

from __future__ import annotations

import base64

import pytest
from falcon import testing

from tests.sandbox.calls import (
    BEARER,
    CREATED,
    DESK,
    JIRA,
    JIRA_AUTH,
    assert_jira_error,
    sandbox_app,
)
from ticket_dispatcher.domain.issues import issue_from_jira


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


def test_jira_field_ids_are_configurable_on_the_state(sandbox):
    sandbox.jira.l2_field_id, sandbox.jira.severity_field_id = "customfield_1", "customfield_2"
    sandbox.jira.update_issue("TCID-1", {"l2_assignee": "acc-bob"}, via="test")
    client = testing.TestClient(sandbox_app(sandbox))

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


def test_jira_assign_sets_and_clears_the_assignee(client, sandbox):
    assigned = client.simulate_put(f"{JIRA}/issue/TCID-1/assignee",
                                   json={"accountId": "acc-alice"}, headers=JIRA_AUTH)
    assignee = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH) \
        .json["fields"]["assignee"]
    cleared = client.simulate_put(f"{JIRA}/issue/TCID-1/assignee", json={"accountId": None},
                                  headers=JIRA_AUTH)

    assert assigned.status_code == 204 and cleared.status_code == 204
    assert assignee["emailAddress"] == "alice@example.com"
    assert sandbox.jira.issue("TCID-1").assignee is None
    assert [(h["from"], h["to"]) for h in sandbox.jira.issue("TCID-1").history] == \
        [(None, "acc-alice"), ("acc-alice", None)]


@pytest.mark.parametrize("body", [{"accountId": "acc-nobody"}, {"accountId": "acc-ivan"},
                                  {"accountId": 5}, {}])
def test_jira_assign_refuses_unknown_inactive_or_missing_accounts(client, sandbox, body):
    result = client.simulate_put(f"{JIRA}/issue/TCID-1/assignee", json=body, headers=JIRA_AUTH)

    assert "accountId" in assert_jira_error(result, 400)["errors"] or \
        "assignee" in result.json["errors"]
    assert sandbox.jira.issue("TCID-1").assignee is None


def test_jira_assign_unknown_issue_is_404(client):
    result = client.simulate_put(f"{JIRA}/issue/NOPE-1/assignee", json={"accountId": "acc-bob"},
                                 headers=JIRA_AUTH)

    assert_jira_error(result, 404)


def test_jira_edit_sets_l2_priority_components_severity_and_raw_fields(client, sandbox):
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


def test_jira_label_updates_add_and_remove_and_are_remembered(client, sandbox):
    result = client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH, json={
        "update": {"labels": [{"remove": "auto-dispatch"}, {"add": "notify-assignee"},
                              {"add": "notify-assignee"}, {"remove": "absent"}]}})

    assert result.status_code == 204
    issue = sandbox.jira.issue("TCID-1")
    assert issue.labels == ["notify-assignee"]
    assert [(h["action"], h["label"], h["via"]) for h in issue.label_history] == \
        [("remove", "auto-dispatch", "jira"), ("add", "notify-assignee", "jira")]


def test_jira_labels_field_replaces_the_labels(client, sandbox):
    client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH,
                        json={"fields": {"labels": ["a", "auto-dispatch"]}})

    assert sandbox.jira.issue("TCID-1").labels == ["auto-dispatch", "a"]


@pytest.mark.parametrize("body,field", [
    ({"fields": {"status": {"name": "Done"}}}, "status"),
    ({"fields": {"priority": "P1"}}, "priority"),
    ({"fields": {"customfield_10053": {"accountId": "acc-nobody"}}}, "customfield_10053"),
    ({"fields": {"components": ["API"]}}, "components"),
    ({"update": {"labels": [{"set": ["x"]}]}}, "labels"),
    ({"update": {"components": [{"add": {"name": "x"}}]}}, "components"),
])
def test_jira_edit_refuses_bad_fields_with_jira_errors(client, sandbox, body, field):
    result = client.simulate_put(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH, json=body)

    assert field in assert_jira_error(result, 400)["errors"]
    assert sandbox.jira.issue("TCID-1").history == []


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


def test_service_desk_comment_is_201_and_stored_on_the_issue(client, sandbox):
    result = client.simulate_post(f"{DESK}/request/TCID-1/comment", headers=JIRA_AUTH,
                                  json={"body": "Assigned to alice", "public": False})

    assert result.status_code == 201
    assert result.json["body"] == "Assigned to alice" and result.json["public"] is False
    assert result.json["id"]
    assert [c["body"] for c in sandbox.jira.issue("TCID-1").comments] == ["Assigned to alice"]


@pytest.mark.parametrize("key,body,status", [
    ("TCID-9", {"body": "x", "public": False}, 404),
    ("TCID-1", {"body": "", "public": False}, 400),
    ("TCID-1", {"body": "x", "public": "no"}, 400),
])
def test_service_desk_comment_errors(client, key, body, status):
    result = client.simulate_post(f"{DESK}/request/{key}/comment", headers=JIRA_AUTH, json=body)

    assert_jira_error(result, status)
