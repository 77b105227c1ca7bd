"""Through the real server (``serve --sandbox``): how a notification action ended is told the
same way by the API's action status, the ``/metrics`` counters and the console's timeline. A
page to someone without a phone number was not sent: ``failed``, while the workflow goes on."""

from __future__ import annotations

import re

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.process import sandbox_in_thread, wait_until

BASE = "/api/v1/ticketmanager"
CONTROL = "/sandbox/_control"


@pytest.fixture
def sandbox_service(tmp_path):
    with sandbox_in_thread(tmp_path) as service:
        yield service, f"http://127.0.0.1:{service.port}"


def actions_of(execution: dict) -> list[dict]:
    return [action for rule in execution["rule_executions"]
            for action in rule["action_executions"]]


def counted(url: str, name: str, **labels: str) -> float:
    """The value of the one sample of ``name`` with ``labels``, for the assignee's workflow
    (0 when there is none)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    labels = {"role": "assignee"} | labels
    values = [sample.value for family in text_string_to_metric_families(text)
              for sample in family.samples
              if sample.name == name and all(sample.labels.get(k) == v
                                             for k, v in labels.items())]
    assert len(values) <= 1, values
    return values[0] if values else 0.0


def test_a_page_to_someone_without_a_phone_is_failed_everywhere(sandbox_service):
    service, url = sandbox_service
    # GTOC-1 is a P1 in Todo with the notify-assignee label; carol has no phone number
    changed = requests.patch(f"{url}{CONTROL}/issues/GTOC-1", timeout=10,
                             json={"assignee_email": "carol@example.com"})
    assert changed.status_code == 200, changed.text
    accepted = requests.post(f"{url}{BASE}/dispatch/triggers", timeout=10, json={
        "source": "jira_assignment_assignee", "input": {"issue_key": "GTOC-1"}})
    assert accepted.status_code == 202, accepted.text
    trigger_url = url + accepted.headers["Location"]

    def waiting_after_the_page() -> dict | None:
        ids = requests.get(trigger_url, timeout=10).json().get("output", {}).get(
            "execution_ids") or []
        if not ids:
            return None
        execution = requests.get(f"{url}{BASE}/dispatch/executions/{ids[0]}",
                                 timeout=10).json()
        page = actions_of(execution)[2]
        return execution if page["context"]["page"].get("page_status") else None

    execution = wait_until(waiting_after_the_page, 30, "the first page answered")
    # the page was refused, and the workflow still waits for an ACK: carol acknowledges
    messages = requests.get(f"{url}{CONTROL}/messages", timeout=10).json()["items"]
    read = requests.post(f"{url}{CONTROL}/lark/messages/{messages[-1]['message_id']}/press",
                         timeout=10, json={"action": "ack"})
    assert read.status_code == 200 and read.json()["status"] == 200, read.text

    def finished() -> dict | None:
        done = requests.get(f"{url}{BASE}/dispatch/executions/{execution['id']}",
                            timeout=10).json()
        return done if done["status"] in ("succeeded", "failed") else None

    execution = wait_until(finished, 30, "the ACK seen at the next poll")

    card, urgent, page, *rest = actions_of(execution)
    assert execution["status"] == "succeeded"  # the workflow ended by the ACK
    assert (card["status"], urgent["status"]) == ("succeeded", "succeeded")
    assert page["context"]["page"]["page_status"] == "failed"
    assert page["context"]["page"]["call_error"] == "no_phone_number"
    assert page["context"]["page"]["outcome"] == "ack"
    assert (page["status"], page["error"]) == (
        "failed", "Oncall page attempt 1 not sent (no_phone_number)")
    assert [action["status"] for action in rest] == ["skipped"] * 3

    # the metrics count the same results, action by action and call by call
    assert counted(url, "ticket_manager_dispatch_assignment_action_total",
                   action="page_assignment", result="failed", attempt="1") == 1
    assert counted(url, "ticket_manager_dispatch_assignment_action_total",
                   action="page_assignment", result="succeeded", attempt="1") == 0
    assert counted(url, "ticket_manager_dispatch_assignment_calls_total",
                   call="page", result="failed", attempt="1") == 1
    for action in ("send_assignment_notification", "mark_assignment_message_urgent"):
        assert counted(url, "ticket_manager_dispatch_assignment_action_total",
                       action=action, result="succeeded") == 1
    for attempt in ("2", "3"):
        assert counted(url, "ticket_manager_dispatch_assignment_action_total",
                       action="page_assignment", result="skipped", attempt=attempt) == 1
    assert counted(url, "ticket_manager_dispatch_assignment_action_total",
                   action="escalate_assignment_to_leader", result="skipped") == 1

    # and the console's timeline says it too
    page_html = requests.get(f"{url}/console/executions/{execution['id']}", timeout=10).text
    headings = re.findall(r"<h4>Action (\d+): <code>([a-z_]+)</code>\s*(.*?)</h4>", page_html,
                          re.S)
    statuses = [(kind, re.sub(r"<[^>]+>", "", shown).strip()) for _, kind, shown in headings]
    assert statuses == [("send_assignment_notification", "succeeded"),
                        ("mark_assignment_message_urgent", "succeeded"),
                        ("page_assignment", "failed"), ("page_assignment", "skipped"),
                        ("page_assignment", "skipped"),
                        ("escalate_assignment_to_leader", "skipped")]
    assert "Oncall page attempt 1 not sent (no_phone_number)" in page_html
