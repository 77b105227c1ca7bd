"""Every error status the API answers for bad input, in the one error shape."""

from __future__ import annotations

import json

import pytest

from tests.factories import policy_body


def assert_error(result, status: int, code: str) -> dict:
    assert result.status_code == status, result.text
    body = result.json
    assert set(body) == {"code", "title", "description", "errors"}
    assert body["code"] == code
    assert "Traceback" not in result.text
    return body


def test_malformed_json_is_400(api):
    result = api.post("/dispatch/policies", body="{not json",
                      headers={"Content-Type": "application/json"})

    body = assert_error(result, 400, "validation_failed")
    assert "not valid JSON" in body["description"]


def test_wrong_types_are_400_with_a_path_each(api):
    body = policy_body(name=5, trigger={"enable": "yes"})

    result = api.post("/dispatch/policies", json=body)

    paths = {p["path"] for p in assert_error(result, 400, "validation_failed")["errors"]}
    assert {"name", "trigger.enable"} <= paths


def test_unknown_field_is_400(api):
    result = api.post("/dispatch/policies", json=policy_body(colour="blue"))

    errors = assert_error(result, 400, "validation_failed")["errors"]
    assert [p["path"] for p in errors] == ["colour"]


def test_body_that_is_not_an_object_is_400(api):
    result = api.post("/dispatch/policies", json=[1, 2])

    assert_error(result, 400, "validation_failed")


def test_missing_body_is_400(api):
    result = api.post("/dispatch/policies")

    assert_error(result, 400, "validation_failed")


def test_oversize_body_is_413_before_reading(api):
    api.services.config = api.services.config  # limit comes from config: 1 MiB by default
    big = json.dumps(policy_body(description="x" * (1024 * 1024 + 1)))

    result = api.post("/dispatch/policies", body=big,
                      headers={"Content-Type": "application/json"})

    assert_error(result, 413, "payload_too_large")
    assert api.get("/dispatch/policies").json["total"] == 0


def test_wrong_content_type_is_415(api):
    result = api.post("/dispatch/policies", body=json.dumps(policy_body()),
                      headers={"Content-Type": "text/plain"})

    assert_error(result, 415, "unsupported_media_type")


def test_missing_key_is_401(api):
    result = api.as_role(None).get("/dispatch/policies")

    assert_error(result, 401, "unauthorized")


def test_invalid_key_is_401_and_never_echoed(api):
    result = api.get("/dispatch/policies", headers={"X-API-KEY": "guess-123"})

    assert_error(result, 401, "unauthorized")
    assert "guess-123" not in result.text


@pytest.mark.parametrize("role,method,path", [
    ("viewer", "POST", "/dispatch/policies"),
    ("viewer", "PUT", "/engineers/a@example.com"),
    ("viewer", "DELETE", "/dispatch/contexts/TCID-1"),
    ("automation", "GET", "/dispatch/policies"),
    ("automation", "GET", "/engineers"),
])
def test_insufficient_role_is_403(api, role, method, path):
    result = api.as_role(role).request(method, path, json=policy_body())

    assert_error(result, 403, "forbidden")


def test_operator_can_do_what_a_viewer_can(api):
    assert api.as_role("operator").get("/dispatch/options").status_code == 200
    assert api.as_role("viewer").get("/dispatch/options").status_code == 200


def test_health_and_openapi_need_no_key(api):
    anonymous = api.as_role(None)

    assert anonymous.get("/healthz").status_code == 200
    assert anonymous.get("/openapi.json").status_code == 200


def test_unknown_route_is_404_in_the_error_shape(api):
    body = assert_error(api.get("/dispatch/nothing-here"), 404, "not_found")
    assert body["title"] == "Not Found"  # as every other error: the phrase, not the line


def test_unsupported_method_is_405_in_the_error_shape(api):
    body = assert_error(api.request("PATCH", "/dispatch/policies"), 405, "method_not_allowed")
    assert body["title"] == "Method Not Allowed"


@pytest.mark.parametrize("params", [
    {"limit": "0"}, {"limit": "201"}, {"limit": "ten"}, {"offset": "-1"}, {"status": "bogus"},
    # what Python's int() would take, but no client means as a plain number
    {"limit": "+5"}, {"limit": " 5"}, {"offset": "1_0"}, {"limit": "\u0665"}, {"limit": "\uff15"},
])
def test_bad_query_parameters_are_400(api, params):
    result = api.get("/dispatch/policies", params=params)

    body = assert_error(result, 400, "validation_failed")
    assert body["errors"][0]["path"] == next(iter(params))


def test_auth_can_be_switched_off_for_the_sandbox(services):
    from falcon import testing

    from ticket_dispatcher.http.app import create_app

    client = testing.TestClient(create_app(services, auth_enabled=False))

    assert client.simulate_get("/api/v1/ticketmanager/dispatch/policies").status_code == 200


HUGE = str(2**70)


@pytest.mark.parametrize("path,params", [
    ("/dispatch/policies", {"offset": HUGE}),
    ("/engineers", {"offset": HUGE}),
    ("/dispatch/executions", {"policy_id": HUGE}),
    ("/dispatch/executions", {"trigger_id": HUGE}),
])
def test_numbers_beyond_what_the_database_holds_are_400(api, path, params):
    result = api.get(path, params=params)

    assert_error(result, 400, "validation_failed")


@pytest.mark.parametrize("path", [f"/dispatch/policies/{HUGE}", f"/dispatch/triggers/{HUGE}",
                                  f"/dispatch/executions/{HUGE}", "/dispatch/policies/0"])
def test_ids_beyond_what_the_database_holds_are_404(api, path):
    assert_error(api.get(path), 404, "not_found")


def test_rule_priority_beyond_32_bits_is_400(api):
    body = policy_body()
    body["rules"][0]["priority"] = 2**40

    result = api.post("/dispatch/policies", json=body)

    errors = assert_error(result, 400, "validation_failed")["errors"]
    assert [p["path"] for p in errors] == ["rules[0].priority"]


@pytest.mark.parametrize("path, role", [("/dispatch/policies", "viewer"),
                                        ("/dispatch/policies/424242", "viewer"),
                                        ("/dispatch/policies", None)])
def test_every_answer_is_neither_sniffed_nor_cached(api, path, role):
    answer = api.as_role(role).get(path)

    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Cache-Control"] == "no-store"
