"""Availability settings and time off as a body or an engineer record gives them: what parses,
and every problem named by its path with the value quoted."""

from __future__ import annotations

import json

import pytest

from tests.domain.test_availability import WEEKDAYS_9_TO_6, settings, utc
from ticket_dispatcher.domain.availability import ANY_TIME, TimeOff
from ticket_dispatcher.domain.availability_parsing import (
    parse_availability_settings,
    parse_time_off,
    settings_from_engineer,
)
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.errors import InvalidInput, Problem


def problems_of(body: object, path: str = "") -> list[tuple[str, str]]:
    parsed, problems = parse_availability_settings(body, path)
    assert parsed is None
    return [(problem.path, problem.message) for problem in problems]


# --- settings -------------------------------------------------------------------------------


def test_settings_body_parses_into_zone_hours_and_cap():
    body = {"timezone": "Asia/Shanghai",
            "working_hours": {"mon": ["09:00-12:00", "13:00-18:00"], "sat": []},
            "max_open_issues": 5}

    parsed, problems = parse_availability_settings(body)

    assert problems == []
    assert parsed is not None
    assert parsed.timezone == "Asia/Shanghai" and parsed.zone.key == "Asia/Shanghai"
    assert parsed.max_open_issues == 5
    assert parsed.working_hours is not None
    assert [span.to_json() for span in parsed.working_hours.days[0]] == ["09:00-12:00",
                                                                          "13:00-18:00"]
    assert parsed.working_hours.days[1] == ()  # absent: a day off, as the empty "sat"


def test_working_hours_json_round_trips_in_normal_form():
    body = {"timezone": "Europe/Paris",
            "working_hours": {"fri": ["14:00-24:00", "00:00-06:00"], "mon": ["09:00-18:00"]},
            "max_open_issues": None}

    normal = settings(**body).to_json()

    assert normal == {
        "timezone": "Europe/Paris",
        "working_hours": {"mon": ["09:00-18:00"], "tue": [], "wed": [], "thu": [],
                          "fri": ["00:00-06:00", "14:00-24:00"], "sat": [], "sun": []},
        "max_open_issues": None,
    }
    again, problems = parse_availability_settings(json.loads(json.dumps(normal)))
    assert problems == [] and again is not None
    assert again == settings(**body)
    assert again.to_json() == normal


def test_absent_keys_mean_utc_any_time_no_cap():
    parsed, problems = parse_availability_settings({})

    assert problems == []
    assert parsed == ANY_TIME
    assert parsed.to_json() == {"timezone": "UTC", "working_hours": None,
                                "max_open_issues": None}


def test_empty_working_hours_object_is_never_working():
    never = settings(working_hours={})

    assert never.working_hours is not None
    assert never.working_hours.days == ((),) * 7


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc/passwd", "", "America",
                                  "Europe/Paris\x00", "/etc/localtime", "Europe//Paris",
                                  "utc", "zone.tab", "localtime", "a" * 300])
def test_unknown_time_zone_is_named_and_quoted(zone):
    [(path, message)] = problems_of({"timezone": zone})

    assert path == "timezone"
    assert message.startswith("unknown time zone \"")
    assert zone[:20].replace("\x00", "\\x00") in message


def test_non_string_time_zone_is_a_shape_problem():
    _, problems = parse_availability_settings({"timezone": 8})

    assert problems == [Problem("timezone", 'must be a string: an IANA time zone like '
                                            '"Europe/Paris"', "shape")]


def test_working_hours_need_a_time_zone():
    assert problems_of({"working_hours": WEEKDAYS_9_TO_6}) == [
        ("timezone", "is required with working hours, which are read in this zone")]


def test_unknown_weekday_key_is_named():
    assert problems_of({"timezone": "UTC", "working_hours": {"monday": ["09:00-18:00"]}}) == [
        ("working_hours.monday",
         'unknown weekday "monday"; use mon, tue, wed, thu, fri, sat, sun')]


@pytest.mark.parametrize(("span", "message"), [
    ("9:00-18:00", '"9:00-18:00" is not a span "HH:MM-HH:MM" like "09:00-18:00"'),
    ("09:00 - 18:00", '"09:00 - 18:00" is not a span "HH:MM-HH:MM" like "09:00-18:00"'),
    ("25:00-26:00", '"25:00-26:00" is not a span of times from 00:00 to 23:59 '
                    '(24:00 may end it)'),
    ("09:60-10:00", '"09:60-10:00" is not a span of times from 00:00 to 23:59 '
                    '(24:00 may end it)'),
    ("22:00-24:01", '"22:00-24:01" is not a span of times from 00:00 to 23:59 '
                    '(24:00 may end it)'),
    ("24:00-24:00", '"24:00-24:00" is not a span of times from 00:00 to 23:59 '
                    '(24:00 may end it)'),
    ("18:00-09:00", '"18:00-09:00": end before start; a span does not cross midnight '
                    '(split it at 24:00)'),
    ("09:00-09:00", '"09:00-09:00": end equals start; a span must not be empty'),
])
def test_malformed_span_is_named_by_path_and_quoted(span, message):
    body = {"timezone": "UTC", "working_hours": {"tue": ["07:00-08:00", span]}}

    assert problems_of(body) == [("working_hours.tue[1]", message)]


def test_full_day_span_is_accepted():
    assert settings(working_hours={"sun": ["00:00-24:00"]}).to_json()["working_hours"]["sun"] \
        == ["00:00-24:00"]


def test_overlapping_spans_are_named_both():
    body = {"timezone": "UTC", "working_hours": {"mon": ["11:00-13:00", "14:00-15:00",
                                                         "09:00-12:00", "14:30-14:45"]}}

    assert problems_of(body) == [
        ("working_hours.mon[2]", '"09:00-12:00" overlaps "11:00-13:00"'),
        ("working_hours.mon[3]", '"14:30-14:45" overlaps "14:00-15:00"'),
    ]


def test_touching_spans_do_not_overlap():
    hours = settings(working_hours={"mon": ["12:00-13:00", "09:00-12:00"]}).working_hours

    assert hours is not None
    assert [span.to_json() for span in hours.days[0]] == ["09:00-12:00", "12:00-13:00"]


def test_day_and_span_shapes_are_checked():
    body = {"timezone": "UTC", "working_hours": {"mon": "09:00-18:00", "tue": [9]}}

    assert problems_of(body) == [
        ("working_hours.mon", 'must be a list of "HH:MM-HH:MM" spans'),
        ("working_hours.tue[0]", 'must be a string like "09:00-18:00"'),
    ]
    assert problems_of({"working_hours": ["09:00-18:00"]}) == [
        ("working_hours", "must be an object of weekday keys, or null for any time")]


def test_too_many_spans_in_a_day():
    spans = [f"{hour:02d}:00-{hour:02d}:30" for hour in range(24)] + ["23:40-23:50"]

    assert problems_of({"timezone": "UTC", "working_hours": {"wed": spans}}) == [
        ("working_hours.wed", "has 25 spans; at most 24 a day")]


@pytest.mark.parametrize(("cap", "problem"), [
    (0, Problem("max_open_issues", "0 is not at least 1; use null for no cap", "rule")),
    (-3, Problem("max_open_issues", "-3 is not at least 1; use null for no cap", "rule")),
    (True, Problem("max_open_issues", "must be an integer, or null for no cap", "shape")),
    (5.0, Problem("max_open_issues", "must be an integer, or null for no cap", "shape")),
    ("5", Problem("max_open_issues", "must be an integer, or null for no cap", "shape")),
    (2**31, Problem("max_open_issues", "2147483648 is larger than 2147483647", "shape")),
])
def test_cap_must_be_a_positive_integer(cap, problem):
    _, problems = parse_availability_settings({"max_open_issues": cap})

    assert problems == [problem]


def test_problems_sit_under_the_given_path_and_unknown_keys_are_named():
    body = {"timezone": "UTC", "working_hours": {"mon": ["09:00-12:00", "11:00-13:00"]},
            "holidays": []}

    assert problems_of(body, "availability") == [
        ("availability.holidays", "unknown key"),
        ("availability.working_hours.mon[1]", '"11:00-13:00" overlaps "09:00-12:00"'),
    ]
    assert problems_of([], "availability") == [("availability", "must be a JSON object")]


def test_settings_come_from_an_engineer_record():
    engineer = Engineer("a@x.com", timezone="Asia/Kolkata",
                        working_hours={"mon": ["09:00-18:00"]}, max_open_issues=3)

    loaded = settings_from_engineer(engineer)

    assert loaded.to_json()["working_hours"]["mon"] == ["09:00-18:00"]
    assert (loaded.timezone, loaded.max_open_issues) == ("Asia/Kolkata", 3)
    assert settings_from_engineer(Engineer("b@x.com")) == ANY_TIME
    with pytest.raises(InvalidInput) as raised:
        settings_from_engineer(Engineer("c@x.com", timezone="Gone/Away"))
    assert raised.value.problems[0].path == "timezone"


# --- time off -------------------------------------------------------------------------------


def test_time_off_body_parses_to_utc():
    body = {"start": "2026-12-07T09:00:00+08:00", "end": "2026-12-09T10:00:00Z",
            "reason": "vacation"}

    entry, problems = parse_time_off(body, "a@x.com")

    assert problems == []
    assert entry == TimeOff(None, "a@x.com", utc(2026, 12, 7, 1), utc(2026, 12, 9, 10),
                            "vacation", "api")
    assert entry.to_json() == {"id": None, "email": "a@x.com",
                               "start": "2026-12-07T01:00:00.000Z",
                               "end": "2026-12-09T10:00:00.000Z",
                               "reason": "vacation", "source": "api"}


def test_time_off_reason_is_optional_and_source_is_the_callers():
    entry, problems = parse_time_off({"start": "2026-12-07T00:00:00Z",
                                      "end": "2026-12-08T00:00:00Z"}, "a@x.com",
                                     source="hr-calendar")

    assert problems == [] and entry is not None
    assert (entry.reason, entry.source) == ("", "hr-calendar")


@pytest.mark.parametrize(("body", "problem"), [
    ({"start": "2026-12-07T09:00:00", "end": "2026-12-08T00:00:00Z"},
     Problem("start", '"2026-12-07T09:00:00" has no UTC offset; RFC 3339 times need \'Z\' or '
                      "'+HH:MM'")),
    ({"start": "next monday", "end": "2026-12-08T00:00:00Z"},
     Problem("start", '"next monday" is not an RFC 3339 time')),
    ({"start": 1765000000, "end": "2026-12-08T00:00:00Z"},
     Problem("start", 'must be an RFC 3339 time like "2026-12-01T09:00:00+08:00"', "shape")),
    ({"start": "2026-12-08T08:00:00+08:00", "end": "2026-12-08T00:00:00Z"},
     Problem("end", '"2026-12-08T00:00:00Z" is not after start "2026-12-08T08:00:00+08:00"')),
    ({"start": "2026-12-08T00:00:00Z", "end": "2026-12-07T00:00:00Z"},
     Problem("end", '"2026-12-07T00:00:00Z" is not after start "2026-12-08T00:00:00Z"')),
    ({"start": "2026-12-08T00:00:00Z", "end": "9999-12-31T23:00:00-05:00"},
     Problem("end", '"9999-12-31T23:00:00-05:00" is not between 1970-01-01 and 9999-01-01')),
    ({"start": "2026-12-08T00:00:00Z", "end": "2026-12-09T00:00:00Z", "reason": 7},
     Problem("reason", "must be a string", "shape")),
    ({"start": "2026-12-08T00:00:00Z", "end": "2026-12-09T00:00:00Z", "reason": "x" * 501},
     Problem("reason", f'"{"x" * 100}"… is 501 characters long; at most 500')),
    ({"start": "2026-12-08T00:00:00Z"}, Problem("end", "missing key", "shape")),
    ({"start": "2026-12-08T00:00:00Z", "end": "2026-12-09T00:00:00Z", "id": 4},
     Problem("id", "is assigned by the server", "shape")),
    ({"start": "2026-12-08T00:00:00Z", "end": "2026-12-09T00:00:00Z", "note": ""},
     Problem("note", "unknown key", "shape")),
])
def test_time_off_problem_names_field_and_quotes_value(body, problem):
    entry, problems = parse_time_off(body, "a@x.com")

    assert entry is None
    assert problems == [problem]


def test_time_off_reason_of_500_characters_is_accepted():
    entry, problems = parse_time_off({"start": "2026-12-08T00:00:00Z",
                                      "end": "2026-12-09T00:00:00Z", "reason": "x" * 500},
                                     "a@x.com")

    assert problems == [] and entry is not None
