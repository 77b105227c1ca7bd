"""The README's main job through the real server: ``serve --sandbox`` on a free port, a trigger
posted over HTTP, the execution read back, and the assignee read from the sandbox Jira."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest
import requests

from tests.process import sandbox_in_thread
from ticket_dispatcher.config import load_config
from ticket_dispatcher.sandbox import WEBHOOK_SECRET
from ticket_dispatcher.service import Service

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


def signed_post(url: str, body: bytes, secret: str, identifier: str) -> requests.Response:
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return requests.post(f"{url}{BASE}/jira/webhooks", data=body, timeout=10, headers={
        "Content-Type": "application/json", "X-Hub-Signature": f"sha256={signature}",
        "X-Atlassian-Webhook-Identifier": identifier})


def test_the_sandbox_takes_a_jira_webhook_signed_with_its_own_secret(sandbox_service):
    """With no ``jira.webhook_secrets`` configured, ``serve --sandbox`` takes deliveries signed
    with ``sandbox-webhook-secret`` (README, "Try it"): a created issue is dispatched once,
    and a repeat of the same delivery starts nothing."""
    service, url = sandbox_service
    body = json.dumps({"webhookEvent": "jira:issue_created", "timestamp": 1796000000000,
                       "issue": {"key": "TCID-2", "fields": {"project": {"key": "TCID"}}}}
                      ).encode()

    wrong = signed_post(url, body, "another-secret", "try-1")
    taken = signed_post(url, body, WEBHOOK_SECRET, "try-1")
    assert service.runtime.wait_idle(30)
    again = signed_post(url, body, WEBHOOK_SECRET, "try-1")

    assert wrong.status_code == 401
    assert (taken.status_code, taken.json()["status"]) == (202, "accepted")
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    [execution] = requests.get(f"{url}{BASE}/dispatch/executions",
                               params={"issue_key": "TCID-2"}, timeout=10).json()["items"]
    assert execution["status"] == "succeeded"
    issue = requests.get(f"{url}/sandbox/_control/issues/TCID-2", timeout=10).json()
    assert issue["assignee_email"] is not None and "auto-dispatch" not in issue["labels"]


def test_a_configured_webhook_secret_replaces_the_sandbox_s(tmp_path):
    config = load_config(None, environ={
        "TICKET_DISPATCHER_DATABASE_URL": f"sqlite:///{tmp_path / 'td.db'}",
        "TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS": "an-operator-secret"})
    service = Service(config, port=0, sandbox=True)
    try:
        assert service.config.jira.webhook_secrets == ("an-operator-secret",)
        assert service.services.config is service.config
    finally:
        service.close()
