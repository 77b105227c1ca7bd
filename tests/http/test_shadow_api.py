"""The shadow endpoints on both engines: start, stop and report a draft in shadow beside its
family's active version (docs/policies.md, "Shadow: try a change on live traffic").

The decisions a report counts are written here through the store (``record`` and ``settle``)
beside live executions the real runtime ran: the evaluation that produces them in service is
the runtime's, tested in tests/actors/test_shadow_runtime.py.
"""

from __future__ import annotations

import pytest
from falcon import testing

from tests.factories import policy_body
from tests.fakes import RecordingAction
from tests.harness import Harness, rule
from tests.http.conftest import API_KEYS, Api
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.domain.shadow import Decision
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.timeutil import format_time

SHADOW_KEYS = ("policy_id", "family_id", "shadowing", "started_at", "seen", "agreed",
               "differed", "pending", "dropped", "differences", "latest_differences")
NO_DIFFERENCES = {"no_match": 0, "other_rule": 0, "other_actions": 0, "other_assignee": 0}


@pytest.fixture
def services(store, clock) -> Services:
    """The API on each engine (the conftest's runs on SQLite only)."""
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS})
    return Services(store=store, config=config, clock=clock)


def create(api: Api, body: dict | None = None) -> dict:
    result = api.post("/dispatch/policies", json=body or policy_body())
    assert result.status_code == 201, result.json
    return result.json


def active_family(api: Api) -> tuple[dict, dict]:
    """An active version and a replacement draft of its family."""
    live = create(api)
    assert api.post(f"/dispatch/policies/{live['id']}/activate").status_code == 200
    draft = api.post(f"/dispatch/policies/{live['id']}/replacements",
                     json=policy_body(name="candidate"))
    assert draft.status_code == 201, draft.json
    return live, draft.json


def shadow_path(policy: dict | int) -> str:
    policy_id = policy if isinstance(policy, int) else policy["id"]
    return f"/dispatch/policies/{policy_id}/shadow"


# --- start, stop, read ----------------------------------------------------------------------


def test_starting_a_shadow_answers_201_with_the_empty_report_and_its_location(api, clock):
    live, draft = active_family(api)

    result = api.post(shadow_path(draft))

    assert result.status_code == 201, result.json
    assert result.headers["Location"] == f"/api/v1/ticketmanager{shadow_path(draft)}"
    assert tuple(result.json) == SHADOW_KEYS
    assert result.json == {
        "policy_id": draft["id"], "family_id": live["family_id"], "shadowing": True,
        "started_at": format_time(clock.now()), "seen": 0, "agreed": 0, "differed": 0,
        "pending": 0, "dropped": 0, "differences": NO_DIFFERENCES, "latest_differences": []}


def test_a_report_shows_the_shadow_until_it_is_stopped(api):
    _, draft = active_family(api)
    api.post(shadow_path(draft))

    shadowing = api.get(shadow_path(draft))
    stopped = api.delete(shadow_path(draft))
    after = api.get(shadow_path(draft))

    assert shadowing.status_code == 200 and shadowing.json["shadowing"] is True
    assert stopped.status_code == 204 and stopped.text == ""
    assert after.status_code == 200
    assert (after.json["shadowing"], after.json["started_at"]) == (False, None)


def test_a_policy_never_shadowed_reports_zero_counts(api):
    draft = create(api)

    result = api.get(shadow_path(draft))

    assert result.status_code == 200
    assert result.json == {
        "policy_id": draft["id"], "family_id": draft["family_id"], "shadowing": False,
        "started_at": None, "seen": 0, "agreed": 0, "differed": 0, "pending": 0, "dropped": 0,
        "differences": NO_DIFFERENCES, "latest_differences": []}


def test_a_stopped_shadow_can_be_started_again(api):
    _, draft = active_family(api)
    api.post(shadow_path(draft))
    api.delete(shadow_path(draft))

    again = api.post(shadow_path(draft))

    assert again.status_code == 201 and again.json["shadowing"] is True


def test_a_draft_of_a_family_with_no_active_version_can_be_shadowed(api):
    # It decides nothing until a version of its family is active; starting it is allowed.
    draft = create(api)

    assert api.post(shadow_path(draft)).status_code == 201


# --- refusals ---------------------------------------------------------------------------------


def test_a_family_has_at_most_one_shadow(api):
    live, draft = active_family(api)
    second = api.post(f"/dispatch/policies/{live['id']}/replacements",
                      json=policy_body(name="another")).json
    api.post(shadow_path(draft))

    result = api.post(shadow_path(second))

    assert result.status_code == 409 and result.json["code"] == "conflict"
    assert str(draft["id"]) in result.json["description"]
    assert api.get(shadow_path(second)).json["shadowing"] is False


def test_shadowing_the_same_draft_twice_is_a_conflict(api):
    _, draft = active_family(api)
    api.post(shadow_path(draft))

    result = api.post(shadow_path(draft))

    assert result.status_code == 409
    assert api.get(shadow_path(draft)).json["shadowing"] is True


@pytest.mark.parametrize("status", ["active", "superseded", "inactive"])
def test_only_a_draft_can_be_shadowed(api, status):
    live, draft = active_family(api)
    if status == "superseded":
        api.post(f"/dispatch/policies/{draft['id']}/activate")
    if status == "inactive":
        api.post(f"/dispatch/policies/{live['id']}/deactivate")
    assert api.get(f"/dispatch/policies/{live['id']}").json["status"] == status

    result = api.post(shadow_path(live))

    assert result.status_code == 409 and result.json["code"] == "conflict"
    assert status in result.json["description"]


def test_a_shadowed_draft_cannot_be_edited_or_deleted(api):
    _, draft = active_family(api)
    api.post(shadow_path(draft))

    edit = api.put(f"/dispatch/policies/{draft['id']}", json=policy_body(name="changed"))
    delete = api.delete(f"/dispatch/policies/{draft['id']}")

    assert (edit.status_code, delete.status_code) == (409, 409)
    assert "shadow" in edit.json["description"]
    assert api.get(f"/dispatch/policies/{draft['id']}").json["name"] == "candidate"


def test_a_stopped_shadow_leaves_the_draft_editable(api):
    _, draft = active_family(api)
    api.post(shadow_path(draft))
    api.delete(shadow_path(draft))

    edit = api.put(f"/dispatch/policies/{draft['id']}", json=policy_body(name="changed"))

    assert edit.status_code == 200 and edit.json["name"] == "changed"


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
def test_an_unknown_policy_is_404(api, method):
    result = api.request(method, shadow_path(999_999))

    assert result.status_code == 404 and result.json["code"] == "not_found"


def test_stopping_a_policy_not_in_shadow_is_404(api):
    draft = create(api)

    result = api.delete(shadow_path(draft))

    assert result.status_code == 404
    assert "not in shadow" in result.json["description"]


# --- activation ends the shadow ---------------------------------------------------------------


def test_activating_the_shadow_ends_it_and_is_the_ordinary_activation(api):
    live, draft = active_family(api)
    api.post(shadow_path(draft))

    activated = api.post(f"/dispatch/policies/{draft['id']}/activate")

    assert activated.status_code == 200 and activated.json["status"] == "active"
    assert api.get(f"/dispatch/policies/{live['id']}").json["status"] == "superseded"
    assert api.get(shadow_path(draft)).json["shadowing"] is False
    assert api.delete(shadow_path(draft)).status_code == 404


def test_after_the_shadow_is_activated_the_family_can_shadow_another_draft(api):
    _, draft = active_family(api)
    api.post(shadow_path(draft))
    api.post(f"/dispatch/policies/{draft['id']}/activate")
    following = api.post(f"/dispatch/policies/{draft['id']}/replacements",
                         json=policy_body(name="third")).json

    assert api.post(shadow_path(following)).status_code == 201


# --- roles --------------------------------------------------------------------------------------


def test_a_viewer_reads_the_report_but_cannot_start_or_stop_a_shadow(api):
    _, draft = active_family(api)
    viewer = api.as_role("viewer")

    start = viewer.post(shadow_path(draft))
    api.post(shadow_path(draft))
    stop = viewer.delete(shadow_path(draft))
    read = viewer.get(shadow_path(draft))

    assert (start.status_code, stop.status_code, read.status_code) == (403, 403, 200)
    assert read.json["shadowing"] is True


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
def test_the_automation_key_cannot_reach_shadows(api, method):
    _, draft = active_family(api)

    assert api.as_role("automation").request(method, shadow_path(draft)).status_code == 403


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
def test_shadows_need_a_key(api, method):
    _, draft = active_family(api)

    assert api.as_role(None).request(method, shadow_path(draft)).status_code == 401


# --- the report -----------------------------------------------------------------------------


@pytest.fixture
def harness(store):
    """The real runtime on each engine: live executions for decisions to stand beside."""
    h = Harness(store, RecordingAction("test_noop"), RecordingAction("test_wait", park_for=60))
    h.start()
    yield h
    h.stop()


@pytest.fixture
def live_api(harness) -> Api:
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS})
    services = Services(store=harness.store, config=config, clock=harness.clock,
                        runtime=harness.runtime)
    return Api(testing.TestClient(create_app(services)), services)


# What the shadow decides beside a live execution that matched "rule" and ran test_noop.
SHADOW_DECISIONS = {
    "agreed": Decision(["rule"], ["test_noop"]),
    "no_match": Decision(),
    "other_rule": Decision(["renamed"], ["test_noop"]),
    "other_actions": Decision(["rule"], ["test_noop", "test_noop"]),
    "other_assignee": Decision(["rule"], ["test_noop"], assignee="bob@example.com"),
}


def test_report_counts_agreement_and_each_kind_of_difference_newest_first(harness, live_api):
    live = harness.policy(rule("test_noop"))
    waiting = harness.policy(rule("test_wait"), projects=("WAIT",))
    draft = harness.store.policies.create_replacement(live.id, live.spec, now=harness.clock.now())
    # The live executions run before the shadow starts, so the runtime evaluates none itself.
    ended = {kind: harness.post_trigger("TCID-1").execution_ids[0]
             for kind in SHADOW_DECISIONS}
    [parked] = harness.post_trigger("TCID-1", policy_id=waiting.id).execution_ids
    assert live_api.post(shadow_path(draft.id)).status_code == 201
    for trigger_id, (kind, execution_id) in enumerate(ended.items(), start=1):
        record(harness, draft, trigger_id, execution_id, SHADOW_DECISIONS[kind])
    record(harness, draft, 99, parked, SHADOW_DECISIONS["agreed"])  # its live one still runs

    report = live_api.get(shadow_path(draft.id)).json

    assert (report["seen"], report["agreed"], report["differed"], report["pending"]) == \
        (6, 1, 4, 1)
    assert report["differences"] == {"no_match": 1, "other_rule": 1, "other_actions": 1,
                                     "other_assignee": 1}
    latest = report["latest_differences"]
    assert [case["kind"] for case in latest] == \
        ["other_assignee", "other_actions", "other_rule", "no_match"]
    assert [case["live_execution_id"] for case in latest] == \
        [ended[case["kind"]] for case in latest]
    first = latest[0]
    assert (first["issue_key"], first["trigger_id"]) == ("TCID-1", 5)
    assert first["live"] == {"matched_rules": ["rule"], "actions": ["test_noop"],
                             "assignee": None, "notification_steps": [], "error": ""}
    assert first["shadow"]["assignee"] == "bob@example.com"
    assert first["decided_at"].endswith("Z")


def test_a_pending_decision_is_judged_when_its_live_execution_ends(harness, live_api):
    live = harness.policy(rule("test_wait"))
    draft = harness.store.policies.create_replacement(live.id, live.spec, now=harness.clock.now())
    [execution_id] = harness.post_trigger("TCID-1").execution_ids
    live_api.post(shadow_path(draft.id))
    record(harness, draft, 1, execution_id, Decision(["renamed"], ["test_wait"]))
    before = live_api.get(shadow_path(draft.id)).json

    harness.advance(61)  # its wait ends, and so does the live execution
    ended = harness.execution(execution_id)
    harness.store.shadows.settle(ended, harness.clock.now())  # a no-op if already judged
    after = live_api.get(shadow_path(draft.id)).json

    assert ended.status is ExecutionStatus.SUCCEEDED

    assert (before["pending"], before["differed"]) == (1, 0)
    assert (after["pending"], after["differed"], after["differences"]["other_rule"]) == (0, 1, 1)


def test_the_report_lists_at_most_twenty_differing_cases(harness, live_api):
    live = harness.policy(rule("test_noop"))
    draft = harness.store.policies.create_replacement(live.id, live.spec, now=harness.clock.now())
    [execution_id] = harness.post_trigger("TCID-1").execution_ids
    for trigger_id in range(1, 23):
        record(harness, draft, trigger_id, execution_id, Decision())

    report = live_api.get(shadow_path(draft.id)).json

    assert report["differed"] == 22
    assert [case["trigger_id"] for case in report["latest_differences"]] == \
        list(range(22, 2, -1))


def record(harness, draft, trigger_id: int, execution_id: int, decision: Decision) -> None:
    harness.store.shadows.record(
        policy_id=draft.id, family_id=draft.family_id, trigger_id=trigger_id,
        issue_key="TCID-1", live_execution_id=execution_id, shadow=decision,
        now=harness.clock.now())
