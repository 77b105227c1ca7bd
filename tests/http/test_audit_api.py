"""``GET /audit`` and the promise behind it: every endpoint that changes the service's
behaviour leaves a record naming who, how, what, and the values before and after."""

from __future__ import annotations

import json

import pytest

from tests.factories import policy_body
from tests.harness import rule
from tests.http.test_dispatch_api import post_trigger
from ticket_dispatcher.http.changes import CLIENT_HEADER
from ticket_dispatcher.http.openapi import document

WRITES = {"post", "put", "delete", "patch"}
# Operations that change no behaviour of the service: intake of work, and a check.
NOT_CHANGES = {
    ("post", "/dispatch/triggers"): "a trigger is work to do, recorded as the trigger itself",
    ("post", "/jira/webhooks"): "a delivery is work to do, recorded as its triggers",
    ("post", "/lark/card-actions"): "a press answers a page: recorded as the press itself "
                                    "and on its execution's timeline",
    ("post", "/dispatch/policies/validate"): "validation stores nothing",
}


def _audit(api, **params):
    answer = api.get("/audit", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json["records"]


def _make_policy(api, name="Audited"):
    made = api.post("/dispatch/policies", json=policy_body(name=name))
    assert made.status_code == 201, made.text
    return made.json["id"]


def test_a_created_policy_is_recorded_with_who_how_and_after(api):
    policy_id = _make_policy(api)
    [record] = _audit(api)
    assert record["actor"] == "operator-key" and record["via"] == "api"
    assert (record["action"], record["object_type"], record["object_id"]) == (
        "policy.created", "policy", str(policy_id))
    assert record["before"] is None and record["after"]["name"] == "Audited"
    assert set(record) == {"id", "at", "actor", "via", "action", "object_type", "object_id",
                           "before", "after"}


def test_activation_then_rollback_are_told_apart(api):
    first = _make_policy(api)
    api.post(f"/dispatch/policies/{first}/activate")
    second = api.post(f"/dispatch/policies/{first}/replacements",
                      json=policy_body(name="Audited")).json["id"]
    api.post(f"/dispatch/policies/{second}/activate")
    api.post(f"/dispatch/policies/{first}/activate")  # back to the first version
    actions = [(r["action"], r["object_id"], (r["before"] or {}).get("status"))
               for r in _audit(api, object_type="policy")]
    assert actions == [("policy.rolled_back", str(first), "superseded"),
                       ("policy.activated", str(second), "draft"),
                       ("policy.created", str(second), None),
                       ("policy.activated", str(first), "draft"),
                       ("policy.created", str(first), None)]


def test_an_engineer_change_keeps_before_and_after(api):
    api.put("/engineers/alice@example.com", json={"dispatch_enabled": True})
    api.put("/engineers/alice@example.com", json={"dispatch_enabled": False})
    [changed, created] = _audit(api, object_id="alice@example.com")
    assert created["before"] is None and created["after"]["dispatch_enabled"] is True
    assert changed["before"]["dispatch_enabled"] is True
    assert changed["after"]["dispatch_enabled"] is False


def test_the_command_line_is_recorded_as_cli(api):
    api.put("/engineers/bob@example.com", json={"dispatch_enabled": True},
            headers={CLIENT_HEADER: "cli"})
    assert [r["via"] for r in _audit(api)] == ["cli"]


def test_a_refused_change_leaves_no_record(api):
    assert api.delete("/engineers/nobody@example.com").status_code == 404
    assert api.post("/dispatch/policies/999/activate").status_code == 404
    assert _audit(api) == []


def test_reading_the_audit_needs_an_operator(api):
    _make_policy(api)
    assert api.as_role("viewer").get("/audit").status_code == 403
    assert api.as_role("automation").get("/audit").status_code == 403
    assert api.as_role(None).get("/audit").status_code == 401


def test_filters_cursor_and_jsonl_export(api):
    for name in ("One", "Two", "Three"):
        _make_policy(api, name)
    page = api.get("/audit", params={"limit": "2"}).json
    assert [r["after"]["name"] for r in page["records"]] == ["Three", "Two"]
    rest = api.get("/audit", params={"limit": "2", "cursor": page["next_cursor"]}).json
    assert [r["after"]["name"] for r in rest["records"]] == ["One"]
    assert rest["next_cursor"] is None

    export = api.get("/audit", params={"format": "jsonl"})
    assert export.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in export.text.splitlines()]
    assert [line["after"]["name"] for line in lines] == ["Three", "Two", "One"]
    assert _audit(api, actor="someone-else") == []


@pytest.mark.parametrize("params, named", [
    ({"since": "yesterday"}, "since"),
    ({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "until"),
    ({"format": "xml"}, "format"),
    ({"limit": "0"}, "limit"),
    ({"cursor": "not-ours"}, "cursor"),
])
def test_bad_query_is_400_naming_the_parameter(api, params, named):
    answer = api.get("/audit", params=params)
    assert answer.status_code == 400
    assert named in answer.text


def _examples(api, harness) -> dict[tuple[str, str], object]:
    """One valid call of each changing operation, in an order that makes each possible."""
    draft = _make_policy(api, "Draft")
    active = _make_policy(api, "Active")
    shadowed = _make_policy(api, "Shadowed")
    api.post(f"/dispatch/policies/{active}/activate")
    waits = harness.policy(rule("test_wait"))
    fails = harness.policy(rule("test_plan_fails"))
    post_trigger(api)
    harness.wait_idle()
    ran = {e["policy_id"]: e["id"] for e in api.get("/dispatch/executions").json["items"]}
    execution_id, failed_id = ran[waits.id], ran[fails.id]
    api.put("/engineers/carol@example.com", json={"dispatch_enabled": True})
    away = {"start": "2026-12-08T00:00:00Z", "end": "2026-12-09T00:00:00Z", "reason": "off"}
    quiet = {"scope": {"projects": ["NONE"]}, "end": "2099-01-01T00:00:00Z", "effect": "quiet",
             "start": "2098-12-31T12:00:00Z"}
    return {
        ("post", "/dispatch/policies"): lambda: api.post(
            "/dispatch/policies", json=policy_body(name="New")),
        ("put", "/dispatch/policies/{policy_id}"): lambda: api.put(
            f"/dispatch/policies/{draft}", json=policy_body(name="Draft")),
        ("post", "/dispatch/policies/{policy_id}/replacements"): lambda: api.post(
            f"/dispatch/policies/{active}/replacements", json=policy_body(name="Active")),
        ("post", "/dispatch/policies/{policy_id}/shadow"): lambda: api.post(
            f"/dispatch/policies/{shadowed}/shadow"),
        ("delete", "/dispatch/policies/{policy_id}/shadow"): lambda: api.delete(
            f"/dispatch/policies/{shadowed}/shadow"),
        ("post", "/dispatch/policies/{policy_id}/activate"): lambda: api.post(
            f"/dispatch/policies/{shadowed}/activate"),
        ("post", "/dispatch/policies/{policy_id}/deactivate"): lambda: api.post(
            f"/dispatch/policies/{shadowed}/deactivate"),
        ("delete", "/dispatch/policies/{policy_id}"): lambda: api.delete(
            f"/dispatch/policies/{draft}"),
        ("post", "/admin/executions/{execution_id}/cancel"): lambda: api.post(
            f"/admin/executions/{execution_id}/cancel"),
        ("post", "/dispatch/executions/{execution_id}/replay"): lambda: api.post(
            f"/dispatch/executions/{failed_id}/replay"),
        ("put", "/engineers/{email}"): lambda: api.put(
            "/engineers/dave@example.com", json={"dispatch_enabled": True}),
        ("post", "/engineers/{email}/time-off"): lambda: api.post(
            "/engineers/carol@example.com/time-off", json=away),
        ("delete", "/engineers/{email}/time-off/{entry_id}"): lambda: api.delete(
            "/engineers/carol@example.com/time-off/" + str(api.get(
                "/engineers/carol@example.com/time-off").json["items"][0]["id"])),
        ("delete", "/engineers/{email}"): lambda: api.delete("/engineers/carol@example.com"),
        ("delete", "/dispatch/contexts/{issue_key}"): lambda: api.delete(
            "/dispatch/contexts/TCID-1"),
        ("post", "/maintenance-windows"): lambda: api.post("/maintenance-windows", json=quiet),
        ("post", "/maintenance-windows/{window_id}/end"): lambda: api.post(
            f"/maintenance-windows/{api.get('/maintenance-windows').json['windows'][0]['id']}"
            "/end"),
    }


def test_every_operation_that_changes_state_leaves_a_record(live_api, harness):
    base = "/api/v1/ticketmanager"
    changing = {(method, path.removeprefix(base))
                for path, operations in document()["paths"].items()
                for method in operations if method in WRITES} - set(NOT_CHANGES)
    examples = _examples(live_api, harness)
    assert changing == set(examples), "give each new changing operation an example here"
    for operation, call in examples.items():
        before = len(_audit(live_api, limit="500"))
        answer = call()
        assert answer.status_code < 300, (operation, answer.status_code, answer.text)
        assert len(_audit(live_api, limit="500")) == before + 1, f"{operation} left no record"
