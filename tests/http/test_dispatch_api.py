"""Trigger intake, the execution read API and the admin endpoints."""

from __future__ import annotations

import json

import pytest

from tests.harness import rule

TRIGGER = {"source": "jira_automation", "input": {"issue_key": "TCID-1"}}


def post_trigger(api, body=None, role="automation"):
    return api.as_role(role).post("/dispatch/triggers", json=body or TRIGGER)


def test_post_trigger_answers_202_pending_with_location(live_api, harness):
    harness.policy(rule("test_noop"))

    result = post_trigger(live_api)

    assert result.status_code == 202
    assert result.json["status"] == "pending"
    assert result.json["input"] == {"issue_key": "TCID-1"}
    location = result.headers["Location"]
    assert location == f"/api/v1/ticketmanager/dispatch/triggers/{result.json['id']}"
    harness.wait_idle()
    done = live_api.as_role("viewer").get(location.removeprefix("/api/v1/ticketmanager"))
    assert done.json["status"] == "completed"
    assert len(done.json["output"]["execution_ids"]) == 1


def test_operator_may_post_triggers_and_viewer_may_not(live_api, harness):
    assert post_trigger(live_api, role="operator").status_code == 202
    assert post_trigger(live_api, role="viewer").status_code == 403
    harness.wait_idle()


@pytest.mark.parametrize("body,path", [
    ({"input": {"issue_key": "TCID-1"}}, "source"),
    ({"source": "jira_automation"}, "input"),
    ({"source": "jira_automation", "input": {"issue_key": "not a key"}}, "input.issue_key"),
    ({"source": "jira_automation", "input": {}}, "input.issue_key"),
    ({"source": "Jira Automation!", "input": {"issue_key": "TCID-1"}}, "source"),
    ({**TRIGGER, "policy_id": "3"}, "policy_id"),
    ({**TRIGGER, "policy_id": 0}, "policy_id"),
    ({**TRIGGER, "dryrun": {"overwrite_data": {"now": "yesterday"}}},
     "dryrun.overwrite_data.now"),
    ({**TRIGGER, "dryrun": {"overwrite_data": {"now": "9999-12-31T23:59:59-23:59"}}},
     "dryrun.overwrite_data.now"),
    ({**TRIGGER, "dryrun": {"overwrite_data": {"now": "9999-12-31T23:00:00Z"}}},
     "dryrun.overwrite_data.now"),
    ({**TRIGGER, "dryrun": {"overwrite": {}}}, "dryrun.overwrite"),
    ({**TRIGGER, "delivery_id": "x"}, "delivery_id"),
    ({"source": "jira_assignment_assignee", "input": {"issue_key": "TCID-1"}, "policy_id": 1},
     "policy_id"),
])
def test_bad_trigger_is_400_naming_the_field_and_persists_nothing(live_api, harness, body,
                                                                  path):
    result = post_trigger(live_api, body)

    assert result.status_code == 400, result.json
    assert path in [p["path"] for p in result.json["errors"]]
    assert harness.store.triggers.recoverable() == []


def test_trigger_body_over_64_kib_is_413(live_api):
    body = json.dumps({**TRIGGER, "padding": "x" * 70000})

    result = live_api.as_role("automation").post(
        "/dispatch/triggers", body=body, headers={"Content-Type": "application/json"})

    assert result.status_code == 413


def test_unknown_explicit_policy_is_400(live_api):
    result = post_trigger(live_api, {**TRIGGER, "policy_id": 999})

    assert result.status_code == 400
    assert result.json["errors"][0]["path"] == "policy_id"


def test_explicit_live_policy_busy_is_409(live_api, harness):
    policy = harness.policy(rule("test_wait"))
    post_trigger(live_api)
    harness.wait_idle()

    busy = post_trigger(live_api, {**TRIGGER, "policy_id": policy.id})
    dry = post_trigger(live_api, {**TRIGGER, "policy_id": policy.id, "dryrun": {}})

    assert busy.status_code == 409
    assert dry.status_code == 202
    harness.wait_idle()


def test_trigger_rate_limit_answers_429_with_retry_after(live_api, harness):
    statuses = [post_trigger(live_api).status_code for _ in range(6)]  # burst 5, 1/s

    assert statuses == [202] * 5 + [429]
    harness.wait_idle()
    harness.clock.advance(1)
    assert post_trigger(live_api).status_code == 202
    harness.wait_idle()


def test_rate_limit_reports_retry_after(live_api, harness):
    for _ in range(5):
        post_trigger(live_api)
    result = post_trigger(live_api)

    assert result.status_code == 429
    assert result.headers["Retry-After"] == "1"
    harness.wait_idle()


def test_unknown_trigger_is_404(live_api):
    assert live_api.get("/dispatch/triggers/12345").status_code == 404


def test_execution_list_filters_pages_and_counts(live_api, harness):
    harness.policy(rule("test_noop"))
    failing = harness.policy(rule("test_plan_fails"))
    post_trigger(live_api)
    harness.wait_idle()
    post_trigger(live_api)
    harness.wait_idle()

    everything = live_api.get("/dispatch/executions").json
    failed = live_api.get("/dispatch/executions", params={"status": "failed"}).json
    by_policy = live_api.get("/dispatch/executions",
                             params={"policy_id": str(failing.id)}).json
    paged = live_api.get("/dispatch/executions", params={"limit": "1", "offset": "1"}).json

    assert everything["total"] == 4
    assert [e["id"] for e in everything["items"]] == sorted(
        (e["id"] for e in everything["items"]), reverse=True)
    assert failed["total"] == 2 and all(e["failure_code"] == "plan_failed"
                                        for e in failed["items"])
    assert by_policy["total"] == 2
    assert paged["total"] == 4 and len(paged["items"]) == 1


@pytest.mark.parametrize("params", [{"status": "done"}, {"mode": "live-ish"},
                                    {"policy_id": "x"}, {"issue_key": "nope"},
                                    {"limit": "1000"}])
def test_execution_list_rejects_bad_filters(live_api, params):
    assert live_api.get("/dispatch/executions", params=params).status_code == 400


def test_execution_detail_has_rule_and_action_snapshots(live_api, harness):
    harness.policy(rule("test_noop", name="assign it"))
    post_trigger(live_api)
    harness.wait_idle()
    execution_id = live_api.get("/dispatch/executions").json["items"][0]["id"]

    detail = live_api.get(f"/dispatch/executions/{execution_id}").json

    assert detail["status"] == "succeeded"
    [rule_execution] = detail["rule_executions"]
    assert rule_execution["name"] == "assign it" and rule_execution["outcome"] == "matched"
    assert rule_execution["evaluation"]["matched"] is True
    [action] = rule_execution["action_executions"]
    assert action["status"] == "succeeded" and action["action"]["type"] == "test_noop"
    assert action["context"]["executed"] is True
    assert live_api.get("/dispatch/executions/999").status_code == 404


def test_admin_actors_shows_the_live_system(live_api, harness):
    harness.policy(rule("test_gate"))
    post_trigger(live_api)
    gate = harness.registry.get("test_gate")
    gate.wait_entered(1)

    status = live_api.get("/admin/actors").json

    assert status["supervisor"]["recovered"] is True
    assert status["pool"]["slots"] == 10 and status["pool"]["busy"] == 1
    [running] = status["executions"]
    assert running["issue_key"] == "TCID-1" and running["action"] == "0:test_gate"
    assert status["trigger_actors"]["actors"] == 4
    assert set(status["clients"]) == {"jira", "lark", "oncall", "core"}
    gate.open()
    harness.wait_idle()


def test_cancel_endpoint(live_api, harness):
    harness.policy(rule("test_wait"))
    post_trigger(live_api)
    harness.wait_idle()
    execution_id = live_api.get("/dispatch/executions").json["items"][0]["id"]

    viewer = live_api.as_role("viewer").post(f"/admin/executions/{execution_id}/cancel")
    cancelled = live_api.post(f"/admin/executions/{execution_id}/cancel")
    again = live_api.post(f"/admin/executions/{execution_id}/cancel")
    missing = live_api.post("/admin/executions/999/cancel")

    assert viewer.status_code == 403
    assert cancelled.status_code == 200
    assert cancelled.json["failure_code"] == "cancelled"
    assert "operator" in cancelled.json["failure_reason"]
    assert again.status_code == 409
    assert missing.status_code == 404


def test_runtime_endpoints_answer_503_without_a_runtime(api):
    assert api.as_role("automation").post("/dispatch/triggers", json=TRIGGER).status_code == 503
    assert api.get("/admin/actors").status_code == 503


def test_explicit_policy_id_beyond_64_bits_is_400(live_api):
    result = post_trigger(live_api, {**TRIGGER, "policy_id": 2**70})

    assert result.status_code == 400
    assert result.json["errors"][0]["path"] == "policy_id"
