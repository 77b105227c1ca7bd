"""The parked waits page: every parked execution from the database with its countdown, wake-up
and deadline, gone once it wakes and finishes; a page's ACK wait with its attempt and whom it
pages; paging; the refresh attributes; and the database cut away."""

from __future__ import annotations

import functools
import re
from datetime import timedelta

import pytest
from falcon import testing

from tests.actors.conftest import urgent_world  # noqa: F401 - the fixture
from tests.actors.test_notification_card_runtime import ASSIGNEE, put
from tests.console.conftest import Console, build_app, main_text
from tests.domain.test_notification_page import PENDING, POLL, TIMEOUT
from tests.fakes import issue
from tests.harness import Harness, rule
from tests.http.test_admin_outage import DATABASE
from tests.relay import Relay, relayed_url, target_of
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store import Store
from ticket_dispatcher.timeutil import format_time

PAGE = "/console/parked"


def console_over(harness, *, auth_enabled: bool = False) -> Console:
    services = Services(store=harness.store, config=load_config(None, environ={}),
                        clock=harness.clock, runtime=harness.runtime)
    return Console(testing.TestClient(build_app(services, auth_enabled=auth_enabled)), services)


def rows(html: str) -> list[str]:
    body = html.split('<table class="rows parked">', 1)[1].split("<tbody>", 1)[1]
    body = body.split("</tbody>", 1)[0]
    return [" ".join(re.sub(r"<[^>]+>", " ", "<tr" + row).split())
            for row in body.split("<tr")[1:]]


def park(harness, *keys: str) -> list[int]:
    """Executions of ``test_wait`` (60 s) for ``keys``, each parked; their ids."""
    ids = []
    for key in keys:
        harness.jira.put(issue(key=key, project_key="WAIT"))
        ids += harness.post_trigger(key).execution_ids
    return ids


@pytest.fixture
def waiting(harness):
    harness.policy(rule("test_wait", name="hold"), projects=("WAIT",))
    return harness


def test_a_parked_wait_is_listed_with_its_countdown_until_it_wakes(waiting, console):
    harness = waiting
    [execution_id] = park(harness, "WAIT-1")
    wake = harness.execution(execution_id).wake_at
    console.sign_in("viewer")

    page = console.get(PAGE).text

    assert harness.execution(execution_id).status is ExecutionStatus.EXECUTING
    assert "1 parked wait." in main_text(page)
    assert rows(page) == [f"WAIT-1 Execution {execution_id} hold: 0:test_wait — — in 60 s "
                          f"{wake:%Y-%m-%d %H:%M:%S} —"]
    assert f'<span data-countdown="{format_time(wake)}">in 60 s</span>' in page
    assert 'href="/console/executions?issue_key=WAIT-1"' in page
    assert f'href="/console/executions/{execution_id}"' in page

    harness.advance(45)
    assert '">in 15 s</span>' in console.get(PAGE).text

    harness.advance(15)  # it wakes, and test_wait ends the execution
    page = console.get(PAGE).text
    assert harness.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert "0 parked waits." in main_text(page)
    assert rows(page) == ["Nothing is parked."]


def test_the_page_refreshes_its_list_by_itself(waiting, console):
    console.sign_in("viewer")

    page = console.get(PAGE, params={"limit": "10"}).text

    region = re.search(r'<div id="parked"[^>]*>', page)[0]
    assert 'hx-get="/console/parked?limit=10"' in region
    assert 'hx-trigger="every 5s"' in region
    assert 'hx-select="#parked"' in region and 'hx-swap="outerHTML"' in region


def test_waits_are_listed_soonest_first_and_page(waiting, open_console):
    harness = waiting
    ids = []
    for n in range(3):
        ids += park(harness, f"WAIT-{n + 1}")
        harness.clock.advance(5)

    first = open_console.get(PAGE, params={"limit": "2"}).text
    second = open_console.get(PAGE, params={"limit": "2", "offset": "2"}).text

    assert [row.split()[0] for row in rows(first)] == ["WAIT-1", "WAIT-2"]
    assert "3 parked waits, 1–2 shown." in main_text(first)
    assert 'href="/console/parked?limit=2&amp;offset=2" rel="next">Later →' in first
    assert [row.split()[0] for row in rows(second)] == ["WAIT-3"]
    assert 'href="/console/parked?limit=2&amp;offset=0" rel="prev">← Sooner' in second
    assert open_console.get(PAGE, params={"limit": "500"}).status_code == 400
    # an offset at the end of a row id's range is a page past the last, not an overflow
    deep = open_console.get(PAGE, params={"offset": str(2**63 - 1)})
    assert deep.status_code == 200 and rows(deep.text) == ["Nothing is parked on this page."]


def test_past_its_bound_the_count_says_more_than(waiting, open_console, monkeypatch):
    harness = waiting
    for n in range(4):
        park(harness, f"WAIT-{n + 1}")
        harness.clock.advance(5)
    executions = harness.store.executions
    monkeypatch.setattr(executions, "parked", functools.partial(executions.parked, counted=2))

    first = open_console.get(PAGE, params={"limit": "1"}).text
    last = open_console.get(PAGE, params={"limit": "1", "offset": "3"}).text

    assert "More than 2 parked waits, 1–1 shown." in main_text(first)
    assert 'href="/console/parked?limit=1&amp;offset=1" rel="next">Later →' in first
    assert "4 parked waits, 4–4 shown." in main_text(last)
    assert "Later →" not in last


def test_a_page_wait_shows_its_attempt_deadline_and_whom_it_pages(urgent_world):  # noqa: F811
    harness = urgent_world
    put(harness, severity="S1", status=PENDING)
    start = harness.clock.now()
    [execution_id] = harness.post_trigger(source=ASSIGNEE).execution_ids
    console = console_over(harness)

    page = console.get(PAGE).text

    wake, deadline = start + timedelta(seconds=POLL), start + timedelta(seconds=TIMEOUT)
    assert rows(page) == [
        f"TCID-1 Execution {execution_id} urgent: 1:page_assignment Alice (alice@example.com) "
        f"1 in {POLL} s {wake:%Y-%m-%d %H:%M:%S} {deadline:%Y-%m-%d %H:%M:%S}"]
    assert f'<time datetime="{format_time(deadline)}"' in page


@pytest.mark.postgres
def test_the_page_says_the_database_is_down_while_it_is_cut_away(postgres_url):
    with Relay(*target_of(postgres_url)) as relay:
        store = Store.for_url(relayed_url(postgres_url, relay), database=DATABASE)
        store.migrate()
        harness = Harness(store).start()
        console = console_over(harness)
        try:
            before = console.get(PAGE)
            relay.cut()
            down = console.get(PAGE)
            refreshed = console.get(PAGE, headers={"HX-Request": "true"})
            relay.restore()
            after = console.get(PAGE)
        finally:
            relay.restore()
            harness.stop()
            store.close()

    assert before.status_code == 200 and after.status_code == 200
    assert "0 parked waits." in main_text(after.text)
    assert down.status_code == 503
    assert "The database cannot be read" in main_text(down.text)
    assert refreshed.status_code == 200  # htmx swaps only a success into the page
    assert "The database cannot be read" in main_text(refreshed.text)
