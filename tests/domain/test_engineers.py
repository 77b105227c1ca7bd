"""What the API and the command line share about engineers: the address that names one, the
record with its availability now, and the settings a change sets."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.engineers import (
    availability_changes,
    engineer_email,
    shown_engineer,
)
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.errors import InvalidInput

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)  # a Monday; 09:00 in Shanghai


def test_an_address_is_trimmed_and_lower_cased_and_anything_else_names_nobody():
    assert engineer_email(" Alice@Example.COM ") == "alice@example.com"
    assert engineer_email("a@b") is None
    assert engineer_email("") is None


def test_the_record_carries_its_availability_now():
    engineer = Engineer("a@x.com", timezone="Asia/Shanghai")
    away = [TimeOff(1, "a@x.com", NOW, datetime(2026, 12, 1, tzinfo=UTC), "vacation")]

    shown = shown_engineer(engineer, away, NOW)

    assert shown["email"] == "a@x.com" and shown["timezone"] == "Asia/Shanghai"
    assert shown["availability"] == {
        "available": False, "until": "2026-12-01T00:00:00.000Z",
        "reasons": ["on time off until Tue 2026-12-01 08:00 Asia/Shanghai (vacation)"]}


def test_a_change_sets_only_the_keys_given_read_with_the_stored_zone():
    stored = Engineer("a@x.com", timezone="Asia/Shanghai", max_open_issues=3)

    changes = availability_changes(stored, {"working_hours": {"mon": ["09:00-18:00"]}})

    assert changes == {"working_hours": {"mon": ["09:00-18:00"], "tue": [], "wed": [],
                                         "thu": [], "fri": [], "sat": [], "sun": []}}


def test_working_hours_on_an_engineer_shown_in_utc_are_read_in_utc_which_is_then_stored():
    """An engineer whose zone was never set shows ``"timezone": "UTC"``: their working hours
    are read in that zone, and it is stored as chosen, so the record keeps saying it."""
    never_set = Engineer("a@x.com")
    assert shown_engineer(never_set, [], NOW)["timezone"] == "UTC"

    changes = availability_changes(never_set, {"working_hours": {"mon": ["09:00-18:00"]}})

    assert changes["timezone"] == "UTC"
    assert changes["working_hours"]["mon"] == ["09:00-18:00"]
    # a change that sets no working hours leaves the zone as it is, and "any time" needs none
    assert availability_changes(never_set, {"max_open_issues": 2}) == {"max_open_issues": 2}
    assert availability_changes(never_set, {"working_hours": None}) == {"working_hours": None}
    # a zone chosen before is kept
    chosen = Engineer("a@x.com", timezone="Europe/Paris")
    assert "timezone" not in availability_changes(chosen, {"working_hours": {"mon": []}})


def test_working_hours_on_a_new_engineer_need_a_zone_in_the_same_change():
    with pytest.raises(InvalidInput) as raised:
        availability_changes(None, {"working_hours": {"mon": ["09:00-18:00"]}})

    assert [p.path for p in raised.value.problems] == ["timezone"]
    assert availability_changes(None, {"max_open_issues": 2}) == {"max_open_issues": 2}
