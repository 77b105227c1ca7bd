"""The audit trail through a real ``serve``, on both engines: changes made over HTTP with keys
and from the console are recorded with who and how, an operator reads them (as JSON and as
JSON lines), and a viewer may not."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import requests

from tests.factories import policy_body
from tests.http.conftest import API_KEYS, KEYS
from tests.peer import FakeJira

BASE = "/api/v1/ticketmanager"
_TOKEN = re.compile(r'name="csrf-token" content="([^"]*)"')


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        yield fake


def _call(server, method, path, role="operator", **kwargs):
    return requests.request(method, server.url + BASE + path, timeout=15,
                            headers={"X-API-KEY": KEYS[role], **kwargs.pop("headers", {})},
                            **kwargs)


def test_changes_over_http_and_the_console_are_audited(processes, db_url, jira):
    server = processes.start(db_url, jira, AUTH_API_KEYS=API_KEYS,
                             CONSOLE_SECURE_COOKIE="false").wait_serving()
    made = _call(server, "POST", "/dispatch/policies", json=policy_body(name="Audited"))
    assert made.status_code == 201, made.text
    policy_id = made.json()["id"]
    assert _call(server, "PUT", "/engineers/alice@example.com", json={
        "dispatch_enabled": True, "timezone": "Europe/Berlin"}).status_code == 201

    browser = requests.Session()
    token = _TOKEN.search(browser.get(server.url + "/console/sign-in", timeout=10).text)[1]
    wrong = browser.post(server.url + "/console/sign-in", timeout=10, allow_redirects=False,
                         data={"api_key": "not-a-key-at-all-0123456789", "next": "/console/",
                               "csrf_token": token})
    assert wrong.status_code == 401
    signed_in = browser.post(server.url + "/console/sign-in", timeout=10,
                             allow_redirects=False,
                             data={"api_key": KEYS["operator"], "next": "/console/",
                                   "csrf_token": token})
    assert signed_in.status_code == 303
    page = browser.get(server.url + f"/console/policies/{policy_id}", timeout=10)
    token = _TOKEN.search(page.text)[1]
    activated = browser.post(server.url + f"/console/policies/{policy_id}/activate",
                             timeout=10, data={"csrf_token": token, "confirmed": "yes"})
    assert activated.status_code == 200, activated.text

    answer = _call(server, "GET", "/audit")
    assert answer.status_code == 200
    seen = [(r["actor"], r["via"], r["action"], r["object_id"])
            for r in answer.json()["records"]]
    assert seen == [
        ("operator-key", "console", "policy.activated", str(policy_id)),
        ("operator-key", "console", "console.signed_in", "operator-key"),
        ("unknown", "console", "console.sign_in_failed", "unknown"),
        ("operator-key", "api", "engineer.changed", "alice@example.com"),
        ("operator-key", "api", "policy.created", str(policy_id)),
    ]
    assert KEYS["operator"] not in answer.text and "not-a-key-at-all" not in answer.text

    export = _call(server, "GET", "/audit", params={"format": "jsonl",
                                                    "object_type": "engineer"})
    [line] = [json.loads(text) for text in export.text.splitlines()]
    assert line["after"]["timezone"] == "Europe/Berlin" and line["before"] is None
    assert _call(server, "GET", "/audit", role="viewer").status_code == 403
    assert server.log_problems() == []
