"""Issue snapshots from Jira REST v2 JSON and from their own JSON."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from ticket_dispatcher.domain.issues import issue_from_any, issue_from_jira, issue_from_snapshot
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.errors import InvalidInput


def jira_user(account_id: str, email: str | None = None, active: bool = True) -> dict:
    user = {"accountId": account_id, "accountType": "atlassian",
            "displayName": account_id.title(), "active": active}
    if email is not None:
        user["emailAddress"] = email
    return user


def jira_issue(**fields) -> dict:
    body = {
        "key": "TCOC-12345",
        "fields": {
            "summary": "Checkout fails",
            "project": {"key": "TCOC"},
            "environment": None,
            "reporter": jira_user("acc-reporter", "Reporter@Example.com"),
            "assignee": jira_user("acc-a", "Alice@Example.com"),
            "created": "2021-01-17T12:34:00.000+0000",
            "components": [{"name": "Payments"}, {"name": "API"}, {"name": "Billing"}],
            "labels": ["notify-assignee"],
            "priority": {"name": "P1"},
            "status": {"name": "Todo"},
            "customfield_10053": jira_user("acc-l2", "L2.Person@Example.com"),
            "customfield_10076": {"value": "S1 - Service Unavailable"},
        },
    }
    body["fields"].update(fields)
    return body


def test_jira_issue_is_parsed_into_the_snapshot():
    issue = issue_from_jira(jira_issue())
    assert issue == Issue(
        key="TCOC-12345",
        project_key="TCOC",
        summary="Checkout fails",
        environment=None,
        reporter=JiraUser("acc-reporter", "reporter@example.com", "Acc-Reporter"),
        assignee=JiraUser("acc-a", "alice@example.com", "Acc-A"),
        l2_assignee=JiraUser("acc-l2", "l2.person@example.com", "Acc-L2"),
        created_at=datetime(2021, 1, 17, 12, 34, tzinfo=UTC),
        components=("Payments", "API", "Billing"),
        labels=("notify-assignee",),
        priority="P1",
        status="Todo",
        severity="S1 - Service Unavailable",
    )


def test_the_newest_status_change_of_the_changelog_times_the_issues_status():
    raw = {**jira_issue(), "changelog": {"histories": [
        {"created": "2026-12-01T10:00:00.000+0000", "items": [{"field": "status"}]},
        {"created": "2026-12-01T12:00:00.000+0000", "items": [{"field": "assignee"}]},
        {"created": "2026-12-01T11:00:00.000+0100", "items": [{"field": "status"}]},
        {"created": "not a time", "items": [{"field": "status"}]}]}}

    assert issue_from_jira(raw).status_changed_at == datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert issue_from_jira(jira_issue()).status_changed_at is None


def test_jira_offset_without_colon_is_an_aware_time():
    issue = issue_from_jira(jira_issue(created="2021-01-17T20:34:00.000+0800"))
    assert issue.created_at.utcoffset() == timedelta(hours=8)
    assert issue.created_at == datetime(2021, 1, 17, 12, 34, tzinfo=UTC)


def test_l2_picker_and_severity_come_from_the_configured_field_ids():
    body = jira_issue(customfield_1={"accountId": "acc-x", "displayName": "X", "active": False},
                      customfield_2={"value": "S2"})
    issue = issue_from_jira(body, l2_field_id="customfield_1", severity_field_id="customfield_2")
    assert issue.l2_assignee == JiraUser("acc-x", "", "X", active=False)
    assert issue.severity == "S2"


def test_null_users_and_options_are_none():
    issue = issue_from_jira(jira_issue(reporter=None, assignee=None, customfield_10053=None,
                                       customfield_10076=None, priority=None, status=None))
    assert (issue.reporter, issue.assignee, issue.l2_assignee) == (None, None, None)
    assert (issue.priority, issue.status, issue.severity) == (None, None, None)


def test_absent_optional_fields_read_as_empty():
    body = {"key": "ST-1", "fields": {"project": {"key": "ST"}}}
    issue = issue_from_jira(body)
    assert issue == Issue(key="ST-1", project_key="ST")


def test_hidden_email_is_empty():
    issue = issue_from_jira(jira_issue(assignee=jira_user("acc-a")))
    assert issue.assignee.email == ""


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda b: b.pop("fields"), "fields"),
        (lambda b: b.update(key=""), "key"),
        (lambda b: b["fields"].pop("project"), "fields.project"),
        (lambda b: b["fields"].update(project={"id": "1"}), "fields.project.key"),
        (lambda b: b["fields"].update(created="yesterday"), "fields.created"),
        (lambda b: b["fields"].update(created="2021-01-17T12:34:00.000"), "fields.created"),
        (lambda b: b["fields"].update(components="API"), "fields.components"),
        (lambda b: b["fields"].update(components=["API"]), "fields.components[0]"),
        (lambda b: b["fields"].update(labels=[1]), "fields.labels"),
        (lambda b: b["fields"].update(reporter="bob"), "fields.reporter"),
        (lambda b: b["fields"].update(assignee={"displayName": "A"}), "fields.assignee.accountId"),
        (lambda b: b["fields"].update(priority="P1"), "fields.priority"),
        (lambda b: b["fields"].update(customfield_10076={"value": 1}),
         "fields.customfield_10076.value"),
    ],
)
def test_malformed_jira_issue_names_the_path(change, path):
    body = jira_issue()
    change(body)
    with pytest.raises(InvalidInput) as caught:
        issue_from_jira(body)
    assert caught.value.problems[0].path == path
    assert path in caught.value.message


def test_jira_issue_must_be_an_object():
    with pytest.raises(InvalidInput):
        issue_from_jira(["TCOC-1"])


# --- snapshot -------------------------------------------------------------------------------


def full_issue() -> Issue:
    return issue_from_jira(jira_issue(environment="prod"))


def test_snapshot_round_trips_exactly():
    issue = full_issue()
    snapshot = issue.to_json()
    assert issue_from_snapshot(copy.deepcopy(snapshot)) == issue
    assert issue_from_snapshot(snapshot).to_json() == snapshot


def test_minimal_snapshot():
    issue = issue_from_snapshot({"key": "TCID-9", "project_key": "TCID"})
    assert issue == Issue(key="TCID-9", project_key="TCID")
    assert issue_from_snapshot(issue.to_json()) == issue


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda s: s.pop("project_key"), "project_key"),
        (lambda s: s.update(created_at="2026-01-01"), "created_at"),
        (lambda s: s.update(labels="a"), "labels"),
        (lambda s: s.update(assignee="alice"), "assignee"),
        (lambda s: s.update(custom_fields=[]), "custom_fields"),
        (lambda s: s.update(custom_fields={"severity": 1}), "custom_fields.severity"),
    ],
)
def test_malformed_snapshot_names_the_path(change, path):
    snapshot = full_issue().to_json()
    change(snapshot)
    with pytest.raises(InvalidInput) as caught:
        issue_from_snapshot(snapshot)
    assert caught.value.problems[0].path == path


def test_issue_from_any_tells_jira_from_snapshot():
    issue = full_issue()
    assert issue_from_any(jira_issue(environment="prod")) == issue
    assert issue_from_any(issue.to_json()) == issue
    custom = jira_issue(customfield_9={"value": "S3"})
    assert issue_from_any(custom, severity_field_id="customfield_9").severity == "S3"
