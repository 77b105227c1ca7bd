"""Injected faults (status, Retry-After, latency) in each service's own error shape, and the
request log."""

from __future__ import annotations

import pytest

from tests.sandbox.calls import (
    BEARER,
    CONTROL,
    CORE,
    JIRA,
    JIRA_AUTH,
    LARK,
    add_fault,
    assert_jira_error,
    assert_project_error,
    lark_token,
    page,
    send_card,
)


def test_fault_429_with_retry_after_hits_once_then_success(client):
    add_fault(client, service="jira", path_contains="/issue/TCID-1", status=429, retry_after=2)

    limited = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)
    retried = client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)

    assert assert_jira_error(limited, 429) and limited.headers["Retry-After"] == "2"
    assert retried.status_code == 200


def test_fault_500_answers_in_the_service_shape_only_on_matching_paths(client):
    auth = lark_token(client)
    add_fault(client, service="lark", path_contains="/read_users", status=500, times=2)

    sent = send_card(client, auth)
    url = f"{LARK}/im/v1/messages/{sent.json['data']['message_id']}/read_users"
    failed = client.simulate_get(url, params={"user_id_type": "open_id"}, headers=auth)

    assert sent.status_code == 200
    assert failed.status_code == 500 and failed.json["code"] != 0
    assert "Retry-After" not in failed.headers
    assert client.simulate_get(f"{CONTROL}/faults").json["items"][0]["times"] == 1


def test_fault_on_lark_429_uses_the_rate_limit_code(client):
    add_fault(client, service="lark", status=429, retry_after=1)

    result = client.simulate_post(f"{LARK}/auth/v3/tenant_access_token/internal",
                                  json={"app_id": "a", "app_secret": "b"})

    assert result.status_code == 429 and result.json["code"] == 99991400


def test_fault_on_internal_services_uses_their_error_shape(client):
    add_fault(client, service="oncall", status=503, retry_after=5)

    result = page(client, "alice@example.com")

    assert result.status_code == 503 and "error" in result.json
    assert result.headers["Retry-After"] == "5"


def test_fault_latency_sleeps_then_answers(client, sleeps):
    add_fault(client, service="core", latency_ms=1)

    result = client.simulate_get(f"{CORE}/users/alice@example.com", headers=BEARER)

    assert result.status_code == 200
    assert sleeps == [0.001]


def test_faults_are_listed_and_cleared(client):
    add_fault(client, service="jira", status=500, times=3)
    add_fault(client, service="core", latency_ms=5)

    listed = client.simulate_get(f"{CONTROL}/faults").json
    cleared = client.simulate_delete(f"{CONTROL}/faults").json

    assert listed["total"] == 2 and cleared == {"cleared": 2}
    assert client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH).status_code == 200


@pytest.mark.parametrize("body", [
    {"service": "github", "status": 500}, {"service": "jira"}, {"service": "jira", "status": 200},
    {"service": "jira", "status": 500, "times": 0}, {"service": "jira", "latency_ms": -1},
    {"service": "jira", "status": "500"}, {"status": 500},
])
def test_bad_fault_is_400_in_the_project_shape(client, body):
    result = client.simulate_post(f"{CONTROL}/faults", json=body)

    assert_project_error(result, 400)


def test_requests_are_logged_with_the_fault_they_hit(client):
    add_fault(client, service="jira", status=429)
    client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)
    client.simulate_get(f"{JIRA}/issue/TCID-1", headers=JIRA_AUTH)

    logged = client.simulate_get(f"{CONTROL}/requests").json["items"]

    assert [(r["service"], r["path"], r["fault"]) for r in logged] == [
        ("jira", f"{JIRA}/issue/TCID-1", 429), ("jira", f"{JIRA}/issue/TCID-1", None)]
