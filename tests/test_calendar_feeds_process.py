"""A real ``ticket-dispatcher serve`` with one organisation calendar feed, served by the test: at
start it imports the feed, and the engineer the feed names is away, with the feed's reason, and
their time off lists the entry under the feed's name. The feed's private URL never reaches the
log, and the process stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.calendar_server import Answer, FeedServer, all_day, feed_server, ics
from tests.peer import FakeJira
from tests.process import Processes, wait_until
from ticket_dispatcher.store import Store

ALICE = "alice@example.com"
PRIVATE_PATH = "/calendars/private-5d1e0c7a9b/holidays.ics"


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        yield fake


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with feed_server() as server:
        yield server


def seed_engineer(database_url: str) -> None:
    """Alice, in Asia/Shanghai, before the server starts: its first refresh finds her."""
    store = Store.for_url(database_url)
    try:
        store.migrate()
        store.engineers.put(ALICE, dispatch_enabled=True, now=datetime.now(UTC),
                            availability={"timezone": "Asia/Shanghai"})
    finally:
        store.close()


def test_serve_imports_an_organisation_feed_and_the_engineer_it_names_is_away(
        processes: Processes, db_url, jira, feeds):
    today = datetime.now(UTC).date()
    feeds.serve(PRIVATE_PATH, Answer(ics(all_day(
        "leave-1", today - timedelta(days=1), today + timedelta(days=2), "Annual leave",
        ALICE))))
    seed_engineer(db_url)

    server = processes.start(db_url, jira, AVAILABILITY_FEEDS=f"hr={feeds.url(PRIVATE_PATH)}",
                             SHUTDOWN_TIMEOUT="5s").wait_serving()

    def away() -> dict | None:
        engineer = server.call("GET", f"/engineers/{ALICE}")
        return engineer if not engineer["availability"]["available"] else None

    engineer = wait_until(away, 20, "alice is away, from the feed")
    assert "Annual leave" in " ".join(engineer["availability"]["reasons"])
    time_off = server.call("GET", f"/engineers/{ALICE}/time-off")["items"]
    assert [(entry["source"], entry["reason"]) for entry in time_off] == [("hr", "Annual leave")]
    assert feeds.requests(PRIVATE_PATH) == 1
    metrics = requests.get(f"{server.url}/metrics", timeout=10).text
    assert 'ticket_manager_dispatch_calendar_feed_refreshes_total{feed="hr",result="ok"} 1.0' \
        in metrics
    server.terminate()
    assert server.wait_exit(timeout=15) == 0
    assert server.log_problems() == []
    assert "private-5d1e0c7a9b" not in server.log()
    refreshed = [json.loads(line) for line in server.lines if "calendar feed refreshed" in line]
    assert [line["reason"] for line in refreshed] == ["hr: 1 entry"]


def test_sigterm_cuts_a_feed_download_in_flight_short(processes: Processes, db_url, jira, feeds):
    # The feed drips for half a minute, far past the 5 s shutdown; its own deadline is 30 s.
    feeds.serve(PRIVATE_PATH, Answer(b"BEGIN:VCALENDAR\r\n", drip=True))
    server = processes.start(db_url, jira, AVAILABILITY_FEEDS=f"hr={feeds.url(PRIVATE_PATH)}",
                             INTEGRATIONS_READ_TIMEOUT="10s", SHUTDOWN_TIMEOUT="5s")
    server.wait_serving()
    wait_until(lambda: feeds.in_flight(PRIVATE_PATH) == 1, 10, "the download in flight")

    started = time.monotonic()
    server.terminate()

    assert server.wait_exit(timeout=15) == 0
    assert time.monotonic() - started < 5
    assert server.log_problems() == []
    assert "calendar refresher did not stop" not in server.log()
    assert "calendar feed not refreshed" not in server.log()  # a stop is no failure of the feed
