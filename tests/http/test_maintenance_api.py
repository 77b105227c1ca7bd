"""Maintenance windows through the API, on both engines: created with a state from the clock,
listed by state, ended early, audited; bad input is a 400 naming the field and stores
nothing. The clock stands at Monday 2026-11-30 01:00 UTC."""

from __future__ import annotations

import pytest
from falcon import testing

from tests.http.conftest import API_KEYS, Api
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services

WINDOWS = "/maintenance-windows"
OPS_HOLD = {"scope": {"projects": ["OPS"]}, "reason": "database migration",
            "end": "2026-11-30T02:00:00Z", "effect": "hold"}


@pytest.fixture
def api(store, clock) -> Api:
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS})
    services = Services(store=store, config=config, clock=clock)
    return Api(testing.TestClient(create_app(services)), services)


def test_a_window_starting_now_is_current_and_ends_on_its_own(api, clock):
    made = api.post(WINDOWS, json=OPS_HOLD)

    assert made.status_code == 201, made.text
    assert made.json["state"] == "current"
    assert made.json["start"] == "2026-11-30T01:00:00.000Z"
    assert made.json["scope"] == {"projects": ["OPS"]}
    assert made.headers["Location"].endswith(f"{WINDOWS}/{made.json['id']}")
    clock.advance(hours=1)
    [listed] = api.get(WINDOWS).json["windows"]
    assert listed["id"] == made.json["id"] and listed["state"] == "ended"


def test_windows_are_listed_by_state(api, clock):
    current = api.post(WINDOWS, json={**OPS_HOLD, "effect": "quiet"}).json
    planned = api.post(WINDOWS, json={
        "scope": {"all": True}, "start": "2026-12-01T22:00:00Z", "end": "2026-12-01T23:00:00Z",
        "effect": "quiet", "recurrence": {"every": "weekly", "until": "2027-01-31T00:00:00Z"},
    }).json

    def listed(state):
        answer = api.get(WINDOWS, params={"state": state})
        assert answer.status_code == 200, answer.text
        return [window["id"] for window in answer.json["windows"]]

    assert planned["state"] == "planned"
    assert planned["recurrence"] == {"every": "weekly", "until": "2027-01-31T00:00:00.000Z"}
    assert listed("current") == [current["id"]]
    assert listed("planned") == [planned["id"]]
    assert listed("ended") == []
    assert api.as_role("viewer").get(WINDOWS).status_code == 200


def test_an_operator_ends_a_window_early_and_both_changes_are_audited(api, clock):
    made = api.post(WINDOWS, json=OPS_HOLD).json
    clock.advance(minutes=10)

    ended = api.post(f"{WINDOWS}/{made['id']}/end")

    assert ended.status_code == 200, ended.text
    assert ended.json["state"] == "ended"
    assert ended.json["ended_at"] == "2026-11-30T01:10:00.000Z"
    assert api.post(f"{WINDOWS}/{made['id']}/end").status_code == 409
    assert api.post(f"{WINDOWS}/{made['id'] + 1}/end").status_code == 404
    records = api.get("/audit", params={"object_type": "maintenance_window"}).json["records"]
    assert [r["action"] for r in records] == ["maintenance_window.ended",
                                              "maintenance_window.created"]
    assert records[0]["object_id"] == str(made["id"])
    assert records[0]["before"]["state"] == "current"
    assert records[0]["after"]["state"] == "ended"
    assert records[1]["actor"] == "operator-key" and records[1]["after"]["effect"] == "hold"


def test_a_viewer_cannot_create_or_end_a_window(api):
    made = api.post(WINDOWS, json=OPS_HOLD).json
    viewer = api.as_role("viewer")

    assert viewer.post(WINDOWS, json=OPS_HOLD).status_code == 403
    assert viewer.post(f"{WINDOWS}/{made['id']}/end").status_code == 403


@pytest.mark.parametrize(("changes", "field"), [
    ({"end": "2026-11-30T00:30:00Z"}, "end"),  # before the start (now)
    ({"start": "2026-11-30T03:00:00Z"}, "end"),  # end before start
    ({"end": "2026-12-01T01:00:01Z"}, "end"),  # over maintenance.max_duration
    ({"scope": {}}, "scope"),
    ({"scope": {"projects": [], "sources": []}}, "scope"),
    ({"effect": "mute"}, "effect"),
    ({"effect": None}, "effect"),
    ({"start": "yesterday"}, "start"),
])
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(api, changes, field):
    answer = api.post(WINDOWS, json={**OPS_HOLD, **changes})

    assert answer.status_code == 400, answer.text
    assert field in [problem["path"] for problem in answer.json["errors"]]
    assert api.get(WINDOWS).json["windows"] == []
    assert api.get("/audit").json["records"] == []


def test_an_unknown_state_is_a_400(api):
    answer = api.get(WINDOWS, params={"state": "over"})

    assert answer.status_code == 400 and "state" in answer.text


def test_the_longest_window_follows_the_configured_maximum(store, clock):
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
                                        "TICKET_DISPATCHER_MAINTENANCE_MAX_DURATION": "30m"})
    api = Api(testing.TestClient(create_app(Services(store=store, config=config,
                                                     clock=clock))), None)

    answer = api.post(WINDOWS, json=OPS_HOLD)

    assert answer.status_code == 400
    assert "maintenance.max_duration" in answer.text
