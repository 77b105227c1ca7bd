"""Hostile input over the API: never a 500, never a freeze, the same on both engines.

Each test asserts the status code and that ``/healthz`` still answers promptly afterwards.
Bodies are sent as ASCII JSON text (``\\u0000``, ``\\udfff`` escapes): valid JSON that a
client can send, but text that PostgreSQL cannot store.
"""

from __future__ import annotations

import json
import logging
import random
import time

import pytest
from falcon import testing

from tests.factories import policy_body
from tests.http.conftest import API_KEYS, KEYS, Api
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.issues import ISSUE_KEY
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.contexts import checked_issue_key
from ticket_dispatcher.http.ratelimit import TokenBuckets
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.safejson import json_depth_exceeds, parse_json
from ticket_dispatcher.sandbox.control import parse_issue

JSON = {"Content-Type": "application/json"}
DEEP = 1000  # about where json.loads used to raise RecursionError


def make_api(store, clock, **environ: str) -> Api:
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS, **environ})
    services = Services(store=store, config=config, clock=clock)
    return Api(testing.TestClient(create_app(services)), services)


@pytest.fixture
def engine_api(store, clock) -> Api:
    """The API over each engine (SQLite, and PostgreSQL when configured)."""
    return make_api(store, clock)


def send(api: Api, method: str, path: str, document) -> testing.Result:
    """``document`` as ASCII JSON: control characters and lone surrogates as escapes."""
    return api.request(method, path, body=json.dumps(document), headers=JSON)


def assert_healthy(api: Api) -> None:
    started = time.monotonic()
    result = api.get("/healthz")
    assert result.status_code == 200
    assert time.monotonic() - started < 1.0


def assert_400(result: testing.Result, *paths: str) -> list[dict]:
    assert result.status_code == 400, result.text
    assert result.json["code"] == "validation_failed"
    errors = result.json["errors"]
    assert [error["path"] for error in errors] == list(paths)
    return errors


# --- control characters and lone surrogates (item 2) -------------------------------------------


def test_nul_in_engineer_fields_is_400_and_nothing_is_stored(engine_api):
    body = {"dispatch_enabled": True, "display_name": "Ann\x00", "jira_account_id": "acc\x00-1"}

    result = send(engine_api, "PUT", "/engineers/ann@example.com", body)

    errors = assert_400(result, "display_name", "jira_account_id")
    assert "U+0000 (a control character)" in errors[0]["message"]
    assert engine_api.get("/engineers").json["total"] == 0
    assert_healthy(engine_api)


def test_nul_in_engineer_email_path_is_400_and_nothing_is_stored(engine_api):
    result = send(engine_api, "PUT", "/engineers/ann%00@example.com", {"dispatch_enabled": True})

    errors = assert_400(result, "email")
    assert "U+0000" in errors[0]["message"]
    assert engine_api.get("/engineers").json["total"] == 0
    assert_healthy(engine_api)


def test_lone_surrogate_in_display_name_is_400(engine_api):
    result = send(engine_api, "PUT", "/engineers/ann@example.com",
                  {"dispatch_enabled": True, "display_name": "Ann \udfff"})

    errors = assert_400(result, "display_name")
    assert "U+DFFF (a lone surrogate)" in errors[0]["message"]
    assert_healthy(engine_api)


def test_a_surrogate_pair_is_ordinary_text(engine_api):
    result = send(engine_api, "PUT", "/engineers/ann@example.com",
                  {"dispatch_enabled": True, "display_name": "Ann \U0001f600"})

    assert result.status_code == 201
    assert result.json["display_name"] == "Ann \U0001f600"
    assert_healthy(engine_api)


def test_nul_in_policy_text_is_400_with_every_path(engine_api):
    body = policy_body(name="Assign\x00", description="desc\x00")
    body["trigger"]["issue_label_all"] = ["auto\x00"]
    body["rules"][0]["then"][0]["assign"]["receiver"]["users"][1] = "b\x00@example.com"

    result = send(engine_api, "POST", "/dispatch/policies", body)

    assert_400(result, "name", "description", "trigger.issue_label_all[0]",
               "rules[0].then[0].assign.receiver.users[1]")
    assert engine_api.get("/dispatch/policies").json["total"] == 0
    assert_healthy(engine_api)


def test_control_characters_in_condition_values_anywhere_in_when_are_400(engine_api):
    body = policy_body()
    body["rules"][0]["when"] = {"all": [
        {"field": "issue.priority", "operator": "in", "values": ["P0"]},
        {"any": [{"not": {"field": "issue.summary", "operator": "contains",
                          "value": "down\x1b[31m"}}]},
    ]}

    result = send(engine_api, "POST", "/dispatch/policies", body)

    errors = assert_400(result, "rules[0].when.all[1].any[0].not.value")
    assert "U+001B" in errors[0]["message"]
    assert_healthy(engine_api)


@pytest.mark.parametrize("control", ["\u202e", "\u2066", "\u202a"])
def test_a_bidirectional_override_in_a_name_is_400_so_nobody_reads_it_reversed(engine_api,
                                                                              control):
    result = send(engine_api, "PUT", "/engineers/alice@example.com",
                  {"dispatch_enabled": True, "display_name": f"Alice{control}nimda"})

    errors = assert_400(result, "display_name")
    assert f"U+{ord(control):04X} (a bidirectional control)" in errors[0]["message"]
    assert engine_api.put("/engineers/alice@example.com", json={
        "dispatch_enabled": True, "display_name": "\u0623\u0644\u064a\u0633 \u200f"}
                          ).status_code == 201  # right-to-left text itself is welcome
    assert_healthy(engine_api)


def test_a_bad_object_key_is_400_at_its_path_written_safely(engine_api):
    result = send(engine_api, "POST", "/dispatch/policies/validate",
                  policy_body(**{"na\x00me\udfff": "x"}))

    assert_400(result, "na\\u0000me\\udfff")
    assert_healthy(engine_api)


def test_description_and_triage_fields_may_hold_lines_and_tabs(engine_api):
    text = "first line\n\tindented\r\nlast"
    body = policy_body(description=text)
    body["rules"][0]["then"].append(
        {"type": "triage", "triage": {"fields": {"customfield_10001": {"value": text}}}})

    result = send(engine_api, "POST", "/dispatch/policies", body)

    assert result.status_code == 201, result.text
    stored = engine_api.get(f"/dispatch/policies/{result.json['id']}").json
    assert stored["description"] == text
    assert stored["rules"][0]["then"][1]["triage"]["fields"]["customfield_10001"]["value"] == text
    assert_healthy(engine_api)


@pytest.mark.parametrize("where", ["name", "rules[0].name", "label"])
def test_line_breaks_in_single_line_text_are_400(engine_api, where):
    body = policy_body()
    if where == "name":
        body["name"] = "two\nlines"
    elif where == "rules[0].name":
        body["rules"][0]["name"] = "tab\there"
    else:
        body["trigger"]["issue_label_all"] = ["a\rb"]
        where = "trigger.issue_label_all[0]"

    result = send(engine_api, "POST", "/dispatch/policies", body)

    assert_400(result, where)
    assert_healthy(engine_api)


def test_nul_in_a_triage_field_value_is_400_even_though_lines_are_allowed(engine_api):
    body = policy_body()
    body["rules"][0]["then"] = [{"type": "triage", "triage": {"fields": {"cf": "a\x00b"}}}]

    result = send(engine_api, "POST", "/dispatch/policies", body)

    assert_400(result, "rules[0].then[0].triage.fields.cf")
    assert_healthy(engine_api)


def test_only_the_first_ten_offending_strings_are_reported(engine_api):
    body = policy_body()
    body["trigger"]["project_key_in"] = [f"P{n}\x00" for n in range(25)]

    result = send(engine_api, "POST", "/dispatch/policies", body)

    assert_400(result, *[f"trigger.project_key_in[{n}]" for n in range(10)])
    assert_healthy(engine_api)


@pytest.mark.parametrize(("field", "path"), [
    ({"source": "jira\x00automation"}, "source"),
    ({"input": {"issue_key": "TCID-1\x00"}}, "input.issue_key"),
    ({"dryrun": {"overwrite_data": {"now": "2024-05-01T00:00:00Z\x00"}}},
     "dryrun.overwrite_data.now"),
])
def test_nul_in_a_trigger_is_400(engine_api, field, path):
    body = {"source": "jira_automation", "input": {"issue_key": "TCID-1"}, **field}

    result = send(engine_api.as_role("automation"), "POST", "/dispatch/triggers", body)

    assert_400(result, path)
    assert_healthy(engine_api)


@pytest.mark.parametrize(("path", "name"), [
    ("/dispatch/policies?family_id=%00", "family_id"),
    ("/dispatch/policies?status=active%00", "status"),
    ("/dispatch/executions?issue_key=TCID-1%00", "issue_key"),
    ("/dispatch/executions?status=%ED%A0%80%00", "status"),
    ("/engineers?dispatch_enabled=true%0A", "dispatch_enabled"),
    ("/engineers?x%01=1", "x\\u0001"),
])
def test_control_characters_in_query_parameters_are_400(engine_api, path, name):
    route, query = path.split("?")

    result = engine_api.client.simulate_get(
        f"/api/v1/ticketmanager{route}", query_string=query,
        headers={"X-API-KEY": KEYS["operator"]})

    assert_400(result, name)
    assert_healthy(engine_api)


def test_control_characters_in_path_parameters_are_400(engine_api):
    assert_400(engine_api.get("/dispatch/contexts/TCID-1%00"), "issue_key")
    assert_400(engine_api.delete("/engineers/a%1F@example.com"), "email")
    assert_healthy(engine_api)


def test_parameters_are_judged_only_after_authentication(engine_api):
    result = engine_api.as_role(None).get("/dispatch/policies", params={"family_id": "\x00"})

    assert result.status_code == 401
    assert_healthy(engine_api)


# --- JSON depth and numbers (item 2) ------------------------------------------------------------


@pytest.mark.parametrize(("path", "role"), [("/dispatch/triggers", "automation"),
                                            ("/dispatch/policies/validate", "operator"),
                                            ("/dispatch/policies", "operator")])
@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_a_body_nested_a_thousand_deep_is_400(api, path, role, opening):
    closing = "]" if opening == "[" else "}"
    text = opening * DEEP + "1" + closing * DEEP

    result = api.as_role(role).post(path, body=text, headers=JSON)

    assert result.status_code == 400, result.text
    assert result.json["description"] == "the body nests deeper than 64 levels"
    assert_healthy(api)


def test_the_depth_limit_is_configured(sqlite_store, clock):
    api = make_api(sqlite_store, clock, TICKET_DISPATCHER_HTTP_MAX_JSON_DEPTH="8")
    within = policy_body(description="x")
    within["rules"][0]["when"] = {"all": [{"not": {"field": "issue.priority", "operator": "in",
                                                   "values": ["P0"]}}]}  # 8 levels
    beyond = policy_body()
    beyond["rules"][0]["when"] = {"all": [{"not": within["rules"][0]["when"]}]}

    assert api.post("/dispatch/policies/validate", json=within).status_code == 200
    result = api.post("/dispatch/policies/validate", json=beyond)

    assert result.status_code == 400
    assert result.json["description"] == "the body nests deeper than 8 levels"
    assert_healthy(api)


def test_brackets_inside_strings_do_not_count_as_depth(api):
    body = policy_body(description='[{"\\' * 500, name="[" * 200)

    result = api.post("/dispatch/policies/validate", json=body)

    assert result.status_code == 200, result.text
    assert_healthy(api)


def test_no_body_reaches_recursion_error():
    for text in ("[" * 200_000, '{"a":' * 100_000, '["\\"' + "[" * 100_000):
        with pytest.raises(InvalidInput):
            parse_json(text.encode(), max_depth=512)


def _random_document(rng: random.Random, depth: int):
    kind = rng.choice(["list", "dict", "str", "num"] if depth < 12 else ["str", "num"])
    if kind == "list":
        return [_random_document(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "dict":
        return {_random_text(rng): _random_document(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    return _random_text(rng) if kind == "str" else rng.randint(-5, 5)


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice('[]{}"\\ab\u00e9\n') for _ in range(rng.randint(0, 6)))


def _true_depth(value) -> int:
    if isinstance(value, list):
        return 1 + max((_true_depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_true_depth(item) for item in value.values()), default=0)
    return 0


def test_the_depth_scan_agrees_with_the_parsed_depth():
    rng = random.Random(8)
    for _ in range(400):
        document = _random_document(rng, 0)
        depth = _true_depth(document)
        for text in (json.dumps(document), json.dumps(document, ensure_ascii=False, indent=1)):
            for cap in range(13):
                assert json_depth_exceeds(text, cap) == (depth > cap), (text, cap)


@pytest.mark.parametrize("number", ["NaN", "-Infinity", "1e400", "1" * 5000])
def test_numbers_json_cannot_hold_are_400(engine_api, number):
    text = json.dumps(policy_body()).replace('"priority": 10', f'"priority": {number}')

    result = engine_api.post("/dispatch/policies", body=text, headers=JSON)

    assert result.status_code == 400, result.text
    assert "not valid JSON" in result.json["description"]
    assert engine_api.get("/dispatch/policies").json["total"] == 0
    assert_healthy(engine_api)


def test_invalid_utf8_is_400(api):
    result = api.post("/dispatch/policies", body=b'{"name": "\xed\xbf\xbf"}', headers=JSON)

    assert result.status_code == 400
    assert "not valid UTF-8" in result.json["description"]
    assert_healthy(api)


# --- issue keys and anchored patterns (item 3) -------------------------------------------------


def test_issue_key_with_a_trailing_newline_is_400(engine_api):
    trigger = {"source": "jira_automation", "input": {"issue_key": "TCID-1\n"}}

    result = send(engine_api.as_role("automation"), "POST", "/dispatch/triggers", trigger)

    assert_400(result, "input.issue_key")
    assert_400(engine_api.get("/dispatch/contexts/TCID-1%0A"), "issue_key")
    assert_healthy(engine_api)


@pytest.mark.parametrize("text", ["TCID-1\n", "TCID-1\r", " TCID-1", "TCID-1 ", "TCID-01"])
def test_issue_keys_match_whole(text):
    assert ISSUE_KEY.fullmatch(text) is None and ISSUE_KEY.match(text) is None
    with pytest.raises(InvalidInput):
        checked_issue_key(text)
    with pytest.raises(InvalidInput):
        parse_issue({"key": text})


def test_a_source_with_a_trailing_newline_is_refused_by_its_pattern():
    from ticket_dispatcher.http.dispatch import _bind_trigger

    with pytest.raises(InvalidInput) as caught:
        _bind_trigger({"source": "jira_automation\n", "input": {"issue_key": "TCID-1"}})

    assert [p.path for p in caught.value.problems] == ["source"]


# --- throttled authentication failures (item 5) -------------------------------------------------


def wrong_key(api: Api, address: str = "10.0.0.1", key: str | None = "guess-123"):
    headers = {"X-API-KEY": key} if key is not None else {}
    return api.client.simulate_get("/api/v1/ticketmanager/engineers", headers=headers,
                                   remote_addr=address)


def test_repeated_failures_from_one_address_get_429_with_retry_after(api, caplog):
    caplog.set_level(logging.DEBUG)
    statuses = [wrong_key(api, key=None if n % 2 else "guess-123").status_code
                for n in range(10)]

    throttled = wrong_key(api)

    assert statuses == [401] * 10
    assert throttled.status_code == 429
    assert throttled.json["code"] == "rate_limited"
    assert throttled.headers["Retry-After"] == "10"  # one attempt per 10 s by default
    assert "guess-123" not in caplog.text and "guess-123" not in throttled.text
    assert_healthy(api)


def test_a_correct_key_is_never_throttled(api):
    for _ in range(12):
        wrong_key(api, address="10.0.0.1")

    good = api.client.simulate_get("/api/v1/ticketmanager/engineers", remote_addr="10.0.0.1",
                                   headers={"X-API-KEY": KEYS["viewer"]})
    other_address = wrong_key(api, address="10.0.0.2")

    assert wrong_key(api, address="10.0.0.1").status_code == 429
    assert good.status_code == 200
    assert other_address.status_code == 401
    assert_healthy(api)


def test_the_failure_bucket_refills(api, clock):
    for _ in range(11):
        wrong_key(api)

    clock.advance(9)
    still = wrong_key(api)
    clock.advance(11)
    again = wrong_key(api)

    assert (still.status_code, again.status_code) == (429, 401)
    assert_healthy(api)


def test_the_failure_throttle_can_be_turned_off(sqlite_store, clock):
    api = make_api(sqlite_store, clock, TICKET_DISPATCHER_AUTH_FAILURE_RATE="0")

    assert {wrong_key(api).status_code for _ in range(30)} == {401}
    assert_healthy(api)


def test_tracked_addresses_are_bounded(clock):
    buckets = TokenBuckets(0.1, 1, clock.now, max_keys=3)

    for n in range(10):
        buckets.take(f"10.0.0.{n}")
    waits = [buckets.take(f"10.0.0.{n}") for n in (7, 8, 9)]

    assert len(buckets) == 3
    assert all(wait > 0 for wait in waits)  # the most recent addresses are remembered
