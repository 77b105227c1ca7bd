"""The console's maintenance page: current, planned and past windows, linked from every page;
and a trigger a window holds shows the window in the trigger list."""

from __future__ import annotations

from datetime import timedelta

from tests.console.conftest import main_text
from tests.harness import rule
from ticket_dispatcher.domain.execution import TriggerStatus
from ticket_dispatcher.domain.maintenance import (
    Effect,
    Every,
    MaintenanceWindow,
    Recurrence,
    Scope,
)

HOUR = timedelta(hours=1)
HOSTILE = '<script>alert("x")</script>'
TCID = Scope(projects=("TCID",))


def add(harness, start, end, effect=Effect.HOLD, scope=TCID,
        reason="", recurrence=None) -> MaintenanceWindow:
    now = harness.clock.now()
    return harness.store.maintenance.add(MaintenanceWindow(
        None, scope, reason, now + start, now + end, effect, recurrence, created_at=now))


def section(html: str, heading_id: str) -> str:
    return main_text('<main id="main"' + html.split(f'id="{heading_id}"', 1)[1].split(
        "</section>", 1)[0] + "</main>")


def test_the_page_lists_current_planned_and_past_windows(console, harness):
    console.sign_in("viewer")
    current = add(harness, -HOUR, HOUR, reason=HOSTILE)
    planned = add(harness, 2 * HOUR, 3 * HOUR, Effect.QUIET, Scope(all=True),
                  recurrence=Recurrence(Every.WEEKLY, harness.clock.now() + 30 * 24 * HOUR))
    past = add(harness, -3 * HOUR, -2 * HOUR, Effect.QUIET, Scope(sources=("jira_webhook",)))

    page = console.get("/console/maintenance")

    assert page.status_code == 200
    assert 'href="/console/maintenance" aria-current="page"' in page.text
    assert HOSTILE not in page.text
    now = section(page.text, "current")
    assert now.startswith(f"Current Id Effect Scope Reason Start End Repeats {current.id} hold")
    assert "projects: TCID" in now and '<script>alert("x")</script>' in now
    ahead = section(page.text, "planned")
    assert f"{planned.id} quiet everything" in ahead and "weekly until" in ahead
    over = section(page.text, "past")
    assert f"{past.id} quiet sources: jira_webhook" in over
    assert f"{current.id} hold" not in ahead and f"{past.id} quiet" not in now


def test_a_held_trigger_shows_its_window_in_the_trigger_list(console, harness):
    console.sign_in("viewer")
    harness.policy(rule("test_noop"))
    window = add(harness, -HOUR, HOUR)

    trigger = harness.post_trigger()

    assert trigger.status is TriggerStatus.PENDING
    row = main_text(console.get("/console/triggers").text).split(f"{trigger.id} TCID-1", 1)[1]
    assert f"held by maintenance window {window.id} until" in row
