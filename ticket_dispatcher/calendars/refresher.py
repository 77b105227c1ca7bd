"""Time off imported from iCalendar feeds, on a schedule (docs/operations.md, "Time off from
calendars").

The refresher runs on one thread of its own: once at start and then every
``availability.refresh_every`` it fetches each configured feed (integrations/calendar_fetch.py),
reads its absences from ``PAST`` back to ``availability.horizon`` ahead
(integrations/calendar_feed.py) and replaces that feed's time off with them in one transaction
(store/calendar_feeds.py). A failure of any kind — the download, the feed's content, the database —
records the feed as failed with a short reason and keeps its last good copy; the other feeds go
on as if nothing happened. Feeds no longer configured are forgotten at each round.

The thread waits for its next round on an Event that a timer of the scheduler sets, so a test's
manual clock drives the rounds as it drives every other timer. ``stop`` never blocks: it wakes
the thread and cuts off the download in flight; ``join`` then waits, within the shutdown's
deadline, for the thread to end. Nothing is written once ``stop`` has been called.

In shared mode every replica runs its own refresher. That is safe: a refresh replaces the
feed's whole copy in one transaction, so two replicas refreshing the same feed write the same
entries one after the other, and the last write wins with a copy as good as the other's.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from ticket_dispatcher.clock import Clock
from ticket_dispatcher.config import AvailabilityConfig, CalendarFeed
from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.availability_parsing import MAX_TIME_OFF_REASON
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.errors import DispatcherError, StoreUnavailable
from ticket_dispatcher.integrations.calendar_feed import (
    DEFAULT_MAX_COMPONENTS,
    ParsedFeed,
    parse_feed,
)
from ticket_dispatcher.integrations.calendar_fetch import FeedFetcher, FetchError
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.store import Store
from ticket_dispatcher.timeutil import EARLIEST, LATEST, zone_named

log = logging.getLogger(__name__)

PAST = timedelta(days=14)  # how far back a feed's absences are imported
ENGINEERS_PAGE = 500
MAX_NOTE = 500  # characters of what a good copy left out, as its status shows it
_NOTES_SHOWN = 3  # of the feed reader's own notes (which events it skipped, and why)
_UTC = ZoneInfo("UTC")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
STOPPING = "not refreshed: the service is stopping"
UNEXPECTED = "the refresh failed unexpectedly (the service's log has the details)"


class RoundTimers(Protocol):
    """Where the next round's timer is set: the runtime's scheduler (actors/scheduler.py), so
    a test's manual clock drives the rounds."""

    def call_at(self, when: datetime, callback: Callable[[], object], label: str) -> None: ...


@dataclass(frozen=True)
class FeedRefresh:
    """How one refresh of a feed went: ``ok`` with the ``entries`` stored and a ``message``
    saying what the copy left out (may be empty), or not ok with the reason in ``message``."""

    feed: str
    ok: bool
    entries: int
    message: str


class CalendarRefresher:
    def __init__(self, settings: AvailabilityConfig, *, store: Store, clock: Clock,
                 scheduler: RoundTimers, fetcher: FeedFetcher, metrics: Metrics | None = None):
        """``scheduler``: where the timer of the next round is set (the runtime's).
        ``metrics``: told of each refresh, and asked at each scrape for the feeds' ages."""
        self.settings = settings
        self.feeds: tuple[CalendarFeed, ...] = settings.feeds
        self._store = store
        self._clock = clock
        self._scheduler = scheduler
        self._fetcher = fetcher
        self._metrics = metrics
        self._lock = threading.Lock()  # guards _refreshed_at (a scrape reads it)
        self._refreshed_at: dict[str, datetime | None] = dict.fromkeys(
            (feed.name for feed in self.feeds), None)
        self._stopping = threading.Event()
        self._due = threading.Event()
        self._thread: threading.Thread | None = None
        if metrics is not None:
            metrics.calendar_feeds([feed.name for feed in self.feeds], self.ages)

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread; its first round begins at once (the start does not wait for it).
        A daemon: ``join`` bounds the wait for it, and it never holds the process."""
        self._thread = threading.Thread(target=self._run, name="calendar-feeds", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Never blocks: no round starts and nothing is written from now on, and a download in
        flight is cut off (one still connecting ends within the connect or read timeout)."""
        self._stopping.set()
        self._due.set()
        self._fetcher.abort()

    def join(self, timeout: float | None) -> bool:
        """Wait at most ``timeout`` seconds for the thread to end; False when it has not."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._due.clear()
            try:
                self.refresh_all()
            except Exception:  # a bug must not end the refreshes for good
                log.exception("a round of calendar feed refreshes failed")
            if self._stopping.is_set():
                return
            self._scheduler.call_at(self._clock.now() + self.settings.refresh_every,
                                    self._due.set, "calendar feeds")
            self._due.wait()

    # -- a round ------------------------------------------------------------------------------

    def refresh_all(self) -> list[FeedRefresh]:
        """One round, in the calling thread: forget the feeds no longer configured, then
        refresh each configured one in turn (until ``stop``)."""
        if self._stopping.is_set():
            return []
        self._forget_unconfigured()
        self._read_good_copies()
        results = []
        for feed in self.feeds:
            if self._stopping.is_set():
                break
            results.append(self.refresh(feed))
        return results

    def refresh(self, feed: CalendarFeed) -> FeedRefresh:
        """Fetch, read and store one feed; a failure is recorded as the feed's status, and
        its last good copy stays."""
        now = self._clock.now()
        try:
            entries, note = self._read(feed, now)
            if self._stopping.is_set():
                return FeedRefresh(feed.name, False, 0, STOPPING)
            self._store.calendar_feeds.replace_feed(feed.name, feed.email, entries, now, note=note)
        except DispatcherError as exc:  # the download, the content, the database
            return self._failed(feed, exc, now)
        except Exception:
            log.exception("calendar feed %s: the refresh failed", feed.name)
            return self._failed(feed, None, now)
        with self._lock:
            self._refreshed_at[feed.name] = now
        if self._metrics is not None:
            self._metrics.calendar_feed_refreshed(feed.name, ok=True)
        log.info("calendar feed refreshed", extra={
            "reason": f"{feed.name}: {_counted(len(entries), 'entry', 'entries')}"
                      + (f"; {note}" if note else "")})
        return FeedRefresh(feed.name, True, len(entries), note)

    def ages(self) -> dict[str, float | None]:
        """Each feed's seconds since its last good copy (None: it has none), for a scrape."""
        now = self._clock.now()
        with self._lock:
            known = dict(self._refreshed_at)
        return {name: None if at is None else max(0.0, (now - at).total_seconds())
                for name, at in known.items()}

    def _read(self, feed: CalendarFeed, now: datetime) -> tuple[list[TimeOff], str]:
        """The feed's time off in the window, and what of the feed was left out."""
        data = self._fetcher.fetch(feed.name, feed.url)
        zones = self._engineer_zones(feed)
        max_events = self.settings.max_feed_events
        parsed = parse_feed(
            data, window_start=now - PAST, window_end=now + self.settings.horizon,
            person=feed.email, zone_of=lambda email: zones.get(email, _UTC),
            max_events=max_events, max_bytes=self.settings.max_feed_bytes,
            # an event with an alarm is two components
            max_components=max(DEFAULT_MAX_COMPONENTS, 2 * max_events))
        return time_off_of(parsed, feed.name, set(zones))

    def _engineer_zones(self, feed: CalendarFeed) -> dict[str, ZoneInfo]:
        """The zone of each engineer the feed may name: its own engineer, or everyone."""
        engineers = self._store.engineers
        if feed.email is not None:
            return {e.email: _zone(e) for e in engineers.named([feed.email])}
        zones: dict[str, ZoneInfo] = {}
        offset, total = 0, 1
        while offset < total:
            page, total = engineers.page(limit=ENGINEERS_PAGE, offset=offset)
            if not page:
                break
            zones.update((e.email, _zone(e)) for e in page)
            offset += len(page)
        return zones

    def _failed(self, feed: CalendarFeed, error: DispatcherError | None,
                now: datetime) -> FeedRefresh:
        message = UNEXPECTED if error is None else error.message
        if self._stopping.is_set():  # a download cut off by the stop is no failure of the feed
            return FeedRefresh(feed.name, False, 0, STOPPING)
        if self._metrics is not None:
            self._metrics.calendar_feed_refreshed(feed.name, ok=False)
        named = message if isinstance(error, FetchError) else f"feed {feed.name!r}: {message}"
        log.warning("calendar feed not refreshed; its last good copy stays",
                    extra={"reason": named})
        try:
            self._store.calendar_feeds.feed_failed(feed.name, feed.email, message, now)
        except StoreUnavailable as exc:
            log.warning("calendar feed status not saved", extra={
                "reason": f"{feed.name}: {exc.message}"})
        return FeedRefresh(feed.name, False, 0, message)

    def _forget_unconfigured(self) -> None:
        try:
            self._store.calendar_feeds.forget_feeds(keep=[feed.name for feed in self.feeds])
        except StoreUnavailable as exc:
            log.warning("calendar feeds no longer configured not forgotten yet", extra={
                "reason": exc.message})

    def _read_good_copies(self) -> None:
        """When each feed's last good copy was fetched, as the database says: a copy from
        before a restart, or one another replica fetched, counts for the age too."""
        try:
            statuses = self._store.calendar_feeds.feeds()
        except StoreUnavailable:
            return  # the refreshes themselves say what fails
        with self._lock:
            for status in statuses:
                if status.name in self._refreshed_at and status.refreshed_at is not None:
                    known = self._refreshed_at[status.name]
                    if known is None or status.refreshed_at > known:
                        self._refreshed_at[status.name] = status.refreshed_at


def time_off_of(parsed: ParsedFeed, source: str, engineers: set[str],
                ) -> tuple[list[TimeOff], str]:
    """The time off of the ``engineers`` among a feed's absences, marked with the feed's name
    as ``source``, and a note of what was left out: absences of people who are no engineer
    here, events that named nobody or could not be read (empty when nothing was)."""
    entries: list[TimeOff] = []
    strangers: dict[str, int] = {}
    for absence in parsed.absences:
        if absence.email not in engineers:
            strangers[absence.email] = strangers.get(absence.email, 0) + 1
            continue
        entries.append(TimeOff(None, absence.email, max(absence.start, EARLIEST),
                               min(absence.end, LATEST), _reason(absence.summary), source))
    parts = []
    if strangers:
        count, people = sum(strangers.values()), len(strangers)
        parts.append(f"{_counted(count, 'absence')} of {_counted(people, 'person', 'people')} "
                     f"who {'is no engineer' if people == 1 else 'are no engineers'} here "
                     f"left out")
    if parsed.unattributed:
        parts.append(f"{_counted(parsed.unattributed, 'event')} named nobody")
    if parsed.malformed:
        parts.append(f"{_counted(parsed.malformed, 'event')} could not be read")
    parts += parsed.notes[:_NOTES_SHOWN]
    note = "; ".join(parts)
    return entries, note if len(note) <= MAX_NOTE else note[:MAX_NOTE - 1] + "…"


def _counted(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _reason(summary: str) -> str:
    """An event's summary as a time-off reason: one line, within the reason's limit."""
    text = " ".join(_CONTROL.sub(" ", summary).split())
    return text if len(text) <= MAX_TIME_OFF_REASON else text[:MAX_TIME_OFF_REASON - 1] + "…"


def _zone(engineer: Engineer) -> ZoneInfo:
    """The engineer's zone; UTC when it is unset, or unknown to the installed tzdata."""
    return zone_named(engineer.timezone or "UTC") or _UTC

