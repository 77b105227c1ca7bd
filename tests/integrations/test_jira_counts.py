"""The Jira client's issue counts and user-search batches: Jira Cloud's approximate count
(``POST /rest/api/2/search/approximate-count``, ``{"jql"}`` → ``{"count"}``), checked with
``responses`` and against the independent fake Jira of tests/peer.py."""

from __future__ import annotations

import pytest
from responses import matchers

from tests.integrations.test_jira import BASE, BASIC, CONFIG, jira_user
from tests.peer import FakeJira
from ticket_dispatcher.config import JiraConfig
from ticket_dispatcher.domain.actions.balanced import DEFAULT_COUNT_JQL
from ticket_dispatcher.domain.jql import fill
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.jira import JiraClient

COUNT = f"{BASE}/rest/api/2/search/approximate-count"


@pytest.fixture
def jira():
    client = JiraClient(CONFIG, connect_timeout=1, read_timeout=2, sleep=lambda _: None)
    yield client
    client.close()


def test_a_count_posts_the_jql_and_reads_the_count(mocked, jira):
    jql = 'assignee = "acc-1" AND statusCategory != Done'
    mocked.post(COUNT, json={"count": 7}, match=[
        matchers.json_params_matcher({"jql": jql}),
        matchers.header_matcher({"Authorization": BASIC})])

    assert jira.approximate_count(jql) == 7


@pytest.mark.parametrize("answer", [{}, {"count": "7"}, {"count": -1}, {"count": True}, [7]])
def test_an_answer_without_a_count_is_an_integration_error(mocked, jira, answer):
    mocked.post(COUNT, json=answer)

    with pytest.raises(IntegrationError) as raised:
        jira.approximate_count("assignee = x")

    assert raised.value.message == ("jira POST /rest/api/2/search/approximate-count: the "
                                    "answer has no count")


def test_a_jql_jira_refuses_is_its_400_with_jiras_words(mocked, jira):
    mocked.post(COUNT, status=400, json={
        "errorMessages": ["Error in the JQL Query: Expecting operator but got 'x'."],
        "errors": {}})

    with pytest.raises(IntegrationError) as raised:
        jira.approximate_count("assignee x")

    assert raised.value.status == 400
    assert "Expecting operator but got 'x'" in raised.value.message


def test_count_issues_answers_each_jql_in_order_failures_included(mocked, jira):
    mocked.post(COUNT, json={"count": 2},
                match=[matchers.json_params_matcher({"jql": "assignee = a"})])
    mocked.post(COUNT, status=400, json={"errorMessages": ["bad"], "errors": {}},
                match=[matchers.json_params_matcher({"jql": "assignee = b"})])

    answers = jira.count_issues(["assignee = a", "assignee = b"])

    assert answers[0].value == 2 and answers[0].ok
    assert answers[1].value is None and answers[1].error.status == 400


def test_find_users_by_email_answers_each_email(mocked, jira):
    mocked.get(f"{BASE}/rest/api/2/user/search", json=[jira_user("a-1", "a@example.com")],
               match=[matchers.query_param_matcher({"query": "a@example.com"})])
    mocked.get(f"{BASE}/rest/api/2/user/search", json=[],
               match=[matchers.query_param_matcher({"query": "nobody@example.com"})])

    answers = jira.find_users_by_email(["a@example.com", "nobody@example.com"])

    assert [a.value.account_id if a.value else None for a in answers] == ["a-1", None]
    assert all(a.ok for a in answers)


def test_the_client_and_the_independent_fake_jira_agree_on_counts():
    with FakeJira() as peer:
        peer.add_user("a@example.com", "557058:aa")
        for key, status in (("TCID-1", "Open"), ("TCID-2", "In Progress"), ("TCID-3", "Done")):
            peer.add_issue(key, assignee="557058:aa", status=status)
        peer.add_issue("TCID-4", status="Open")
        client = JiraClient(JiraConfig(base_url=peer.base_url, email=peer.email,
                                       api_token=peer.api_token))
        try:
            open_count = client.approximate_count(fill(DEFAULT_COUNT_JQL, "557058:aa"))
            every = client.approximate_count(fill("assignee = {account}", "557058:aa"))
            with pytest.raises(IntegrationError) as refused:
                client.approximate_count("project = TCID OR assignee = x")
        finally:
            client.close()

    assert (open_count, every) == (2, 3)
    assert refused.value.status == 400
