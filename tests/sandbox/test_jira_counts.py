"""The fake Jira counts its own issues by JQL (``POST .../search/approximate-count``), enough
for balanced assignment: assignee, statusCategory, status and project, joined by AND; any
other JQL is Jira's 400. Then the example balanced policy, dry-run in the sandbox service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from tests.process import sandbox_in_thread
from tests.sandbox.calls import JIRA, JIRA_AUTH, assert_jira_error
from ticket_dispatcher.config import JiraConfig
from ticket_dispatcher.domain.actions.balanced import DEFAULT_COUNT_JQL
from ticket_dispatcher.domain.jql import fill
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.jira import JiraClient
from ticket_dispatcher.sandbox.jira import SandboxIssue
from ticket_dispatcher.sandbox.jql import UnsupportedJql, parse, status_category

ROOT = Path(__file__).resolve().parents[2]
API = "/api/v1/ticketmanager"


@pytest.fixture
def workload(sandbox):
    """alice: two open (Todo, In Progress) and one Done; bob: one Closed; plus TCID-1."""
    for key, assignee, status, project in (
            ("TCID-2", "acc-alice", "Todo", "TCID"),
            ("GTOC-1", "acc-alice", "In Progress", "GTOC"),
            ("TCID-3", "acc-alice", "Done", "TCID"),
            ("TCID-4", "acc-bob", "Closed", "TCID")):
        sandbox.jira.put_issue(SandboxIssue(key=key, project_key=project, status=status,
                                            assignee=assignee))
    return sandbox


def count(client, jql, path: str = f"{JIRA}/search/approximate-count"):
    return client.simulate_post(path, json={"jql": jql}, headers=JIRA_AUTH)


@pytest.mark.parametrize("jql,expected", [
    ('assignee = "acc-alice" AND statusCategory != Done', 2),
    ("assignee = acc-alice", 3),
    ('assignee = "acc-alice" AND statusCategory = Done', 1),
    ("assignee = 'acc-alice' and statusCategory = \"In Progress\"", 1),
    ('assignee = "acc-alice" AND statusCategory = "To Do"', 1),
    ('assignee = "acc-alice" AND project = tcid AND status != done', 1),
    ('assignee = "acc-bob" AND statusCategory != Done', 0),
    ("assignee != acc-alice", 1),  # bob's; unassigned TCID-1 is not "not alice" in Jira
    ('assignee = "acc-nobody"', 0),
    ("statusCategory = 3", 2),
])
def test_the_fake_jira_counts_its_issues_by_jql(client, workload, jql, expected):
    result = count(client, jql)

    assert result.status_code == 200, result.text
    assert result.json == {"count": expected}


def test_the_count_is_served_under_v3_as_well(client, workload):
    result = count(client, "assignee = acc-alice", "/sandbox/jira/rest/api/3/search/"
                                                   "approximate-count")

    assert result.json == {"count": 3}


@pytest.mark.parametrize("jql", [
    "assignee = a OR assignee = b", "assignee in (a, b)", "reporter = a", "",
    "assignee = a ORDER BY created", "assignee =", "statusCategory = Finished",
    "assignee = currentUser()", 'assignee = "unterminated',
])
def test_a_jql_the_sandbox_cannot_read_is_jiras_400(client, workload, jql):
    body = assert_jira_error(count(client, jql), 400)

    assert body["errorMessages"][0].startswith("Error in the JQL Query: ")


@pytest.mark.parametrize("body", [{}, {"jql": 3}, ["assignee = a"]])
def test_a_body_without_a_jql_string_is_jiras_400(client, body):
    result = client.simulate_post(f"{JIRA}/search/approximate-count", json=body,
                                  headers=JIRA_AUTH)

    assert_jira_error(result, 400)


def test_a_count_needs_basic_auth(client):
    result = client.simulate_post(f"{JIRA}/search/approximate-count",
                                  json={"jql": "assignee = a"})

    assert_jira_error(result, 401)


def test_status_categories_follow_the_status_names():
    assert [status_category(s) for s in ("Done", "closed", "Todo", "WAITING FOR FIRST RESPONSE",
                                         "In Progress", "Escalated", None)] == [
        "Done", "Done", "To Do", "To Do", "In Progress", "In Progress", "To Do"]
    with pytest.raises(UnsupportedJql):
        parse("assignee = a AND")


def test_the_product_client_counts_in_the_sandbox(served, workload):
    client = JiraClient(JiraConfig(base_url=served["jira"], email="bot@example.com",
                                   api_token="t"))
    try:
        answers = client.count_issues([fill(DEFAULT_COUNT_JQL, "acc-alice"),
                                       fill(DEFAULT_COUNT_JQL, "acc-bob"), "assignee ~ a"])
    finally:
        client.close()

    assert [a.value for a in answers[:2]] == [2, 0]
    assert isinstance(answers[2].error, IntegrationError) and answers[2].error.status == 400


# -- the example policy, dry-run in the sandbox service -------------------------------------


@pytest.fixture
def sandbox_service(tmp_path):
    with sandbox_in_thread(tmp_path) as service:
        yield service


def test_the_balanced_example_dry_run_counts_everyone_not_away(sandbox_service):
    base = f"http://127.0.0.1:{sandbox_service.port}{API}"
    policy = json.loads((ROOT / "ops/examples/policies/balanced-tcid.json").read_text())
    draft = requests.post(f"{base}/dispatch/policies", json=policy, timeout=10)
    assert draft.status_code == 201, draft.text

    trigger = requests.post(f"{base}/dispatch/triggers", timeout=10, json={
        "source": "policy_check", "input": {"issue_key": "TCID-2"},
        "policy_id": draft.json()["id"], "dryrun": {}})
    assert trigger.status_code == 202, trigger.text
    assert sandbox_service.runtime.wait_idle(10)
    executions = requests.get(f"{base}/dispatch/executions",
                              params={"trigger_id": trigger.json()["id"]}, timeout=10).json()

    [execution] = executions["items"]
    context = execution["rule_executions"][0]["action_executions"][0]["context"]["assign"]
    assert execution["status"] == "succeeded" and execution["mode"] == "dry_run"
    # carol is on leave in the sandbox: passed over, so not counted
    assert context["counts"] == {"alice@example.com": 1, "bob@example.com": 0}
    assert context["assignee"] == "bob@example.com"
    assert context["reason"] == "balanced: fewest open issues (0)"
    assert [(v["email"], v["eligible"]) for v in context["judged"]] == [
        ("carol@example.com", False)]
    assert context["count_jql"] == DEFAULT_COUNT_JQL
