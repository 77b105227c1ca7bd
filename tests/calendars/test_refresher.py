"""The calendar refresher against a real HTTP server: a good feed becomes the engineers' time off;
a feed that fails in any way (an error status, a web page, a body too large, one that drips, far
too many events, the database away) keeps its last good copy and says why, and the other feeds
go on; the refresh metrics; the rounds on the clock, and a stop that cuts a download short."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.calendar_server import (
    Answer,
    FeedServer,
    all_day,
    feed_server,
    ics,
    many_events,
)
from tests.clocks import ManualClock
from tests.process import free_port, wait_until
from ticket_dispatcher.actors.scheduler import Scheduler
from ticket_dispatcher.calendars.refresher import CalendarRefresher, FeedRefresh
from ticket_dispatcher.config import AvailabilityConfig, CalendarFeed
from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.integrations.calendar_fetch import FeedFetcher
from ticket_dispatcher.metrics import Metrics

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)  # a Monday; 09:00 in Shanghai
TODAY = date(2026, 11, 30)
ALICE, BOB = "alice@example.com", "bob@example.com"
HR, BOB_CALENDAR = "/hr.ics", "/bob.ics"
READ_TIMEOUT = 0.5  # the whole fetch may take three of them
HR_FEED = ics(
    all_day("leave-1", TODAY, TODAY + timedelta(days=3), "Annual leave", ALICE),
    all_day("leave-2", TODAY, TODAY + timedelta(days=1), "Offsite", "zed@example.com"),
)
BOB_FEED = ics("UID:dentist\nDTSTART:20261130T000000Z\nDTEND:20261130T030000Z\n"
               "SUMMARY:Dentist")


def shanghai_midnight(day: date) -> datetime:
    """The start of ``day`` in Asia/Shanghai (UTC+8), in UTC."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(hours=8)


class World:
    """A store with alice (Asia/Shanghai) and bob, a feed server, a manual clock and its
    scheduler, and refreshers built on them."""

    def __init__(self, store, server: FeedServer):
        self.store, self.server = store, server
        self.clock = ManualClock(NOW)
        self.scheduler = Scheduler(self.clock)
        self.scheduler.start()
        self.metrics = Metrics()
        self.refreshers: list[CalendarRefresher] = []
        store.engineers.put(ALICE, dispatch_enabled=True, now=NOW,
                            availability={"timezone": "Asia/Shanghai"})
        store.engineers.put(BOB, dispatch_enabled=True, now=NOW)
        server.serve(HR, Answer(HR_FEED))
        server.serve(BOB_CALENDAR, Answer(BOB_FEED))

    def settings(self, **overrides) -> AvailabilityConfig:
        feeds = (CalendarFeed("hr", self.server.url(HR)),
                 CalendarFeed("bob-calendar", self.server.url(BOB_CALENDAR), BOB))
        return replace(AvailabilityConfig(feeds=feeds), **overrides)

    def refresher(self, **overrides) -> CalendarRefresher:
        settings = self.settings(**overrides)
        fetcher = FeedFetcher(connect_timeout=1, read_timeout=READ_TIMEOUT,
                              max_bytes=settings.max_feed_bytes)
        refresher = CalendarRefresher(settings, store=self.store, clock=self.clock,
                                      scheduler=self.scheduler, fetcher=fetcher,
                                      metrics=self.metrics)
        self.refreshers.append(refresher)
        return refresher

    def time_off(self, email: str) -> list[tuple[datetime, datetime, str, str]]:
        entries, _ = self.store.time_off.page(email, now=self.clock.now())
        return [(e.start, e.end, e.reason, e.source) for e in entries]

    def status(self, feed: str):
        return next(status for status in self.store.calendar_feeds.feeds() if status.name == feed)

    def sample(self, name: str, **labels: str) -> float | None:
        text = self.metrics.exposition()[0].decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return sample.value
        return None

    def close(self) -> None:
        for refresher in self.refreshers:
            refresher.stop()
            assert refresher.join(5), "the refresher did not stop"
        self.scheduler.stop()


@pytest.fixture
def world(store) -> Iterator[World]:
    with feed_server() as server:
        world = World(store, server)
        yield world
        world.close()


ALICE_LEAVE = (shanghai_midnight(TODAY), shanghai_midnight(TODAY + timedelta(days=3)),
               "Annual leave", "hr")
BOB_DENTIST = (datetime(2026, 11, 30, 0, 0, tzinfo=UTC), datetime(2026, 11, 30, 3, 0, tzinfo=UTC),
               "Dentist", "bob-calendar")


# --- a good feed -------------------------------------------------------------------------------


def test_a_good_feed_becomes_the_time_off_of_the_engineers_it_names(world):
    results = world.refresher().refresh_all()

    assert [(r.feed, r.ok, r.entries) for r in results] == [("hr", True, 1),
                                                           ("bob-calendar", True, 1)]
    # all day in alice's own zone, Asia/Shanghai
    assert world.time_off(ALICE) == [ALICE_LEAVE]
    assert world.time_off(BOB) == [BOB_DENTIST]
    hr = world.status("hr")
    assert (hr.status, hr.entries, hr.refreshed_at) == ("ok", 1, NOW)
    assert hr.error == "1 absence of 1 person who is no engineer here left out"
    assert (world.status("bob-calendar").status, world.status("bob-calendar").error) == ("ok", "")


def test_the_next_good_copy_replaces_the_last_one_whole(world):
    refresher = world.refresher()
    refresher.refresh_all()
    tomorrow = TODAY + timedelta(days=1)
    world.server.serve(HR, Answer(ics(all_day("leave-9", tomorrow, tomorrow + timedelta(days=1),
                                              "Moved leave", ALICE))))

    refresher.refresh_all()

    assert world.time_off(ALICE) == [(shanghai_midnight(tomorrow),
                                      shanghai_midnight(tomorrow + timedelta(days=1)),
                                      "Moved leave", "hr")]


def test_a_deleted_entry_of_a_feed_comes_back_at_its_next_refresh(world):
    refresher = world.refresher()
    refresher.refresh_all()
    entries, _ = world.store.time_off.page(ALICE, now=NOW)
    world.store.time_off.delete(ALICE, entries[0].id)
    assert world.time_off(ALICE) == []

    refresher.refresh_all()

    assert world.time_off(ALICE) == [ALICE_LEAVE]


def test_an_engineers_own_feed_that_names_no_engineer_imports_nothing_and_says_why(world):
    settings = world.settings()
    stranger = CalendarFeed("zed-calendar", world.server.url(BOB_CALENDAR), "zed@example.com")
    refresher = world.refresher(feeds=(*settings.feeds, stranger))

    result = refresher.refresh(stranger)

    assert (result.ok, result.entries) == (True, 0)
    assert result.message == "1 absence of 1 person who is no engineer here left out"


def test_feeds_no_longer_configured_are_forgotten_with_their_time_off(world):
    world.store.calendar_feeds.replace_feed("old-hr", None, [TimeOff(
        None, ALICE, NOW, NOW + timedelta(days=1), "Old leave", "old-hr")], NOW)

    world.refresher().refresh_all()

    assert {status.name for status in world.store.calendar_feeds.feeds()} == {"hr", "bob-calendar"}
    assert [reason for _, _, reason, _ in world.time_off(ALICE)] == ["Annual leave"]


# --- a feed that fails -------------------------------------------------------------------------

TOO_LARGE = b"BEGIN:VCALENDAR\r\n" + b"X" * 200_000


@pytest.mark.parametrize(("answer", "settings", "why"), [
    (Answer(b"oops", 500, "text/plain"), {}, "feed 'hr' answered HTTP 500"),
    (Answer(b"", 302, "text/plain"), {}, "feed 'hr' answered HTTP 302 (redirects are not "
                                         "followed: configure the URL it names)"),
    (Answer(b"<!doctype html><html><body>Sign in</body></html>", 200, "text/html"), {},
     "the feed is an HTML or XML page, not iCalendar"),
    (Answer(TOO_LARGE), {"max_feed_bytes": 100_000},
     "feed 'hr' is 200017 bytes, more than the 100000 allowed"),
    (Answer(TOO_LARGE, declared=False), {"max_feed_bytes": 100_000},
     "feed 'hr' is more than the 100000 bytes allowed; stopped reading"),
    (Answer(many_events(100_000)), {"max_feed_bytes": 20_000_000},
     "the feed holds 100001 components (events, alarms, time zones), more than the 40000 "
     "allowed"),
], ids=["500", "redirect", "html", "too-large", "too-large-undeclared", "100000-events"])
def test_a_failed_refresh_says_why_and_keeps_the_last_good_copy(world, answer, settings, why):
    refresher = world.refresher(**settings)
    refresher.refresh_all()
    world.clock.advance(minutes=15)
    world.server.serve(HR, answer)

    results = refresher.refresh_all()

    assert results == [FeedRefresh("hr", False, 0, why),
                       FeedRefresh("bob-calendar", True, 1, "")]
    hr = world.status("hr")
    assert (hr.status, hr.error, hr.entries, hr.refreshed_at) == ("failed", why, 1, NOW)
    assert hr.attempted_at == NOW + timedelta(minutes=15)
    assert world.time_off(ALICE) == [ALICE_LEAVE]  # the last good copy
    assert world.time_off(BOB) == [BOB_DENTIST]  # the other feed is untouched
    assert world.status("bob-calendar").status == "ok"


def test_a_feed_that_drips_is_cut_off_at_its_deadline(world):
    refresher = world.refresher()
    refresher.refresh_all()
    world.server.serve(HR, Answer(HR_FEED, drip=True))

    started = time.monotonic()
    results = refresher.refresh_all()
    took = time.monotonic() - started

    deadline = 3 * READ_TIMEOUT
    assert results[0] == FeedRefresh("hr", False, 0, f"feed 'hr' was still downloading after "
                                                      f"{deadline:g} s; stopped")
    assert deadline <= took < deadline + 2  # the drip alone would go on for half a minute
    assert results[1].ok and world.time_off(ALICE) == [ALICE_LEAVE]


def test_a_feed_that_cannot_be_reached_names_the_feed_and_never_its_url(world):
    secret_url = f"http://127.0.0.1:{free_port()}/private-0123456789abcdef/basic.ics"
    feed = CalendarFeed("hr", secret_url)
    refresher = world.refresher(feeds=(feed,))

    result = refresher.refresh(feed)

    assert result == FeedRefresh("hr", False, 0, "feed 'hr' could not be fetched: the "
                                                 "connection was refused or failed")
    assert "private" not in world.status("hr").error


def test_a_database_outage_while_storing_keeps_the_last_good_copy(world, monkeypatch):
    refresher = world.refresher()
    refresher.refresh_all()

    def unavailable(*args, **kwargs):
        raise StoreUnavailable("the database cannot be reached", kind="connection")

    monkeypatch.setattr(world.store.calendar_feeds, "replace_feed", unavailable)
    results = refresher.refresh_all()

    assert [(r.ok, r.message) for r in results] == [
        (False, "the database cannot be reached")] * 2
    assert world.status("hr").status == "failed"
    assert world.time_off(ALICE) == [ALICE_LEAVE]


# --- metrics -----------------------------------------------------------------------------------

AGE = "ticket_manager_dispatch_calendar_feed_age_seconds"
REFRESHES = "ticket_manager_dispatch_calendar_feed_refreshes_total"


def test_the_age_counts_from_the_last_good_copy_and_is_infinite_without_one(world):
    world.server.serve(BOB_CALENDAR, Answer(b"gone", 404, "text/plain"))
    refresher = world.refresher()
    assert world.sample(AGE, feed="hr") == float("inf")  # before the first refresh

    refresher.refresh_all()
    world.clock.advance(minutes=10)
    world.server.serve(HR, Answer(b"oops", 500, "text/plain"))
    refresher.refresh_all()
    world.clock.advance(minutes=5)

    assert world.sample(AGE, feed="hr") == 15 * 60  # computed when scraped
    assert world.sample(AGE, feed="bob-calendar") == float("inf")  # never a good copy
    assert world.sample(REFRESHES, feed="hr", result="ok") == 1
    assert world.sample(REFRESHES, feed="hr", result="failed") == 1
    assert world.sample(REFRESHES, feed="bob-calendar", result="ok") == 0
    assert world.sample(REFRESHES, feed="bob-calendar", result="failed") == 2


def test_the_age_of_a_good_copy_from_before_a_restart_counts(world):
    world.store.calendar_feeds.replace_feed("hr", None, [], NOW - timedelta(hours=1))
    world.server.serve(HR, Answer(b"oops", 500, "text/plain"))

    world.refresher().refresh_all()

    assert world.sample(AGE, feed="hr") == 3600


# --- the thread --------------------------------------------------------------------------------


def test_the_refresher_refreshes_at_start_and_every_refresh_every(world):
    refresher = world.refresher(refresh_every=timedelta(minutes=5))

    refresher.start()
    wait_until(lambda: world.time_off(ALICE), 10, "the first round at start")
    assert world.server.requests(HR) == 1
    wait_until(lambda: world.scheduler.pending()[0] == 1, 10, "the next round's timer")

    world.clock.advance(minutes=4)
    assert world.server.requests(HR) == 1
    world.clock.advance(minutes=1)
    wait_until(lambda: world.server.requests(HR) == 2, 10, "the second round")


def test_stop_cuts_a_download_in_flight_short_and_writes_nothing(world):
    world.server.serve(HR, Answer(HR_FEED, drip=True))
    refresher = world.refresher()
    refresher.start()
    wait_until(lambda: world.server.in_flight(HR) == 1, 10, "the download in flight")

    started = time.monotonic()
    refresher.stop()
    stopped = refresher.join(timeout=5)

    assert stopped and time.monotonic() - started < READ_TIMEOUT
    assert world.store.calendar_feeds.feeds() == []  # not even a failure is recorded
    assert world.server.requests(BOB_CALENDAR) == 0  # no feed after the stop
