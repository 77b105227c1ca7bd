"""An engineer's availability through the API, on both engines: time zone, working hours and
cap on ``PUT /engineers/{email}``, ``availability`` as of now on ``GET``, and time off under
``/engineers/{email}/time-off``. The clock stands at Monday 2026-11-30 01:00 UTC."""

from __future__ import annotations

import pytest
from falcon import testing

from tests.http.conftest import API_KEYS, Api
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services

ALICE = "/engineers/alice@example.com"
SHANGHAI_DAY = {"mon": ["09:00-12:00", "13:00-18:00"], "tue": ["09:00-18:00"]}


@pytest.fixture
def api(store, clock) -> Api:
    """The API over each engine's store."""
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS})
    services = Services(store=store, config=config, clock=clock)
    return Api(testing.TestClient(create_app(services)), services)


def test_availability_settings_are_written_read_and_kept_when_left_out(api):
    created = api.put(ALICE, json={"dispatch_enabled": True, "timezone": "Asia/Shanghai",
                                   "working_hours": SHANGHAI_DAY, "max_open_issues": 5})
    renamed = api.put(ALICE, json={"dispatch_enabled": True, "display_name": "Alice"})

    assert created.status_code == 201
    read = api.get(ALICE).json
    assert renamed.json["timezone"] == read["timezone"] == "Asia/Shanghai"
    assert read["working_hours"]["mon"] == ["09:00-12:00", "13:00-18:00"]
    assert read["working_hours"]["wed"] == []  # a day left out is not worked
    assert read["max_open_issues"] == 5
    # Monday 09:00 in Shanghai: inside the first span
    assert read["availability"] == {"available": True, "reasons": [], "until": None}


def test_outside_working_hours_says_until_when_in_the_persons_zone(api):
    api.put(ALICE, json={"dispatch_enabled": True, "timezone": "Europe/Paris",
                         "working_hours": {"mon": ["09:00-17:00"]}})

    availability = api.get(ALICE).json["availability"]

    # 02:00 in Paris; back at 09:00 Paris, 08:00 UTC
    assert availability["available"] is False
    assert availability["until"] == "2026-11-30T08:00:00.000Z"
    assert availability["reasons"] == [
        "outside working hours: Mon 02:00 in Europe/Paris; next at Mon 09:00"]


def test_null_clears_working_hours_and_cap(api):
    api.put(ALICE, json={"dispatch_enabled": True, "timezone": "Europe/Paris",
                         "working_hours": {"mon": ["09:00-17:00"]}, "max_open_issues": 3})

    cleared = api.put(ALICE, json={"dispatch_enabled": True, "working_hours": None,
                                   "max_open_issues": None})

    assert cleared.json["working_hours"] is None
    assert cleared.json["max_open_issues"] is None
    assert cleared.json["timezone"] == "Europe/Paris"
    assert cleared.json["availability"]["available"] is True


@pytest.mark.parametrize("body,path,quoted", [
    ({"timezone": "Mars/Olympus_Mons"}, "timezone", '"Mars/Olympus_Mons"'),
    ({"timezone": "UTC", "working_hours": {"mon": ["09:00-25:00"]}}, "working_hours.mon[0]",
     '"09:00-25:00"'),
    ({"timezone": "UTC", "working_hours": {"monday": ["09:00-17:00"]}}, "working_hours.monday",
     '"monday"'),
    ({"timezone": "UTC", "working_hours": {"mon": ["09:00-12:00", "11:00-13:00"]}},
     "working_hours.mon[1]", '"11:00-13:00"'),
    ({"timezone": "UTC", "working_hours": {"mon": ["18:00-09:00"]}}, "working_hours.mon[0]",
     '"18:00-09:00"'),
    ({"max_open_issues": -1}, "max_open_issues", "-1"),
    ({"max_open_issues": 0}, "max_open_issues", "0"),
    ({"max_open_issues": "5"}, "max_open_issues", 'not "5"'),
    ({"max_open_issues": 1.0}, "max_open_issues", "not 1.0"),
    ({"max_open_issues": True}, "max_open_issues", "not true"),
    ({"timezone": 8}, "timezone", "not 8"),
    ({"working_hours": ["09:00-17:00"]}, "working_hours", "not an array"),
])
def test_bad_availability_is_a_400_naming_the_field_and_quoting_the_value(api, body, path,
                                                                          quoted):
    api.put(ALICE, json={"dispatch_enabled": True, "timezone": "Asia/Shanghai"})

    result = api.put(ALICE, json={"dispatch_enabled": True, **body})

    assert result.status_code == 400
    problems = result.json["errors"]
    assert [p["path"] for p in problems] == [path]
    assert quoted in problems[0]["message"]
    assert api.get(ALICE).json["timezone"] == "Asia/Shanghai"  # nothing written


def test_working_hours_are_read_in_the_zone_the_record_shows(api):
    """An engineer whose zone was never set shows ``"timezone": "UTC"``; working hours set on
    them are read in UTC, which is stored as chosen. A new engineer shows no zone yet: their
    working hours need one in the same request."""
    hours = {"mon": ["09:00-18:00"]}
    shown = api.put("/engineers/old@example.com", json={"dispatch_enabled": True})

    new = api.put(ALICE, json={"dispatch_enabled": True, "working_hours": hours})
    old = api.put("/engineers/old@example.com",
                  json={"dispatch_enabled": True, "working_hours": hours})
    moved = api.put("/engineers/old@example.com",
                    json={"dispatch_enabled": True, "timezone": "Europe/Paris"})

    assert shown.json["timezone"] == "UTC"
    assert new.status_code == 400 and [p["path"] for p in new.json["errors"]] == ["timezone"]
    assert old.status_code == 200
    assert (old.json["timezone"], old.json["working_hours"]["mon"]) == ("UTC", ["09:00-18:00"])
    # the hours stay where they were put, local to the zone set later
    assert moved.status_code == 200
    assert (moved.json["timezone"], moved.json["working_hours"]["mon"]) == (
        "Europe/Paris", ["09:00-18:00"])


def test_working_hours_are_answered_monday_first_on_either_engine(api):
    api.put(ALICE, json={"dispatch_enabled": True, "timezone": "UTC",
                         "working_hours": {"sun": ["10:00-12:00"], "fri": ["09:00-17:00"],
                                           "mon": ["09:00-17:00"]}})

    assert list(api.get(ALICE).json["working_hours"]) == [
        "mon", "tue", "wed", "thu", "fri", "sat", "sun"]


def test_back_to_back_time_off_says_the_day_the_engineer_is_back(api):
    api.put(ALICE, json={"dispatch_enabled": True, "timezone": "Asia/Tokyo"})
    for start, end, reason in (("2026-11-25", "2026-12-10", "a"), ("2026-12-10", "2026-12-20", "b"),
                               ("2026-12-20", "2027-01-25", "c")):
        api.post(f"{ALICE}/time-off", json={"start": f"{start}T00:00:00Z",
                                            "end": f"{end}T00:00:00Z", "reason": reason})

    away = api.get(ALICE).json["availability"]

    assert away["until"] == "2027-01-25T00:00:00.000Z"
    assert away["reasons"] == ["on time off until Mon 2027-01-25 09:00 Asia/Tokyo (a, b, c)"]


def test_time_off_is_added_listed_and_deleted_and_makes_the_engineer_unavailable(api):
    api.put(ALICE, json={"dispatch_enabled": True, "timezone": "Asia/Shanghai"})

    added = api.post(f"{ALICE}/time-off", json={
        "start": "2026-11-29T00:00:00+08:00", "end": "2026-12-02T18:00:00+08:00",
        "reason": "vacation"})
    listed = api.get(f"{ALICE}/time-off").json
    away = api.get(ALICE).json["availability"]
    deleted = api.delete(f"{ALICE}/time-off/{added.json['id']}")

    assert added.status_code == 201
    assert added.json["start"] == "2026-11-28T16:00:00.000Z"
    assert added.json["source"] == "api"
    assert [entry["id"] for entry in listed["items"]] == [added.json["id"]]
    assert away["available"] is False
    assert away["until"] == "2026-12-02T10:00:00.000Z"
    assert away["reasons"] == ["on time off until Wed 2026-12-02 18:00 Asia/Shanghai (vacation)"]
    assert deleted.status_code == 204
    assert api.get(ALICE).json["availability"]["available"] is True
    assert api.delete(f"{ALICE}/time-off/{added.json['id']}").status_code == 404


def test_past_time_off_is_listed_only_on_request(api):
    api.put(ALICE, json={"dispatch_enabled": True})
    api.post(f"{ALICE}/time-off", json={"start": "2026-11-01T00:00:00Z",
                                        "end": "2026-11-02T00:00:00Z"})
    api.post(f"{ALICE}/time-off", json={"start": "2026-12-24T00:00:00Z",
                                        "end": "2026-12-27T00:00:00Z"})

    upcoming = api.get(f"{ALICE}/time-off").json
    everything = api.get(f"{ALICE}/time-off", params={"past": "true"}).json

    assert [e["start"] for e in upcoming["items"]] == ["2026-12-24T00:00:00.000Z"]
    assert [e["start"] for e in everything["items"]] == ["2026-11-01T00:00:00.000Z",
                                                         "2026-12-24T00:00:00.000Z"]


@pytest.mark.parametrize("body,path", [
    ({"start": "2026-12-02T00:00:00Z", "end": "2026-12-01T00:00:00Z"}, "end"),
    ({"start": "2026-12-02T00:00:00", "end": "2026-12-03T00:00:00Z"}, "start"),
    ({"start": "tomorrow", "end": "2026-12-03T00:00:00Z"}, "start"),
    ({"end": "2026-12-03T00:00:00Z"}, "start"),
    # ISO 8601 forms that are no RFC 3339 time
    ({"start": "20261202T000000Z", "end": "2026-12-03T00:00:00Z"}, "start"),
    ({"start": "2026-W49-3T00:00:00Z", "end": "2026-12-03T00:00:00Z"}, "start"),
    ({"start": "2026-12-02T00:00Z", "end": "2026-12-03T00:00:00Z"}, "start"),
    ({"start": "2026-12-02T00:00:00+05:30:15", "end": "2026-12-03T00:00:00Z"}, "start"),
    ({"start": " 2026-12-02T00:00:00Z", "end": "2026-12-03T00:00:00Z"}, "start"),
])
def test_bad_time_off_is_a_400_and_stores_nothing(api, body, path):
    api.put(ALICE, json={"dispatch_enabled": True})

    result = api.post(f"{ALICE}/time-off", json=body)

    assert result.status_code == 400
    assert path in [p["path"] for p in result.json["errors"]]
    assert api.get(f"{ALICE}/time-off", params={"past": "true"}).json["total"] == 0


def test_time_off_of_an_unknown_engineer_is_a_404(api):
    result = api.post("/engineers/nobody@example.com/time-off",
                      json={"start": "2026-12-01T00:00:00Z", "end": "2026-12-02T00:00:00Z"})

    assert result.status_code == 404
    assert api.get("/engineers/nobody@example.com/time-off").status_code == 404


def test_viewers_read_time_off_and_operators_write_it(api):
    api.put(ALICE, json={"dispatch_enabled": True})
    viewer = api.as_role("viewer")
    body = {"start": "2026-12-01T00:00:00Z", "end": "2026-12-02T00:00:00Z"}

    assert viewer.post(f"{ALICE}/time-off", json=body).status_code == 403
    entry = api.post(f"{ALICE}/time-off", json=body).json
    assert viewer.get(f"{ALICE}/time-off").status_code == 200
    assert viewer.delete(f"{ALICE}/time-off/{entry['id']}").status_code == 403


def test_the_list_shows_each_engineers_availability(api):
    api.put(ALICE, json={"dispatch_enabled": True})
    api.put("/engineers/bob@example.com", json={"dispatch_enabled": True})
    api.post("/engineers/bob@example.com/time-off",
             json={"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T12:00:00Z"})

    items = api.get("/engineers").json["items"]

    assert [(e["email"], e["availability"]["available"]) for e in items] == [
        ("alice@example.com", True), ("bob@example.com", False)]
