"""The Jira client: exactly the calls the service needs, parsed into the issue snapshot."""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from responses import matchers

from tests.clocks import ManualClock
from ticket_dispatcher.config import JiraConfig
from ticket_dispatcher.domain.ports import TriageChange
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.http import IntegrationTimeout
from ticket_dispatcher.integrations.jira import JiraClient

BASE = "https://example.atlassian.net"
API_TOKEN = "ATATT-very-secret-api-token"
CONFIG = JiraConfig(base_url=BASE, email="bot@example.com", api_token=API_TOKEN,
                    l2_field_id="customfield_20001", severity_field_id="customfield_20002")
BASIC = "Basic " + base64.b64encode(f"bot@example.com:{API_TOKEN}".encode()).decode()


@pytest.fixture
def jira():
    client = JiraClient(CONFIG, connect_timeout=1, read_timeout=2, sleep=lambda _: None)
    yield client
    client.close()


def jira_user(account_id: str, email: str | None, active: bool = True) -> dict:
    user = {"accountId": account_id, "accountType": "atlassian", "displayName": account_id,
            "active": active}
    if email is not None:
        user["emailAddress"] = email
    return user


def raw_issue() -> dict:
    return {"key": "TCOC-7", "fields": {
        "summary": "Checkout fails", "project": {"key": "TCOC"}, "environment": None,
        "reporter": jira_user("r-1", "Reporter@Example.com"),
        "assignee": jira_user("a-1", "alice@example.com"),
        "created": "2021-01-17T12:34:00.000+0000",
        "components": [{"name": "payments"}, {"name": "web"}], "labels": ["notify-assignee"],
        "priority": {"name": "P1"}, "status": {"name": "Todo"},
        "customfield_20001": jira_user("l2-1", "bob@example.com"),
        "customfield_20002": {"value": "S2 - Significant Impact"},
    }}


def test_load_issue_asks_for_every_snapshot_field_and_both_custom_fields(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-7", json=raw_issue(),
               match=[matchers.header_matcher({"Authorization": BASIC})])

    jira.load_issue("TCOC-7")

    query = parse_qs(urlsplit(mocked.calls[0].request.url).query)
    assert query["fields"][0].split(",") == [
        "summary", "project", "environment", "reporter", "assignee", "created", "components",
        "labels", "priority", "status", "customfield_20001", "customfield_20002"]


def test_an_issue_and_a_search_come_with_the_changelog_that_times_a_status_change(mocked,
                                                                                   jira):
    changelog = {"histories": [{"created": "2026-12-01T10:00:00.000+0000",
                                "items": [{"field": "status", "toString": "In Progress"}]}]}
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-7", json={**raw_issue(), "changelog": changelog})
    mocked.post(f"{BASE}/rest/api/2/search/jql", json={
        "issues": [{**raw_issue(), "changelog": changelog}], "isLast": True})

    read = jira.load_issue("TCOC-7")
    [searched] = jira.load_issues(["TCOC-7"]).values()

    query = parse_qs(urlsplit(mocked.calls[0].request.url).query)
    assert query["expand"] == ["changelog"]
    assert json.loads(mocked.calls[1].request.body)["expand"] == "changelog"
    changed = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert read.status_changed_at == searched.status_changed_at == changed


def test_a_search_answered_in_pages_is_read_to_its_last_page(mocked, jira):
    # Jira may answer fewer issues a page than asked when many fields are asked for
    pages = {None: {"issues": [raw_issue()], "nextPageToken": "page-2", "isLast": False},
             "page-2": {"issues": [{**raw_issue(), "key": "TCOC-8"}], "isLast": True}}
    asked = []

    def search(request):
        body = json.loads(request.body)
        asked.append(body.get("nextPageToken"))
        return 200, {}, json.dumps(pages[body.get("nextPageToken")])

    mocked.add_callback("POST", f"{BASE}/rest/api/2/search/jql", callback=search)

    found = jira.load_issues(["TCOC-7", "TCOC-8", "TCOC-9"])

    assert sorted(found) == ["TCOC-7", "TCOC-8"]
    assert asked == [None, "page-2"]


def test_a_search_refused_for_a_deleted_issue_is_made_again_without_it(mocked, jira):
    # Jira refuses a whole JQL that names an issue that no longer exists
    asked = []

    def search(request):
        body = json.loads(request.body)
        asked.append(body["jql"])
        if "TCOC-9" in body["jql"]:
            return 400, {}, json.dumps({"errorMessages": [
                "An issue with key 'TCOC-9' does not exist for field 'key'."], "errors": {}})
        return 200, {}, json.dumps({"issues": [raw_issue()], "isLast": True})

    mocked.add_callback("POST", f"{BASE}/rest/api/2/search/jql", callback=search)

    found = jira.load_issues(["TCOC-7", "TCOC-9"])

    assert sorted(found) == ["TCOC-7"]
    assert asked == ['key in ("TCOC-7", "TCOC-9")', 'key in ("TCOC-7")']


def test_a_search_refused_for_another_reason_is_an_error(mocked, jira):
    mocked.post(f"{BASE}/rest/api/2/search/jql", status=400,
                json={"errorMessages": ["The JQL query is too complex."], "errors": {}})

    with pytest.raises(IntegrationError) as caught:
        jira.load_issues(["TCOC-7", "TCOC-9"])

    assert caught.value.status == 400 and len(mocked.calls) == 1


def test_load_issue_parses_jira_offset_time_l2_and_severity(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-7", json=raw_issue())

    issue = jira.load_issue("TCOC-7")

    assert issue.created_at == datetime(2021, 1, 17, 12, 34, tzinfo=UTC)
    assert issue.l2_assignee.account_id == "l2-1"
    assert issue.severity == "S2 - Significant Impact"
    assert issue.reporter.email == "reporter@example.com"
    assert (issue.priority, issue.status, issue.components) == ("P1", "Todo",
                                                                ("payments", "web"))


def test_load_issue_quotes_the_key_in_the_path(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/issue/A%2FB", json=raw_issue())

    jira.load_issue("A/B")

    assert urlsplit(mocked.calls[0].request.url).path == "/rest/api/2/issue/A%2FB"


def test_missing_issue_is_an_error_with_status_404(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-404", status=404, json={
        "errorMessages": ["Issue does not exist or you do not have permission to see it."],
        "errors": {}})

    with pytest.raises(IntegrationError) as caught:
        jira.load_issue("TCOC-404")

    assert (caught.value.status, caught.value.service) == (404, "jira")
    assert "Issue does not exist" in caught.value.message


def test_malformed_issue_is_an_integration_error(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-7", json={"key": "TCOC-7", "fields": {}})

    with pytest.raises(IntegrationError) as caught:
        jira.load_issue("TCOC-7")

    assert "fields.project" in caught.value.message


def test_server_error_and_timeout_are_integration_errors(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-1", status=502, body="Bad gateway")
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-2",
               body=requests.exceptions.ReadTimeout("slow"))

    with pytest.raises(IntegrationError) as server_error:
        jira.load_issue("TCOC-1")
    with pytest.raises(IntegrationTimeout):
        jira.load_issue("TCOC-2")

    assert server_error.value.status == 502


def test_assign_puts_the_account_id(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7/assignee", status=204,
               match=[matchers.json_params_matcher({"accountId": "acc-9"}),
                      matchers.header_matcher({"Authorization": BASIC})])

    jira.assign("TCOC-7", "acc-9")


def test_assign_rejected_by_jira_carries_the_field_error(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7/assignee", status=400,
               json={"errorMessages": [], "errors": {"assignee": "User cannot be assigned"}})

    with pytest.raises(IntegrationError) as caught:
        jira.assign("TCOC-7", "acc-9")

    assert "assignee: User cannot be assigned" in caught.value.message


def test_set_l2_assignee_writes_the_configured_field(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=204, match=[
        matchers.json_params_matcher({"fields": {"customfield_20001": {"accountId": "acc-9"}}})])

    jira.set_l2_assignee("TCOC-7", "acc-9")


def test_assign_and_label_sets_the_assignee_and_removes_labels_in_one_edit(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=204, match=[
        matchers.json_params_matcher({"fields": {"assignee": {"accountId": "acc-9"}},
                                      "update": {"labels": [{"remove": "auto-dispatch"}]}})])

    assert jira.assign_and_label("TCOC-7", "acc-9", ["auto-dispatch"]) is True


def test_assign_and_label_with_l2_sets_the_configured_field(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=204, match=[
        matchers.json_params_matcher({"fields": {"customfield_20001": {"accountId": "acc-9"}},
                                      "update": {"labels": [{"remove": "auto-dispatch"}]}})])

    assert jira.assign_and_label("TCOC-7", "acc-9", ["auto-dispatch"], l2=True) is True


NOT_ON_SCREEN = {"errorMessages": [], "errors": {
    "assignee": "Field 'assignee' cannot be set. It is not on the appropriate screen, or "
                "unknown."}}


def test_an_edit_screen_refusal_is_remembered_for_the_project_for_an_hour(mocked):
    clock = ManualClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    jira = JiraClient(CONFIG, connect_timeout=1, read_timeout=2, sleep=lambda _: None,
                      clock=clock)
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=400, json=NOT_ON_SCREEN)
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-8", status=400, json=NOT_ON_SCREEN)
    mocked.put(f"{BASE}/rest/api/2/issue/OTHER-1", status=204)

    assert jira.assign_and_label("TCOC-7", "acc-9", ["auto-dispatch"]) is False
    assert jira.assign_and_label("TCOC-8", "acc-9", ["auto-dispatch"]) is False  # no call
    assert jira.assign_and_label("OTHER-1", "acc-9", ["auto-dispatch"]) is True
    assert [call.request.url.rsplit("/", 1)[1] for call in mocked.calls] == [
        "TCOC-7", "OTHER-1"]
    clock.advance(hours=1)
    assert jira.assign_and_label("TCOC-8", "acc-9", ["auto-dispatch"]) is False
    assert len(mocked.calls) == 3  # asked again once the hour had passed
    jira.close()


def test_another_400_of_the_one_edit_writes_one_by_one_without_remembering_it(mocked, jira):
    """A label Jira refuses must not stop the assignment: the caller writes them apart."""
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=400, json={
        "errorMessages": [], "errors": {"labels": "The label 'auto-dispatch' is invalid."}})

    assert jira.assign_and_label("TCOC-7", "acc-9", ["auto-dispatch"]) is False
    assert not jira.refusals.refused("TCOC")


def test_a_server_error_of_the_one_edit_is_raised(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=403, json={
        "errorMessages": ["You do not have permission to edit issues in this project."]})

    with pytest.raises(IntegrationError, match="permission"):
        jira.assign_and_label("TCOC-7", "acc-9", ["auto-dispatch"])


def test_edit_labels_adds_and_removes_in_one_update(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=204, match=[
        matchers.json_params_matcher({"update": {"labels": [
            {"add": "notify-assignee"}, {"remove": "auto-dispatch"}]}})])

    jira.edit_labels("TCOC-7", add=["notify-assignee"], remove=["auto-dispatch"])


def test_edit_labels_with_nothing_to_change_makes_no_call(mocked, jira):
    jira.edit_labels("TCOC-7")

    assert len(mocked.calls) == 0


def test_apply_triage_sends_fields_and_label_operations_in_one_put(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=204, match=[
        matchers.json_params_matcher({
            "fields": {"customfield_1": {"value": "x"}, "priority": {"name": "P2"},
                       "components": [{"name": "web"}, {"name": "db"}]},
            "update": {"labels": [{"add": "triaged"}, {"remove": "new"}]}})])

    jira.apply_triage("TCOC-7", TriageChange(
        priority="P2", components=("web", "db"), labels_add=("triaged",),
        labels_remove=("new",), fields={"customfield_1": {"value": "x"}}))

    assert len(mocked.calls) == 1


def test_apply_triage_leaves_out_what_the_change_does_not_touch(mocked, jira):
    mocked.put(f"{BASE}/rest/api/2/issue/TCOC-7", status=204, match=[
        matchers.json_params_matcher({"fields": {"components": []}})])

    jira.apply_triage("TCOC-7", TriageChange(components=()))  # no components at all


def test_find_user_by_email_counts_only_an_exact_case_insensitive_match(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/user/search", json=[
        jira_user("prefix", "alice@example.com.cn"),
        jira_user("hidden", None),
        jira_user("exact", "Alice@Example.COM"),
    ], match=[matchers.query_param_matcher({"query": "alice@example.com"})])

    user = jira.find_user_by_email("ALICE@example.com")

    assert user.account_id == "exact"
    assert user.email == "alice@example.com"


def test_find_user_by_email_prefers_the_active_exact_match(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/user/search", json=[
        jira_user("old", "alice@example.com", active=False),
        jira_user("new", "alice@example.com", active=True)])

    assert jira.find_user_by_email("alice@example.com").account_id == "new"


def test_find_user_by_email_without_exact_match_is_none(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/user/search", json=[jira_user("x", "alice2@example.com")])

    assert jira.find_user_by_email("alice@example.com") is None


def test_user_search_answer_that_is_not_a_list_is_an_error(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/user/search", json={"values": []})

    with pytest.raises(IntegrationError):
        jira.find_user_by_email("alice@example.com")


def test_internal_comment_is_posted_not_public(mocked, jira):
    mocked.post(f"{BASE}/rest/servicedeskapi/request/TCOC-7/comment", status=201, json={},
                match=[matchers.json_params_matcher({"body": "[ticket-manager] hi",
                                                     "public": False})])

    jira.add_internal_comment("TCOC-7", "[ticket-manager] hi")


def test_api_token_never_reaches_errors_or_logs(mocked, jira, caplog):
    caplog.set_level(logging.DEBUG)
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-1", status=401,
               json={"errorMessages": [f"Basic auth with {API_TOKEN} rejected"]})
    mocked.get(f"{BASE}/rest/api/2/issue/TCOC-2",
               body=requests.exceptions.ConnectTimeout("connect"))

    messages = []
    for key in ("TCOC-1", "TCOC-2"):
        with pytest.raises(IntegrationError) as caught:
            jira.load_issue(key)
        messages.append(caught.value.message)

    logged = [r.getMessage() for r in caplog.records]
    for text in messages + logged:
        assert API_TOKEN not in text
        assert BASIC.split()[1] not in text
