"""People-aware dispatch: whether an engineer is on time off, inside working hours (across
clock changes) or at capacity, and the verdicts an assign action chooses among. Reading the
settings and time off from JSON is test_availability_parsing.py's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ticket_dispatcher.domain.availability import (
    Availability,
    AvailabilitySettings,
    CandidateVerdict,
    TimeOff,
    Unavailable,
    WorkingHoursMode,
    at_capacity,
    availability_at,
    effective_cap,
    judge_candidates,
    next_working_moment,
    no_eligible_candidate_reason,
    on_time_off,
    outside_working_hours,
    preferred_first,
)
from ticket_dispatcher.domain.availability_parsing import parse_availability_settings

WEEKDAYS_9_TO_6 = {day: ["09:00-12:00", "13:00-18:00"] for day in ("mon", "tue", "wed", "thu",
                                                                    "fri")}
SAT_EVENING = datetime(2026, 12, 12, 20, 15, tzinfo=UTC)  # Sat 21:15 in Paris
MON_MORNING_PARIS = datetime(2026, 12, 14, 8, 0, tzinfo=UTC)  # Mon 09:00 in Paris
WED_MORNING = datetime(2026, 12, 9, 3, 0, tzinfo=UTC)  # Wed 11:00 in Shanghai


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0,
        second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def settings(timezone: str = "Europe/Paris", working_hours: dict | None = None,
             max_open_issues: int | None = None) -> AvailabilitySettings:
    body = {"timezone": timezone, "working_hours": working_hours,
            "max_open_issues": max_open_issues}
    parsed, problems = parse_availability_settings(body)
    assert problems == [] and parsed is not None
    return parsed


def time_off(start: datetime, end: datetime, reason: str = "",
             email: str = "a@x.com") -> TimeOff:
    return TimeOff(None, email, start, end, reason, "api")


# --- time off at a moment -------------------------------------------------------------------


def test_time_off_sentence_shows_its_end_in_the_engineers_zone():
    shanghai = settings("Asia/Shanghai")
    entries = [time_off(utc(2026, 12, 7, 1), utc(2026, 12, 9, 10), "vacation")]

    away = on_time_off(shanghai, entries, WED_MORNING)

    assert away is not None
    assert away.code is Unavailable.TIME_OFF
    assert away.sentence == "on time off until Wed 2026-12-09 18:00 Asia/Shanghai (vacation)"
    assert away.until == utc(2026, 12, 9, 10)


def test_time_off_start_is_inside_and_end_is_outside():
    entries = [time_off(utc(2026, 12, 7), utc(2026, 12, 8))]

    assert on_time_off(None, entries, utc(2026, 12, 7)) is not None
    assert on_time_off(None, entries, utc(2026, 12, 8)) is None
    assert on_time_off(None, entries, utc(2026, 12, 6, 23, 59)) is None


def test_back_to_back_and_overlapping_time_off_merge_into_one_until():
    entries = [  # unsorted on purpose
        time_off(utc(2026, 12, 10), utc(2026, 12, 12), "conference"),
        time_off(utc(2026, 12, 7), utc(2026, 12, 9), "vacation"),
        time_off(utc(2026, 12, 9), utc(2026, 12, 10, 12), "vacation"),  # starts where it ends
        time_off(utc(2026, 12, 14), utc(2026, 12, 15), "training"),  # after a gap: not merged
    ]

    away = on_time_off(None, entries, utc(2026, 12, 8))

    assert away is not None
    assert away.until == utc(2026, 12, 12)
    assert away.sentence == "on time off until Sat 2026-12-12 00:00 UTC (vacation, conference)"


def test_time_off_without_reason_and_without_profile_reads_in_utc():
    away = on_time_off(None, [time_off(utc(2026, 12, 7), utc(2026, 12, 9, 10))], WED_MORNING)

    assert away is not None
    assert away.sentence == "on time off until Wed 2026-12-09 10:00 UTC"


# --- working hours --------------------------------------------------------------------------


def test_outside_working_hours_names_local_time_and_next_start():
    paris = settings(working_hours=WEEKDAYS_9_TO_6)

    outside = outside_working_hours(paris, SAT_EVENING)

    assert outside is not None
    assert outside.code is Unavailable.OUTSIDE_WORKING_HOURS
    assert outside.sentence == ("outside working hours: Sat 21:15 in Europe/Paris; "
                                "next at Mon 09:00")
    assert outside.until == MON_MORNING_PARIS


def test_inside_working_hours_is_no_hindrance_and_bounds_are_start_inclusive():
    paris = settings(working_hours=WEEKDAYS_9_TO_6)

    assert outside_working_hours(paris, MON_MORNING_PARIS) is None
    assert outside_working_hours(paris, MON_MORNING_PARIS - timedelta(seconds=1)) is not None
    assert outside_working_hours(paris, utc(2026, 12, 14, 16, 59, 59)) is None  # 17:59:59
    assert outside_working_hours(paris, utc(2026, 12, 14, 17)) is not None  # 18:00
    lunch = outside_working_hours(paris, utc(2026, 12, 14, 11, 30))  # 12:30
    assert lunch is not None and lunch.sentence.endswith("; next at Mon 13:00")


def test_no_working_hours_means_any_time():
    assert outside_working_hours(settings(), SAT_EVENING) is None
    assert outside_working_hours(None, SAT_EVENING) is None


def test_never_working_has_no_next_start():
    outside = outside_working_hours(settings(working_hours={}), SAT_EVENING)

    assert outside is not None
    assert outside.until is None
    assert outside.sentence.endswith("; no working span in the next 14 days")


def test_next_start_a_week_ahead_is_dated():
    mondays = settings(working_hours={"mon": ["09:00-10:00"]})

    outside = outside_working_hours(mondays, utc(2026, 12, 14, 9, 30))  # Mon 10:30

    assert outside is not None
    assert outside.sentence == ("outside working hours: Mon 10:30 in Europe/Paris; "
                                "next at Mon 2026-12-21 09:00")


def test_working_hours_follow_the_wall_clock_across_spring_forward():
    # Europe/Paris, Sun 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00Z.
    paris = settings(working_hours={"sun": ["01:00-04:00"]})

    assert outside_working_hours(paris, utc(2026, 3, 28, 23, 59)) is not None  # 00:59 CET
    assert outside_working_hours(paris, utc(2026, 3, 29, 0, 0)) is None  # 01:00 CET
    assert outside_working_hours(paris, utc(2026, 3, 29, 1, 30)) is None  # 03:30 CEST
    late = outside_working_hours(paris, utc(2026, 3, 29, 2, 0))  # 04:00 CEST
    assert late is not None
    assert late.sentence == ("outside working hours: Sun 04:00 in Europe/Paris; "
                             "next at Sun 2026-04-05 01:00")
    assert late.until == utc(2026, 4, 4, 23)  # a week later, 01:00 CEST


def test_span_starting_in_the_skipped_hour_begins_when_the_clocks_jump():
    paris = settings(working_hours={"sun": ["02:30-04:00"]})

    outside = outside_working_hours(paris, utc(2026, 3, 28, 23))  # Sun 00:00 CET

    assert outside is not None
    assert outside.until == utc(2026, 3, 29, 1)  # 03:00 CEST, the first moment past 02:30
    assert outside.sentence.endswith("; next at Sun 03:00")
    assert outside_working_hours(paris, utc(2026, 3, 29, 1)) is None


def test_hour_repeated_at_fall_back_is_inside_both_times():
    # Europe/Paris, Sun 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00Z.
    paris = settings(working_hours={"sun": ["00:00-02:30"]})

    assert outside_working_hours(paris, utc(2026, 10, 25, 0, 15)) is None  # 02:15 CEST
    between = outside_working_hours(paris, utc(2026, 10, 25, 0, 45))  # 02:45 CEST
    assert between is not None
    assert between.until == utc(2026, 10, 25, 1)  # 02:00 CET, inside the span again
    assert outside_working_hours(paris, utc(2026, 10, 25, 1, 15)) is None  # 02:15 CET


def test_next_working_moment_after_clock_change_is_local_nine():
    paris = settings(working_hours={"mon": ["09:00-18:00"]})

    # Saturday before the change (CET) to the Monday after it (CEST).
    assert next_working_moment(paris, utc(2026, 3, 28, 12)) == utc(2026, 3, 30, 7)
    assert next_working_moment(paris, utc(2026, 3, 30, 7, 30)) == utc(2026, 3, 30, 7, 30)


def test_working_hours_in_a_half_hour_zone():
    kolkata = settings("Asia/Kolkata", working_hours={"mon": ["09:00-17:30"]})

    early = outside_working_hours(kolkata, utc(2026, 12, 7, 3, 29))  # Mon 08:59 IST
    assert early is not None
    assert early.sentence == ("outside working hours: Mon 08:59 in Asia/Kolkata; "
                              "next at Mon 09:00")
    assert early.until == utc(2026, 12, 7, 3, 30)
    assert outside_working_hours(kolkata, utc(2026, 12, 7, 3, 30)) is None  # 09:00 IST
    assert outside_working_hours(kolkata, utc(2026, 12, 7, 11, 59)) is None  # 17:29 IST
    assert outside_working_hours(kolkata, utc(2026, 12, 7, 12, 0)) is not None  # 17:30 IST


# --- capacity -------------------------------------------------------------------------------


def test_at_capacity_when_open_issues_reach_the_cap():
    full = at_capacity(5, 5)

    assert full is not None
    assert (full.code, full.sentence, full.until) == (
        Unavailable.AT_CAPACITY, "at capacity: 5 open issues, cap 5", None)
    assert at_capacity(4, 5) is None
    assert at_capacity(None, 5) is None
    assert at_capacity(7, None) is None
    one = at_capacity(1, 1)
    assert one is not None and one.sentence == "at capacity: 1 open issue, cap 1"


@pytest.mark.parametrize(("own", "action", "expected"), [
    (None, None, None), (5, None, 5), (None, 3, 3), (5, 3, 3), (2, 3, 2),
])
def test_effective_cap_is_the_smaller_of_engineer_and_action(own, action, expected):
    assert effective_cap(settings(max_open_issues=own), action) == expected


def test_effective_cap_without_profile_is_the_actions():
    assert effective_cap(None, 4) == 4
    assert effective_cap(None, None) is None


# --- overall availability -------------------------------------------------------------------


def test_available_now_has_no_reasons_and_no_until():
    state = availability_at(settings(working_hours=WEEKDAYS_9_TO_6), [], MON_MORNING_PARIS,
                            open_issues=2, cap=5)

    assert state == Availability(True)
    assert state.to_json() == {"available": True, "reasons": [], "codes": [], "until": None}


def test_until_is_the_first_working_moment_after_time_off():
    shanghai = settings("Asia/Shanghai", working_hours=WEEKDAYS_9_TO_6)
    entries = [time_off(utc(2026, 12, 7, 1), utc(2026, 12, 9, 10), "vacation")]  # to 18:00

    state = availability_at(shanghai, entries, WED_MORNING)

    assert state.available is False
    assert state.codes == (Unavailable.TIME_OFF,)  # Wed 11:00 is inside working hours
    assert state.until == utc(2026, 12, 10, 1)  # Thu 09:00 in Shanghai, not Wed 18:00
    assert state.to_json() == {
        "available": False,
        "reasons": ["on time off until Wed 2026-12-09 18:00 Asia/Shanghai (vacation)"],
        "codes": ["time_off"],
        "until": "2026-12-10T01:00:00.000Z",
    }


def test_time_off_ending_inside_working_hours_is_back_at_its_end():
    shanghai = settings("Asia/Shanghai", working_hours=WEEKDAYS_9_TO_6)
    entries = [time_off(utc(2026, 12, 7, 1), utc(2026, 12, 9, 7))]  # to Wed 15:00

    assert availability_at(shanghai, entries, WED_MORNING).until == utc(2026, 12, 9, 7)


def test_every_hindrance_is_reported_in_order():
    paris = settings(working_hours=WEEKDAYS_9_TO_6, max_open_issues=5)
    entries = [time_off(utc(2026, 12, 12), utc(2026, 12, 13), "moving")]

    state = availability_at(paris, entries, SAT_EVENING, open_issues=6)

    assert state.codes == (Unavailable.TIME_OFF, Unavailable.OUTSIDE_WORKING_HOURS,
                           Unavailable.AT_CAPACITY)
    assert state.reasons == (
        "on time off until Sun 2026-12-13 01:00 Europe/Paris (moving)",
        "outside working hours: Sat 21:15 in Europe/Paris; next at Mon 09:00",
        "at capacity: 6 open issues, cap 5",
    )
    assert state.until == MON_MORNING_PARIS


def test_working_hours_are_checked_only_when_asked():
    paris = settings(working_hours=WEEKDAYS_9_TO_6)

    assert availability_at(paris, [], SAT_EVENING, check_working_hours=False) == \
        Availability(True)
    assert availability_at(paris, [], SAT_EVENING).codes == (
        Unavailable.OUTSIDE_WORKING_HOURS,)


def test_capacity_alone_has_no_until():
    state = availability_at(None, [], SAT_EVENING, open_issues=3, cap=3)

    assert (state.available, state.codes, state.until) == (
        False, (Unavailable.AT_CAPACITY,), None)


def test_no_profile_is_available_any_time():
    assert availability_at(None, [], SAT_EVENING, open_issues=50) == Availability(True)


def test_naive_moment_is_refused():
    with pytest.raises(ValueError):
        availability_at(None, [], datetime(2026, 12, 12, 20, 15))


# --- judging candidates ---------------------------------------------------------------------

A, B, C, D = "a@x.com", "b@x.com", "c@x.com", "d@x.com"


def team() -> tuple[dict[str, AvailabilitySettings], dict[str, list[TimeOff]]]:
    """At SAT_EVENING: a is on time off (and asleep in Shanghai), b is outside hours in Paris,
    c works Saturday evenings, d has no profile."""
    profiles = {
        A: settings("Asia/Shanghai", working_hours=WEEKDAYS_9_TO_6),
        B: settings(working_hours=WEEKDAYS_9_TO_6, max_open_issues=4),
        C: settings(working_hours={"sat": ["18:00-23:00"]}, max_open_issues=2),
    }
    away = {A: [time_off(utc(2026, 12, 7, 1), utc(2026, 12, 14, 10), "vacation", A)]}
    return profiles, away


def judged(mode: str, **options) -> dict[str, CandidateVerdict]:
    profiles, away = team()
    verdicts = judge_candidates([A, B, C, D], profiles, away, SAT_EVENING,
                                working_hours=mode, **options)
    assert [verdict.email for verdict in verdicts] == [A, B, C, D]
    return {verdict.email: verdict for verdict in verdicts}


def test_ignore_mode_only_time_off_rules_out():
    verdicts = judged("ignore")

    assert {email: v.eligible for email, v in verdicts.items()} == {A: False, B: True,
                                                                     C: True, D: True}
    assert verdicts[A].reasons == (
        "on time off until Mon 2026-12-14 18:00 Asia/Shanghai (vacation)",)
    assert verdicts[B].reasons == ()
    assert all(v.preferred == v.eligible for v in verdicts.values())


def test_ignore_is_the_default_mode():
    profiles, away = team()

    verdicts = judge_candidates([B], profiles, away, SAT_EVENING)

    assert verdicts[0].eligible and verdicts[0].preferred


def test_required_mode_rules_out_those_outside_their_hours():
    verdicts = judged(WorkingHoursMode.REQUIRED)

    assert {email: v.eligible for email, v in verdicts.items()} == {A: False, B: False,
                                                                     C: True, D: True}
    assert verdicts[B].reasons == (
        "outside working hours: Sat 21:15 in Europe/Paris; next at Mon 09:00",)
    assert verdicts[B].codes == (Unavailable.OUTSIDE_WORKING_HOURS,)
    assert verdicts[B].until == MON_MORNING_PARIS


def test_preferred_mode_keeps_those_outside_hours_eligible_but_not_preferred():
    verdicts = judged("preferred")

    assert {email: (v.eligible, v.preferred) for email, v in verdicts.items()} == {
        A: (False, False), B: (True, False), C: (True, True), D: (True, True)}
    assert verdicts[B].reasons == (
        "outside working hours: Sat 21:15 in Europe/Paris; next at Mon 09:00",)


def test_capacity_uses_the_smaller_of_engineer_and_action_caps():
    counts = {B: 3, C: 2, D: 9}

    own_caps = judged("ignore", open_issues=counts)
    assert (own_caps[B].eligible, own_caps[C].eligible, own_caps[D].eligible) == (
        True, False, True)
    assert own_caps[C].reasons == ("at capacity: 2 open issues, cap 2",)

    action_cap = judged("ignore", open_issues=counts, cap=3)
    assert (action_cap[B].eligible, action_cap[C].eligible, action_cap[D].eligible) == (
        False, False, False)
    assert action_cap[B].reasons == ("at capacity: 3 open issues, cap 3",)
    assert action_cap[C].reasons == ("at capacity: 2 open issues, cap 2",)  # its own is lower
    assert action_cap[D].reasons == ("at capacity: 9 open issues, cap 3",)


def test_unknown_counts_are_not_held_at_capacity():
    assert judged("ignore", cap=1)[B].eligible is True


def test_unknown_working_hours_mode_is_refused():
    with pytest.raises(ValueError):
        judge_candidates([A], {}, {}, SAT_EVENING, working_hours="sometimes")


def test_verdict_json_for_the_execution_context():
    verdict = judged("required")[A]

    assert verdict.to_json() == {
        "email": A,
        "eligible": False,
        "preferred": False,
        "reasons": ["on time off until Mon 2026-12-14 18:00 Asia/Shanghai (vacation)",
                    "outside working hours: Sun 04:15 in Asia/Shanghai; next at Mon 09:00"],
        "codes": ["time_off", "outside_working_hours"],
        "until": "2026-12-15T01:00:00.000Z",  # Tue 09:00 in Shanghai, after the time off
    }


def test_preferred_first_puts_in_hours_candidates_first_keeping_order():
    verdicts = [CandidateVerdict(B, True, False), CandidateVerdict(A, False, False),
                CandidateVerdict(C, True, True), CandidateVerdict(D, True, False),
                CandidateVerdict("e@x.com", True, True)]

    assert [v.email for v in preferred_first(verdicts)] == [C, "e@x.com", B, D]


def test_preferred_first_keeps_order_when_none_is_in_hours():
    verdicts = [CandidateVerdict(D, True, False), CandidateVerdict(A, False, False),
                CandidateVerdict(B, True, False)]

    assert [v.email for v in preferred_first(verdicts)] == [D, B]


def test_failure_phrase_names_every_candidate_passed_over():
    profiles, away = team()
    verdicts = judge_candidates([A, B, C], profiles, away, SAT_EVENING, working_hours="required",
                                open_issues={A: 4, C: 2}, cap=4)

    assert preferred_first(verdicts) == []
    assert no_eligible_candidate_reason(verdicts) == (
        "no eligible candidate: "
        "a@x.com on time off until Mon 2026-12-14 18:00 Asia/Shanghai (vacation)"
        " and outside working hours: Sun 04:15 in Asia/Shanghai; next at Mon 09:00"
        " and at capacity: 4 open issues, cap 4; "
        "b@x.com outside working hours: Sat 21:15 in Europe/Paris; next at Mon 09:00; "
        "c@x.com at capacity: 2 open issues, cap 2"
    )


def test_failure_phrase_without_candidates():
    assert no_eligible_candidate_reason([]) == "no eligible candidate: no candidates"
