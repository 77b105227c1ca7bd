"""The burden report's rules: bands in the person's own hours, eligible time, percentiles,
the period and scope asked for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ticket_dispatcher.domain.availability import AvailabilitySettings, Span, TimeOff, WorkingHours
from ticket_dispatcher.domain.burden import (
    Availabilities,
    Band,
    BurdenData,
    BurdenQuery,
    Membership,
    Tally,
    band_of,
    build_report,
    eligible_hours,
    percentiles,
)
from ticket_dispatcher.domain.burden_events import BurdenKind, rotation_key
from ticket_dispatcher.errors import InvalidInput

MONDAY = datetime(2026, 11, 30, tzinfo=UTC)
UTC_ANY = AvailabilitySettings()
NIGHT_SHIFT = AvailabilitySettings("UTC", WorkingHours(tuple(
    (Span(22 * 60, 1440),) for _ in range(7))))
BERLIN_DAY = AvailabilitySettings("Europe/Berlin", WorkingHours(tuple(
    (Span(9 * 60, 17 * 60),) if day < 5 else () for day in range(7))))


@pytest.mark.parametrize("settings, moment, band", [
    (UTC_ANY, MONDAY + timedelta(hours=9), Band.BUSINESS),  # 08:00–18:00 on a weekday
    (UTC_ANY, MONDAY + timedelta(hours=19), Band.OFF),
    (UTC_ANY, MONDAY + timedelta(hours=23), Band.SLEEP),
    (UTC_ANY, MONDAY + timedelta(hours=7, minutes=59), Band.SLEEP),
    (UTC_ANY, MONDAY + timedelta(days=5, hours=12), Band.OFF),  # Saturday noon
    (NIGHT_SHIFT, MONDAY + timedelta(hours=23), Band.BUSINESS),  # their hours win over sleep
    (NIGHT_SHIFT, MONDAY + timedelta(hours=12), Band.OFF),  # set hours replace 08:00–18:00
    (BERLIN_DAY, MONDAY + timedelta(hours=8), Band.BUSINESS),  # 09:00 in Berlin
    (BERLIN_DAY, MONDAY + timedelta(hours=21, minutes=30), Band.SLEEP),  # 22:30 in Berlin
])
def test_a_moment_falls_in_the_band_of_the_persons_own_hours(settings, moment, band):
    assert band_of(moment, settings) is band


def test_eligible_time_leaves_out_time_off_and_when_required_the_hours_outside_work():
    week = (MONDAY, MONDAY + timedelta(days=7))
    away = [TimeOff(None, "a@x.io", MONDAY + timedelta(hours=10), MONDAY + timedelta(hours=12)),
            TimeOff(None, "a@x.io", MONDAY + timedelta(hours=11), MONDAY + timedelta(hours=13))]

    assert eligible_hours(*week, UTC_ANY, [], within_hours=True) == 168
    assert eligible_hours(*week, UTC_ANY, away, within_hours=False) == 165
    assert eligible_hours(*week, BERLIN_DAY, [], within_hours=True) == 40
    # 10:00–13:00 UTC is 11:00–14:00 in Berlin, inside Monday's 09:00–17:00
    assert eligible_hours(*week, BERLIN_DAY, away, within_hours=True) == 37
    assert eligible_hours(*week, BERLIN_DAY, away, within_hours=False) == 165


def test_working_hours_keep_their_wall_clock_across_a_clock_change():
    # Berlin leaves summer time on 2026-10-25: 09:00–17:00 is 07:00–15:00 UTC before,
    # 08:00–16:00 after; ten working days of 8 hours either way
    week = (datetime(2026, 10, 19, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))

    assert eligible_hours(*week, BERLIN_DAY, [], within_hours=True) == 80


def test_percentiles_interpolate_and_are_null_without_a_sample():
    assert percentiles([]) == {"p50": None, "p90": None}
    assert percentiles([10.0, 20.0, 30.0, 40.0, 50.0]) == {"p50": 30.0, "p90": 46.0}


def test_the_default_period_is_the_last_28_days_and_bad_ones_name_their_parameter():
    query = BurdenQuery.of(None, None, MONDAY)
    assert (query.since, query.until) == (MONDAY - timedelta(days=28), MONDAY)
    with pytest.raises(InvalidInput) as backwards:
        BurdenQuery.of(MONDAY, MONDAY - timedelta(seconds=1), MONDAY)
    with pytest.raises(InvalidInput) as too_long:
        BurdenQuery.of(MONDAY - timedelta(days=401), MONDAY, MONDAY)
    with pytest.raises(InvalidInput) as two:
        BurdenQuery.of(None, None, MONDAY, policy="p", project="OPS")
    assert [backwards.value.problems[0].path, too_long.value.problems[0].path,
            two.value.problems[0].path] == ["from", "to", "project"]


def test_a_rotation_with_a_member_never_eligible_gives_them_no_share():
    query = BurdenQuery.of(MONDAY, MONDAY + timedelta(days=7), MONDAY)
    away = [TimeOff(None, "b@x.io", MONDAY - timedelta(days=1), MONDAY + timedelta(days=8))]
    data = BurdenData(tallies=[Tally(BurdenKind.ASSIGNMENT, "a@x.io", 4, "pf_1", "group:sre"),
                               Tally(BurdenKind.ASSIGNMENT, "c@x.io", 4, "pf_1", "group:sre")])
    data.memberships.append(Membership("group:sre", ("a@x.io", "b@x.io", "c@x.io")))
    report = build_report(query, data, policy_names={"pf_1": "Assign"},
                          people=Availabilities({}, {"b@x.io": away}), complete_from=None)

    [rotation] = report["rotations"]
    assert [(m["email"], m["eligible_hours"], m["fair_share"]) for m in rotation["members"]] == [
        ("a@x.io", 168, 4.0), ("b@x.io", 0, 0), ("c@x.io", 168, 4.0)]
    assert (rotation["cv"], rotation["policy"]) == (0.0, "Assign")


def test_an_uneven_rotation_gives_the_spread_of_assigned_over_fair_share():
    # three members, equally eligible: fair 4 each; ratios 2.0, 0.75, 0.25
    query = BurdenQuery.of(MONDAY, MONDAY + timedelta(days=7), MONDAY)
    data = BurdenData(tallies=[Tally(BurdenKind.ASSIGNMENT, email, count, "pf_1", "group:sre")
                               for email, count in (("a@x.io", 8), ("b@x.io", 3),
                                                    ("c@x.io", 1))])
    report = build_report(query, data, policy_names={}, people=Availabilities({}, {}),
                          complete_from=None)

    [rotation] = report["rotations"]
    # population standard deviation sqrt((1 + 0.0625 + 0.5625) / 3) = 0.736 over the mean 1.0
    assert (rotation["cv"], rotation["max_over_fair"], rotation["min_over_fair"]) == (
        0.736, 2.0, 0.25)


def test_a_receiver_is_named_by_its_type_and_value():
    assert rotation_key({"type": "group", "group": "sre"}) == "group:sre"
    assert rotation_key({"type": "users", "users": ["a@x.io", "b@x.io"]}) == "users:a@x.io,b@x.io"
    assert rotation_key(None) == ""
