"""The README's main job through the real server: ``serve --sandbox`` on a free port, a trigger
posted over HTTP, the execution read back, and the assignee read from the sandbox Jira."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from tests.process import sandbox_in_thread

BASE = "/api/v1/ticketmanager"


@pytest.fixture
def sandbox_service(tmp_path):
    with sandbox_in_thread(tmp_path) as service:
        yield service, f"http://127.0.0.1:{service.port}"


def test_trigger_over_http_assigns_the_issue_in_the_sandbox(sandbox_service):
    service, url = sandbox_service
    before = requests.get(f"{url}/sandbox/_control/issues/TCID-2", timeout=10).json()
    assert before["assignee_email"] is None

    accepted = requests.post(f"{url}{BASE}/dispatch/triggers", timeout=10, json={
        "source": "jira_automation", "input": {"issue_key": "TCID-2"}})
    assert accepted.status_code == 202
    assert service.runtime.wait_idle(30)
    trigger = requests.get(url + accepted.headers["Location"], timeout=10).json()
    [execution_id] = trigger["output"]["execution_ids"]
    execution = requests.get(f"{url}{BASE}/dispatch/executions/{execution_id}",
                             timeout=10).json()
    after = requests.get(f"{url}/sandbox/_control/issues/TCID-2", timeout=10).json()

    assert execution["status"] == "succeeded", execution
    assigned = [a for r in execution["rule_executions"] for a in r["action_executions"]
                if a["status"] == "succeeded"]
    assert len(assigned) == 1
    assert after["assignee_email"] == assigned[0]["context"]["assign"]["assignee"]
    assert "auto-dispatch" not in after["labels"]
    engineer = requests.get(f"{url}{BASE}/engineers/{after['assignee_email']}",
                            timeout=10).json()
    assert engineer["last_dispatched_issue"] == "TCID-2"


def test_a_second_copy_of_a_trigger_after_the_assignment_assigns_nothing(sandbox_service):
    """A request that got no answer may have been stored anyway (a paused replica took it when
    it resumed) while the re-sent copy already assigned the issue. The copy stored second finds
    the ``auto-dispatch`` label gone: with a policy that requires it, the copy matches
    nothing, and the assignee stays."""
    service, url = sandbox_service
    policies = requests.get(f"{url}{BASE}/dispatch/policies", timeout=10).json()["items"]
    [tcid] = [p for p in policies if p["name"] == "Assign TCID tickets"]
    document = json.loads((Path(__file__).parents[1] / "ops/examples/policies/assign-tcid.json")
                          .read_text())
    document["trigger"]["issue_label_all"] = ["auto-dispatch"]
    draft = requests.post(f"{url}{BASE}/dispatch/policies/{tcid['id']}/replacements",
                          json=document, timeout=10).json()
    assert requests.post(f"{url}{BASE}/dispatch/policies/{draft['id']}/activate",
                         timeout=10).status_code == 200
    body = {"source": "jira_automation", "input": {"issue_key": "TCID-2"}}
    first = requests.post(f"{url}{BASE}/dispatch/triggers", timeout=10, json=body)
    assert service.runtime.wait_idle(30)
    assigned = requests.get(f"{url}/sandbox/_control/issues/TCID-2", timeout=10).json()

    second = requests.post(f"{url}{BASE}/dispatch/triggers", timeout=10, json=body)
    assert service.runtime.wait_idle(30)

    assert (first.status_code, second.status_code) == (202, 202)
    copy = requests.get(url + second.headers["Location"], timeout=10).json()
    after = requests.get(f"{url}/sandbox/_control/issues/TCID-2", timeout=10).json()
    assert copy["status"] == "completed" and copy["output"]["execution_ids"] == []
    assert after["assignee_email"] == assigned["assignee_email"] is not None


def test_admin_view_shows_the_clients_at_work(sandbox_service):
    service, url = sandbox_service
    requests.post(f"{url}{BASE}/dispatch/triggers", timeout=10, json={
        "source": "jira_automation", "input": {"issue_key": "TCID-3"}})
    assert service.runtime.wait_idle(30)

    clients = requests.get(f"{url}{BASE}/admin/actors", timeout=10).json()["clients"]

    assert clients["jira"]["calls"] >= 2 and clients["jira"]["in_flight"] == 0
    assert clients["jira"]["last_latency_ms"] is not None
