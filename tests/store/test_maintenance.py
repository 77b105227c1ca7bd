"""Maintenance windows in the store, on both engines: kept and read back, listed by state,
ended early with the triggers they hold made due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ticket_dispatcher.domain.execution import TriggerStatus
from ticket_dispatcher.domain.maintenance import (
    Effect,
    Every,
    MaintenanceWindow,
    Recurrence,
    Scope,
    WindowState,
)
from ticket_dispatcher.errors import Conflict, NotFound

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
OPS = Scope(projects=("OPS",))


def window(start=NOW, end=NOW + HOUR, effect=Effect.HOLD, scope=OPS,
           recurrence=None):
    return MaintenanceWindow(None, scope, "db migration", start, end, effect, recurrence,
                             created_at=NOW)


def test_a_window_round_trips(store):
    made = store.maintenance.add(window(recurrence=Recurrence(Every.DAILY, NOW + 3 * 24 * HOUR)))

    assert made.id is not None
    assert store.maintenance.get(made.id) == made
    assert made.scope == OPS
    assert made.recurrence == Recurrence(Every.DAILY, NOW + 3 * 24 * HOUR)
    assert made.to_json(NOW)["state"] == "current"


def test_windows_are_listed_by_state(store):
    planned = store.maintenance.add(window(NOW + 2 * HOUR, NOW + 3 * HOUR))
    current = store.maintenance.add(window(NOW - HOUR, NOW + HOUR, Effect.QUIET))
    ended = store.maintenance.add(window(NOW - 3 * HOUR, NOW - 2 * HOUR))

    listed = store.maintenance.listed
    assert [w.id for w in listed(NOW)] == [planned.id, current.id, ended.id]
    assert [w.id for w in listed(NOW, WindowState.PLANNED)] == [planned.id]
    assert [w.id for w in listed(NOW, WindowState.CURRENT)] == [current.id]
    assert [w.id for w in listed(NOW, WindowState.ENDED)] == [ended.id]
    assert [w.id for w in store.maintenance.active(NOW)] == [current.id]
    assert store.maintenance.counts(NOW, HOUR) == (1, 0)
    assert store.maintenance.counts(NOW, timedelta(minutes=30)) == (1, 1)


def test_a_recurring_window_is_active_between_its_occurrences(store):
    daily = store.maintenance.add(window(NOW - 2 * HOUR, NOW - HOUR,
                                         recurrence=Recurrence(Every.DAILY, NOW + 48 * HOUR)))

    assert [w.id for w in store.maintenance.active(NOW)] == [daily.id]
    assert store.maintenance.get(daily.id).state(NOW) is WindowState.PLANNED
    assert store.maintenance.get(daily.id).state(NOW + 22 * HOUR) is WindowState.CURRENT


def test_ending_a_window_early_makes_the_triggers_it_holds_due(store):
    made = store.maintenance.add(window())
    held = store.triggers.create("jira_automation", "OPS-1", policy_id=None, dryrun=None,
                                 now=NOW)
    store.triggers.hold(held.id, made.id, NOW + HOUR, NOW)
    assert store.triggers.due(NOW) == []
    assert store.triggers.get(held.id).held

    ended = store.maintenance.end(made.id, NOW + timedelta(minutes=10))

    assert ended.state(NOW + timedelta(minutes=10)) is WindowState.ENDED
    assert store.maintenance.get(made.id).ended_at == NOW + timedelta(minutes=10)
    assert store.maintenance.active(NOW + timedelta(minutes=10)) == []
    assert store.triggers.due(NOW + timedelta(minutes=10)) == [(held.id, "jira_automation")]
    trigger = store.triggers.get(held.id)
    assert trigger.status is TriggerStatus.PENDING
    assert trigger.to_json()["maintenance_window_id"] == made.id


def test_a_claimed_held_trigger_carries_its_window(store):
    made = store.maintenance.add(window())
    trigger = store.triggers.create("jira_automation", "OPS-1", policy_id=None, dryrun=None,
                                    now=NOW)
    store.triggers.hold(trigger.id, made.id, NOW + HOUR, NOW)

    claimed = store.triggers.claim(trigger.id, NOW + HOUR)

    assert claimed is not None and claimed.maintenance_window_id == made.id


def test_ending_an_ended_or_unknown_window_is_refused(store):
    made = store.maintenance.add(window(NOW - 2 * HOUR, NOW - HOUR))

    with pytest.raises(Conflict):
        store.maintenance.end(made.id, NOW)
    with pytest.raises(NotFound):
        store.maintenance.end(made.id + 100, NOW)
