"""Maintenance windows in the domain: reading one from JSON, its state and occurrences, and
which window rules a piece of work (the strictest)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ticket_dispatcher.domain.maintenance import (
    Effect,
    Every,
    InEffect,
    MaintenanceWindow,
    Recurrence,
    Scope,
    WindowState,
    in_effect,
    parse_window,
)

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def window(window_id, effect, scope, start=NOW - HOUR, end=NOW + HOUR, recurrence=None):
    return MaintenanceWindow(window_id, scope, "", start, end, effect, recurrence)


def test_hold_is_stricter_than_quiet_where_windows_overlap():
    windows = [window(1, Effect.QUIET, Scope(all=True), end=NOW + 5 * HOUR),
               window(2, Effect.HOLD, Scope(projects=("OPS",)))]

    assert in_effect(windows, "OPS", "jira_automation", [], NOW) == InEffect(
        Effect.HOLD, 2, NOW + HOUR)
    assert in_effect(windows, "WEB", "jira_automation", [], NOW) == InEffect(
        Effect.QUIET, 1, NOW + 5 * HOUR)


@pytest.mark.parametrize(("scope", "covered"), [
    (Scope(projects=("OPS",)), True),
    (Scope(projects=("WEB",)), False),
    (Scope(sources=("jira_automation",)), True),
    (Scope(sources=("jira_webhook",)), False),
    (Scope(policies=("night shift",)), True),
    (Scope(policies=("day shift",)), False),
    (Scope(all=True), True),
])
def test_a_window_rules_the_work_its_scope_names(scope, covered):
    found = in_effect([window(1, Effect.QUIET, scope)], "OPS", "jira_automation",
                      ["night shift"], NOW)

    assert (found is not None) is covered


def test_a_window_rules_nothing_before_its_start_or_from_its_end():
    ahead = window(1, Effect.HOLD, Scope(all=True), NOW + HOUR, NOW + 2 * HOUR)
    over = window(2, Effect.HOLD, Scope(all=True), NOW - 2 * HOUR, NOW)
    ended = MaintenanceWindow(3, Scope(all=True), "", NOW - HOUR, NOW + HOUR, Effect.HOLD,
                              ended_at=NOW - timedelta(minutes=1))

    assert in_effect([ahead, over, ended], "OPS", "s", [], NOW) is None
    assert [w.state(NOW) for w in (ahead, over, ended)] == [
        WindowState.PLANNED, WindowState.ENDED, WindowState.ENDED]


def test_a_daily_window_is_current_during_each_occurrence_until_its_until():
    daily = window(1, Effect.QUIET, Scope(all=True), NOW, NOW + HOUR,
                   Recurrence(Every.DAILY, NOW + 2 * DAY))

    assert daily.state(NOW + timedelta(minutes=30)) is WindowState.CURRENT
    assert daily.state(NOW + 2 * HOUR) is WindowState.PLANNED
    assert daily.occurrence(NOW + DAY + timedelta(minutes=5)) == (NOW + DAY, NOW + DAY + HOUR)
    assert daily.state(NOW + 2 * DAY + timedelta(minutes=59)) is WindowState.CURRENT
    assert daily.state(NOW + 2 * DAY + HOUR) is WindowState.ENDED
    assert daily.last_end == NOW + 2 * DAY + HOUR


def test_a_weekly_window_skips_the_days_between():
    weekly = window(1, Effect.HOLD, Scope(all=True), NOW, NOW + HOUR,
                    Recurrence(Every.WEEKLY, NOW + 30 * DAY))

    assert weekly.state(NOW + DAY) is WindowState.PLANNED
    assert weekly.state(NOW + 7 * DAY) is WindowState.CURRENT


def test_a_window_is_read_with_start_now_when_left_out():
    made, problems = parse_window(
        {"scope": {"projects": ["OPS"], "sources": ["jira_automation"]}, "reason": "upgrade",
         "end": "2026-12-07T10:00:00Z", "effect": "hold"}, NOW, DAY)

    assert problems == []
    assert made is not None
    assert made.start == NOW and made.end == NOW + HOUR
    assert made.scope == Scope(projects=("OPS",), sources=("jira_automation",))


def test_a_recurring_window_is_read():
    made, problems = parse_window(
        {"scope": {"all": True}, "start": "2026-12-07T22:00:00+01:00",
         "end": "2026-12-07T23:00:00+01:00", "effect": "quiet",
         "recurrence": {"every": "weekly", "until": "2027-01-31T00:00:00Z"}}, NOW, DAY)

    assert problems == []
    assert made is not None and made.recurrence == Recurrence(
        Every.WEEKLY, datetime(2027, 1, 31, tzinfo=UTC))
    assert made.start == datetime(2026, 12, 7, 21, tzinfo=UTC)


@pytest.mark.parametrize(("changes", "field"), [
    ({"end": "2026-12-07T08:00:00Z"}, "end"),
    ({"start": "2026-12-07T10:00:00Z", "end": "2026-12-07T09:30:00Z"}, "end"),
    ({"end": "2026-12-09T09:00:00Z"}, "end"),
    ({"end": "tomorrow"}, "end"),
    ({"scope": {}}, "scope"),
    ({"scope": {"projects": [], "policies": []}}, "scope"),
    ({"scope": {"projects": [""]}}, "scope.projects[0]"),
    ({"scope": {"teams": ["a"]}}, "scope.teams"),
    ({"scope": {"all": False}}, "scope"),
    ({"scope": {"all": True, "projects": ["OPS"]}}, "scope"),
    ({"effect": "silence"}, "effect"),
    ({"reason": 5}, "reason"),
    ({"recurrence": {"every": "hourly", "until": "2027-01-01T00:00:00Z"}},
     "recurrence.every"),
    ({"recurrence": {"every": "daily"}}, "recurrence.until"),
    ({"recurrence": {"every": "daily", "until": "2026-12-01T00:00:00Z"}}, "recurrence.until"),
    ({"id": 4}, "id"),
])
def test_bad_input_names_its_field(changes, field):
    body = {"scope": {"projects": ["OPS"]}, "end": "2026-12-07T10:00:00Z", "effect": "hold",
            **changes}

    made, problems = parse_window(body, NOW, DAY)

    assert made is None
    assert field in [problem.path for problem in problems]


@pytest.mark.parametrize("missing", ["scope", "end", "effect"])
def test_a_window_lacking_a_required_key_is_refused(missing):
    body = {"scope": {"projects": ["OPS"]}, "end": "2026-12-07T10:00:00Z", "effect": "hold"}
    del body[missing]

    made, problems = parse_window(body, NOW, DAY)

    assert made is None and [p.path for p in problems] == [missing]
