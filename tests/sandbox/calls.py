"""Paths, credentials and calls shared by the sandbox's tests."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import falcon

from ticket_dispatcher.http import errors
from ticket_dispatcher.sandbox import Sandbox, mount_sandbox

JIRA = "/sandbox/jira/rest/api/2"
DESK = "/sandbox/jira/rest/servicedeskapi"
LARK = "/sandbox/lark/open-apis"
ONCALL = "/sandbox/oncall/api/v1"
CORE = "/sandbox/core/api/v1"
CONTROL = "/sandbox/_control"
JIRA_AUTH = {"Authorization": "Basic " + base64.b64encode(b"bot@example.com:api-token").decode()}
BEARER = {"Authorization": "Bearer internal-token"}
CREATED = datetime(2021, 1, 17, 12, 34, tzinfo=UTC)


def sandbox_app(sandbox: Sandbox) -> falcon.App:
    """The sandbox alone on an app with the project's error handlers (as the service has)."""
    app = falcon.App()
    errors.install(app)
    mount_sandbox(app, sandbox)
    return app


def lark_token(client) -> dict:
    result = client.simulate_post(f"{LARK}/auth/v3/tenant_access_token/internal",
                                  json={"app_id": "cli_x", "app_secret": "s3cret"})
    return {"Authorization": f"Bearer {result.json['tenant_access_token']}"}


def send_card(client, auth: dict, receive_id: str = "ou_alice", uuid: str | None = "u-1"):
    body = {"receive_id": receive_id, "msg_type": "interactive",
            "content": json.dumps({"elements": []})}
    if uuid is not None:
        body["uuid"] = uuid
    return client.simulate_post(f"{LARK}/im/v1/messages", params={"receive_id_type": "open_id"},
                                json=body, headers=auth)


def page(client, email: str, dedup_key: str = "exec-1-page-1"):
    return client.simulate_post(f"{ONCALL}/page", headers=BEARER, json={
        "email": email, "title": "P1 TCID-1", "message": "please look", "issue_key": "TCID-1",
        "dedup_key": dedup_key})


def add_fault(client, **body):
    result = client.simulate_post(f"{CONTROL}/faults", json=body)
    assert result.status_code == 201, result.text
    return result.json


def assert_project_error(result, status: int) -> dict:
    assert result.status_code == status, result.text
    assert set(result.json) == {"code", "title", "description", "errors"}
    return result.json


def assert_jira_error(result, status: int) -> dict:
    assert result.status_code == status, result.text
    assert set(result.json) == {"errorMessages", "errors"}
    return result.json
