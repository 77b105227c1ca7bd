"""Maintenance windows in the actor runtime, on both engines: a ``hold`` window keeps a trigger
in its scope pending, carrying the window's id, until the window ends (on its own, picked up by
the trigger poll, or early by an operator); then it runs on the issue as it is."""

from __future__ import annotations

from datetime import timedelta

from tests.fakes import issue
from tests.harness import assign, rule
from ticket_dispatcher.domain.execution import TriggerStatus
from ticket_dispatcher.domain.maintenance import (
    Effect,
    Every,
    MaintenanceWindow,
    Recurrence,
    Scope,
)
from ticket_dispatcher.metrics import PREFIX

ENGINEER = "a@example.com"
DAY = timedelta(days=1)
TCID = Scope(projects=("TCID",))


def open_window(harness, effect=Effect.HOLD, scope=TCID,
                minutes=30) -> MaintenanceWindow:
    now = harness.clock.now()
    return harness.store.maintenance.add(MaintenanceWindow(
        None, scope, "migration", now, now + timedelta(minutes=minutes), effect,
        created_at=now))


def dispatching(make_harness):
    harness = make_harness()
    harness.store.engineers.put(ENGINEER, dispatch_enabled=True, now=harness.clock.now())
    harness.jira.add_user(ENGINEER)
    harness.policy(rule(assign(ENGINEER)))
    return harness


def test_a_held_trigger_waits_for_the_end_of_its_window_then_runs(make_harness):
    harness = dispatching(make_harness)
    window = open_window(harness)

    held = harness.post_trigger()

    assert held.status is TriggerStatus.PENDING
    assert held.maintenance_window_id == window.id
    assert held.available_at == window.end
    assert harness.executions() == []
    harness.advance(29 * 60)
    assert harness.trigger(held.id).status is TriggerStatus.PENDING
    harness.jira.put(issue(summary="changed during the window"))
    harness.advance(60 + harness.config.trigger_poll_interval.total_seconds())
    harness.wait_until(lambda: harness.trigger(held.id).status is TriggerStatus.COMPLETED)
    [execution] = harness.executions()
    assert execution.trigger_id == held.id
    assert harness.jira.issues["TCID-1"].assignee is not None


def test_ending_a_window_early_runs_the_triggers_it_holds(make_harness):
    harness = dispatching(make_harness)
    window = open_window(harness)
    held = harness.post_trigger()
    assert harness.trigger(held.id).held

    harness.store.maintenance.end(window.id, harness.clock.now())
    harness.advance(harness.config.trigger_poll_interval.total_seconds())

    harness.wait_until(lambda: harness.trigger(held.id).status is TriggerStatus.COMPLETED)
    assert len(harness.executions()) == 1


def test_work_out_of_scope_or_under_a_quiet_window_is_not_held(make_harness):
    harness = dispatching(make_harness)
    open_window(harness, scope=Scope(projects=("OPS",)))
    open_window(harness, Effect.QUIET, Scope(all=True))

    trigger = harness.post_trigger()

    assert trigger.status is TriggerStatus.COMPLETED
    assert trigger.maintenance_window_id is None


def test_a_dry_run_is_not_held(make_harness):
    harness = dispatching(make_harness)
    open_window(harness, scope=Scope(all=True))
    policy = harness.store.policies.active_and_shadows()[0][0]

    trigger = harness.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {}})

    assert trigger.status is TriggerStatus.COMPLETED


def test_the_backlog_job_counts_current_windows_and_leaves_held_triggers_out(make_harness):
    harness = dispatching(make_harness)
    open_window(harness, minutes=120)
    harness.post_trigger()
    daily = harness.store.maintenance.add(MaintenanceWindow(
        None, Scope(projects=("OPS",)), "all day, every day", harness.clock.now() - DAY,
        harness.clock.now(), Effect.QUIET,
        Recurrence(Every.DAILY, harness.clock.now() + DAY), created_at=harness.clock.now()))
    assert daily.current_since(harness.clock.now()) == daily.start

    harness.advance(1)

    def value(name, **labels):
        return harness.metrics.registry.get_sample_value(PREFIX + name, labels)

    assert value("maintenance_windows") == 2
    assert value("maintenance_windows_overdue") == 1  # a day without a break: over 24 h
    assert value("triggers", status="pending") == 0
