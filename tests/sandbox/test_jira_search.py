"""The sandbox Jira's issue search by key (the ACK watcher's batched read), through the real
client, and the one JQL shape it reads."""

from __future__ import annotations

import pytest

from tests.sandbox.calls import JIRA, JIRA_AUTH
from ticket_dispatcher.config import JiraConfig
from ticket_dispatcher.integrations.jira import JiraClient
from ticket_dispatcher.sandbox.jira import SandboxIssue
from ticket_dispatcher.sandbox.jql import UnsupportedJql, keys_in


def test_the_real_client_reads_many_issues_in_one_search_and_misses_the_unknown_ones(
        served, sandbox):
    for key, status in (("TCID-2", "Todo"), ("GTOC-1", "In Progress")):
        sandbox.jira.put_issue(SandboxIssue(key=key, project_key=key.split("-")[0],
                                            status=status, assignee="acc-alice"))
    client = JiraClient(JiraConfig(base_url=served["jira"], email="bot@example.com",
                                   api_token="t"))
    try:
        found = client.load_issues(["TCID-2", "GTOC-1", "NOPE-9"])
        single = client.load_issue("GTOC-1")
    finally:
        client.close()

    assert sorted(found) == ["GTOC-1", "TCID-2"]
    assert found["GTOC-1"] == single  # the same snapshot a single read gives
    assert (found["TCID-2"].status, found["TCID-2"].assignee.account_id) == ("Todo", "acc-alice")


@pytest.mark.parametrize("jql,keys", [
    ('key in ("TCID-1", "GTOC-2")', ["TCID-1", "GTOC-2"]),
    ("KEY IN (TCID-1)", ["TCID-1"]),
    ('key in ("A\\"B-1")', ['A"B-1']),
])
def test_the_search_reads_keys_in(jql, keys):
    assert keys_in(jql) == keys


@pytest.mark.parametrize("jql", ["project = TCID", 'key in ("A-1" OR "B-2")', "key in ()",
                                 'key = "A-1"'])
def test_any_other_search_is_unsupported(jql):
    with pytest.raises(UnsupportedJql):
        keys_in(jql)


def test_an_unreadable_search_is_jiras_400(client, sandbox):
    result = client.simulate_post(f"{JIRA}/search/jql", json={"jql": "project = TCID"},
                                  headers=JIRA_AUTH)

    assert result.status_code == 400
    assert "Error in the JQL Query" in result.json["errorMessages"][0]


def test_a_search_naming_an_issue_that_does_not_exist_is_jiras_400_naming_it(client, sandbox):
    sandbox.jira.put_issue(SandboxIssue(key="TCID-2", project_key="TCID"))

    result = client.simulate_post(f"{JIRA}/search/jql", json={"jql": 'key in (TCID-2, NOPE-9)'},
                                  headers=JIRA_AUTH)

    assert result.status_code == 400
    assert result.json["errorMessages"] == [
        "An issue with key 'NOPE-9' does not exist for field 'key'."]
