"""Absences of engineers read from the iCalendar feeds that HR systems and calendars publish.

``parse_feed`` turns the bytes of one feed into the absences that touch a window: recurring
events expanded, cancelled and free ("transparent") events left out, every absence placed in
UTC. It is a pure function of its arguments (no network, no clock); fetching the feed and
storing the absences are other modules' work.

A feed comes from outside and may be hostile, so each cost is bounded before it is paid: the
size in bytes, the number of components before parsing, the repetitions that the recurrence
rules must step through before expanding them, and the occurrences expanded, where expansion
stops as soon as the cap is passed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import recurring_ical_events
from icalendar import Calendar, Component

from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.timeutil import zone_named

DEFAULT_MAX_COMPONENTS = 20_000

# The expansion library picks occurrences comparing all-day and floating times as if they were
# UTC; they are placed in each person's zone afterwards. A day each side covers every offset.
_MARGIN = timedelta(days=1)
# A rule dense enough to pass the cap is expanded in slices that each hold at most about the
# cap's worth of occurrences, so that expansion stops soon after the cap is passed.
_SHORTEST_SLICE = timedelta(hours=1)
# Expanding a rule walks every repetition from its first one; this bounds the walk of one feed.
_REPETITION_BUDGET = 1_000_000
# Walking again the repetitions already computed costs a fraction of computing them, and each
# slice a query's worth of fixed work.
_REWALK_COST = 1 / 30
_SLICE_COST = 10
# A rule whose filters may never match (a 30 February, a sixth Friday) makes the rule engine
# search period by period to the end of the calendar: seconds for a daily or finer rule, which
# is then not read, and for a coarser one the cost charged here. Calendar programs write only
# rules that provably match (see _always_matches), which are never charged.
_FRUITLESS_SEARCH_COST = {"WEEKLY": 300_000, "MONTHLY": 150_000, "YEARLY": 100_000}
_DAY_FILTERS = ("BYMONTH", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYDAY")
_WEEKDAY = re.compile(r"([+-]?[0-9]{1,2})?(MO|TU|WE|TH|FR|SA|SU)")
_LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_NOTES_KEPT = 20

_TIME_PROPERTIES = frozenset(
    {"DTSTART", "DTEND", "DURATION", "RRULE", "RDATE", "EXDATE", "RECURRENCE-ID"})
# The shortest length of each frequency's period, so that counts derived from it are upper bounds.
_PERIOD_SECONDS = {"SECONDLY": 1, "MINUTELY": 60, "HOURLY": 3_600, "DAILY": 86_400,
                   "WEEKLY": 7 * 86_400, "MONTHLY": 28 * 86_400, "YEARLY": 365 * 86_400}
# The BY parts that multiply a period's repetitions; the coarser ones only filter them.
_MULTIPLYING_TIME_PARTS = {"SECONDLY": (), "MINUTELY": ("BYSECOND",),
                           "HOURLY": ("BYMINUTE", "BYSECOND")}
_ALL_TIME_PARTS = ("BYHOUR", "BYMINUTE", "BYSECOND")

_EMAIL = re.compile(r"[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)+", re.IGNORECASE)
_UNFOLD = re.compile(rb"\r?\n[ \t]")
# Counted over the unfolded text, so that folding a BEGIN line does not hide a component.
_COMPONENT_START = re.compile(rb"^[ \t]*begin[ \t]*[;:]", re.IGNORECASE | re.MULTILINE)
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]+")


class FeedError(InvalidInput):
    """The feed cannot be read as absences: too large, not iCalendar, or too costly to expand.
    ``message`` is one short sentence for an operator."""


@dataclass(frozen=True)
class Absence:
    """One person away from ``start`` to ``end`` (aware, UTC; ``end`` exclusive).

    ``email`` is lower-case; ``uid`` is the UID of the event it comes from, shared by all
    occurrences of a recurring event."""

    email: str
    start: datetime
    end: datetime
    summary: str
    uid: str


@dataclass(frozen=True)
class ParsedFeed:
    """The absences of one feed in the window, ordered by email then time, and what was left
    out: ``unattributed`` occurrences named nobody (organisation feeds), ``malformed`` events
    could not be read, and ``notes`` say which and why (the first few, one line each)."""

    absences: tuple[Absence, ...]
    unattributed: int
    malformed: int
    notes: tuple[str, ...]


def parse_feed(data: bytes, *, window_start: datetime, window_end: datetime, person: str | None,
               zone_of: Callable[[str], ZoneInfo], max_events: int, max_bytes: int,
               max_components: int = DEFAULT_MAX_COMPONENTS) -> ParsedFeed:
    """Read the absences in ``[window_start, window_end)`` from the iCalendar bytes ``data``.

    ``person`` given: the feed is that person's own calendar and each busy event is theirs,
    except the ones they declined. ``person`` None: the feed is an organisation's, and an event
    is an absence of each ATTENDEE with a ``mailto:`` address (not a room or resource, not one
    who declined), else of its ORGANIZER, else of each email address in its SUMMARY; an event
    naming nobody is counted in ``unattributed``.

    Times with a zone are read in it. All-day events span whole days of the person's own zone,
    ``zone_of(email)``, and so do floating times, unless the feed names its zone in
    X-WR-TIMEZONE. Recurring events are expanded with their exceptions and moved instances;
    cancelled events, free ones (TRANSP:TRANSPARENT) and ones without duration are left out.
    An absence touching the window is kept whole, not clipped.

    Raises FeedError when ``data`` is more than ``max_bytes`` long, is not one readable
    VCALENDAR, holds more than ``max_components`` components, or when more than ``max_events``
    occurrences (skipped ones included) fall within a day of the window, or its recurrence
    rules would step through too many repetitions. An event that cannot be read is skipped
    and noted. ``zone_of`` is called once per email, and what it raises goes through.
    ValueError for a window that is not two aware datetimes in order, or a negative limit.
    """
    if window_start.tzinfo is None or window_end.tzinfo is None or window_start >= window_end:
        raise ValueError("the window needs two aware datetimes, its start before its end")
    if min(max_events, max_bytes, max_components) < 0:
        raise ValueError("the limits of a feed cannot be negative")
    if person is not None and not person.strip():
        raise ValueError("person, when given, is an email address")
    calendar = _read_calendar(data, max_bytes=max_bytes, max_components=max_components)
    reader = _FeedReader(calendar, window_start.astimezone(UTC), window_end.astimezone(UTC),
                         person=None if person is None else person.strip().lower(),
                         zone_of=zone_of, max_events=max_events)
    for events in _series(calendar):
        reader.read(events)
    return reader.result()


def _read_calendar(data: bytes, *, max_bytes: int, max_components: int) -> Calendar:
    """The parsed VCALENDAR, after the checks that cost nothing next to parsing."""
    if len(data) > max_bytes:
        raise FeedError(f"the feed is {len(data)} bytes, more than the {max_bytes} allowed")
    _check_start(data)
    components = sum(1 for _ in _COMPONENT_START.finditer(_UNFOLD.sub(b"", data)))
    if components > max_components:
        raise FeedError(f"the feed holds {components} components (events, alarms, time zones),"
                        f" more than the {max_components} allowed")
    try:
        calendar = Calendar.from_ical(data)
    except Exception:  # the parser names no error class for bad input: any failure is one
        raise FeedError("the feed is not valid iCalendar: it is truncated or malformed") from None
    scale = _excerpt(str(calendar.get("CALSCALE", "GREGORIAN"))).upper()
    if scale != "GREGORIAN":
        raise FeedError(f"the feed uses the {scale} calendar scale; only GREGORIAN is read")
    return calendar


def _check_start(data: bytes) -> None:
    """Name what the feed is when it is plainly not iCalendar (a login page, an API error)."""
    head = data.removeprefix(b"\xef\xbb\xbf").lstrip()[:64]
    if not head:
        raise FeedError("the feed is empty")
    if head[:15].upper() == b"BEGIN:VCALENDAR":
        return
    if head.startswith(b"<"):
        raise FeedError("the feed is an HTML or XML page, not iCalendar")
    if head[:1] in (b"{", b"["):
        raise FeedError("the feed is JSON, not iCalendar")
    raise FeedError("the feed is not iCalendar: it does not start with BEGIN:VCALENDAR")


def _series(calendar: Calendar) -> list[list[Component]]:
    """The feed's events grouped by UID in the order of the feed: a recurring event with its
    moved instances; an event without UID stands alone."""
    groups: dict[object, list[Component]] = {}
    for component in calendar.subcomponents:
        if component.name == "VEVENT":
            uid = component.get("UID")
            groups.setdefault(id(component) if uid is None else str(uid), []).append(component)
    return list(groups.values())


class _FeedReader:
    """Expands the series of one feed in turn, counting occurrences against the cap and
    repetitions against the budget, and collects the absences."""

    def __init__(self, calendar: Calendar, window_start: datetime, window_end: datetime, *,
                 person: str | None, zone_of: Callable[[str], ZoneInfo],
                 max_events: int) -> None:
        self.window_start, self.window_end = window_start, window_end
        self.span_start, self.span_end = window_start - _MARGIN, window_end + _MARGIN
        self.person = person
        self.zone_of = zone_of
        self.zones: dict[str, ZoneInfo] = {}
        self.max_events = max_events
        self.expanded = 0
        self.budget = float(_REPETITION_BUDGET)
        self.absences: list[Absence] = []
        self.unattributed = 0
        self.malformed = 0
        self.notes: list[str] = []
        self.feed_zone = self._feed_zone(calendar)

    def _feed_zone(self, calendar: Calendar) -> str | None:
        """X-WR-TIMEZONE when it names a known zone; the library reads floating times in it."""
        name = calendar.get("X-WR-TIMEZONE")
        if name is None:
            return None
        if zone_named(str(name)) is None:
            self._note(f"the feed's X-WR-TIMEZONE '{_excerpt(str(name))}' is unknown;"
                       " floating times are read in each person's zone")
            return None
        return str(name)

    def read(self, events: list[Component]) -> None:
        """Add the absences of one series (the events sharing a UID), or skip it and note why."""
        uid = _text(events[0], "UID")
        problem = _malformation(events)
        if problem is not None:
            self._skip(uid, problem)
            return
        self._note_unknown_zones(uid, events)
        recurring = any("RRULE" in event or "RDATE" in event for event in events)
        if not recurring and not any(self._may_touch(event) for event in events):
            return
        slices = self._slices(uid, events) if recurring else [(self.span_start, self.span_end)]
        occurrences: list[Component] = []
        seen: set[tuple[object, object]] = set()
        try:
            query = recurring_ical_events.of(self._calendar_of(events))
            for start, end in slices:
                occurrences += [found for found in query.between(start, end)
                                if self._is_new(found, seen)]
        except FeedError:
            raise
        # The library and its rule engine name no error for bad input (a rule, an end before
        # the start, mixed value types): whatever they raise skips this series only.
        except Exception as error:
            reason = _excerpt(str(error) or type(error).__name__)
            self._skip(uid, f"it cannot be expanded ({reason})")
            return
        for occurrence in occurrences:
            self._take(occurrence)

    def result(self) -> ParsedFeed:
        absences = sorted(self.absences, key=lambda a: (a.email, a.start, a.end, a.uid, a.summary))
        return ParsedFeed(tuple(absences), self.unattributed, self.malformed, tuple(self.notes))

    def _may_touch(self, event: Component) -> bool:
        """Whether a single event may come near the window; generous, the library decides."""
        first, last = _moment(event, "DTSTART"), _moment(event, "DTEND")
        if first is None:
            return True
        start = end = _rough_utc(first)
        duration = getattr(event.get("DURATION"), "dt", None)
        try:
            if last is not None:
                end = max(end, _rough_utc(last))
            if isinstance(duration, timedelta):
                end = max(end, start + abs(duration))
            return start <= self.span_end and end + _MARGIN >= self.span_start
        except OverflowError:  # at the very edge of the calendar: let the library decide
            return True

    def _slices(self, uid: str, events: list[Component]) -> list[tuple[datetime, datetime]]:
        """Cut the widened window into slices for a recurring series after charging what
        expanding it costs to the feed's budget; FeedError when the budget runs out."""
        before, density, dates_near = 0.0, 0.0, 0
        for event in events:
            first = _moment(event, "DTSTART") or self.span_start
            for rule in _rules(event):
                rule_before, rule_density = _rule_cost(rule, first, self.span_start)
                before, density = before + rule_before, density + rule_density
            dates = [_rough_utc(value) for value in _extra_dates(event)]
            before += len(dates)
            dates_near += sum(1 for value in dates if self.span_start <= value < self.span_end)
        if dates_near > self.max_events:
            raise FeedError(f"event '{_excerpt(uid)}' lists {dates_near} dates (RDATE) within a"
                            f" day of the window, more than the {self.max_events} allowed")
        span = (self.span_end - self.span_start).total_seconds()
        step = span
        if density * span > self.max_events + 1:
            step = max(_SHORTEST_SLICE.total_seconds(), (self.max_events + 1) / density)
        count = math.ceil(span / step)
        cost = before + (count - 1) * ((before + self.max_events) * _REWALK_COST + _SLICE_COST)
        self.budget -= cost
        if self.budget < 0:
            raise FeedError(f"event '{_excerpt(uid)}' is too costly to expand: about {cost:,.0f}"
                            f" repetitions to step through, past the {_REPETITION_BUDGET:,}"
                            " allowed for the whole feed")
        return [(self.span_start + timedelta(seconds=index * step),
                 min(self.span_end, self.span_start + timedelta(seconds=(index + 1) * step)))
                for index in range(count)]

    def _calendar_of(self, events: list[Component]) -> Calendar:
        calendar = Calendar()
        if self.feed_zone is not None:
            calendar.add("X-WR-TIMEZONE", self.feed_zone)
        for event in events:
            calendar.add_component(event)
        return calendar

    def _is_new(self, occurrence: Component, seen: set[tuple[object, object]]) -> bool:
        """Count an occurrence not met before (slices overlap at their edges); FeedError as
        soon as the count passes the cap."""
        key = (_moment(occurrence, "RECURRENCE-ID"), _moment(occurrence, "DTSTART"))
        if key in seen:
            return False
        seen.add(key)
        self.expanded += 1
        if self.expanded > self.max_events:
            raise FeedError(f"the feed has at least {self.expanded} event occurrences within a"
                            f" day of the window, more than the {self.max_events} allowed")
        return True

    def _take(self, occurrence: Component) -> None:
        """Add the absences of one occurrence, one per person it names."""
        if _text(occurrence, "STATUS").upper() == "CANCELLED" \
                or _text(occurrence, "TRANSP").upper() == "TRANSPARENT":
            return
        start = _moment(occurrence, "DTSTART")
        if start is None:
            return
        end = _moment(occurrence, "DTEND") or start
        emails = self._people(occurrence)
        if not emails:
            if self._in_window(_place(start, UTC), _place(end, UTC)):
                self.unattributed += 1
            return
        summary, uid = _text(occurrence, "SUMMARY"), _text(occurrence, "UID")
        for email in emails:
            zone = self._zone(email)
            placed_start, placed_end = _place(start, zone), _place(end, zone)
            if self._in_window(placed_start, placed_end):
                self.absences.append(Absence(email, placed_start, placed_end, summary, uid))

    def _in_window(self, start: datetime, end: datetime) -> bool:
        return start < end and start < self.window_end and end > self.window_start

    def _people(self, occurrence: Component) -> list[str]:
        """The lower-case emails of the people an occurrence makes absent."""
        attendees: list[tuple[str, bool]] = []  # (email, declined)
        for address in _values(occurrence, "ATTENDEE"):
            email = _mailto(address)
            if email is not None and _parameter(address, "CUTYPE") not in ("ROOM", "RESOURCE"):
                attendees.append((email, _parameter(address, "PARTSTAT") == "DECLINED"))
        if self.person is not None:
            declined = (self.person, True) in attendees
            return [] if declined else [self.person]
        if attendees:
            return _unique(email for email, declined in attendees if not declined)
        for address in _values(occurrence, "ORGANIZER"):
            if (email := _mailto(address)) is not None:
                return [email]
        return _unique(match.lower() for match in _EMAIL.findall(_text(occurrence, "SUMMARY")))

    def _zone(self, email: str) -> ZoneInfo:
        if email not in self.zones:
            self.zones[email] = self.zone_of(email)
        return self.zones[email]

    def _note_unknown_zones(self, uid: str, events: list[Component]) -> None:
        for event in events:
            for name in ("DTSTART", "DTEND"):
                value = event.get(name)
                tzid = getattr(value, "params", {}).get("TZID")
                if tzid and isinstance(value.dt, datetime) and value.dt.tzinfo is None:
                    self._note(f"event '{_excerpt(uid)}' names the unknown time zone"
                               f" '{_excerpt(str(tzid))}'; its times are read as floating")
                    return

    def _skip(self, uid: str, reason: str) -> None:
        self.malformed += 1
        self._note(f"event '{_excerpt(uid)}' skipped: {reason}")

    def _note(self, note: str) -> None:
        if len(self.notes) < _NOTES_KEPT:
            self.notes.append(note)


def _malformation(events: list[Component]) -> str | None:
    """Why a series cannot be expanded, found before expanding it, or None."""
    for event in events:
        broken = sorted({str(name) for name, _ in event.errors if name in _TIME_PROPERTIES})
        if broken:
            return f"unreadable {', '.join(broken)}"
        if _moment(event, "DTSTART") is None:
            return "no DTSTART date or time"
        if _ends_before_start(_moment(event, "DTSTART"), _moment(event, "DTEND")):
            return "its DTEND is before its DTSTART"
        if len(event.walk("VEVENT")) > 1:
            return "an event nested in an event"
        for rule in _rules(event):
            frequency = str(_part(rule, "FREQ", "")).upper()
            if frequency not in _PERIOD_SECONDS:
                return f"unknown repetition frequency '{_excerpt(frequency)}'"
            interval = _part(rule, "INTERVAL", 1)
            # A zero interval makes the rule engine loop for ever.
            if not isinstance(interval, int) or interval < 1:
                return "a repetition interval below 1"
            if frequency not in _FRUITLESS_SEARCH_COST and not _always_matches(
                    frequency, rule, _moment(event, "DTSTART") or date.min):
                return "a daily or finer repetition rule whose filters may never match"
    return None


def _ends_before_start(start: date | None, end: date | None) -> bool:
    """Whether ``end`` is before ``start`` where the two compare exactly: two dates, two
    zoned times or two floating ones (RFC 5545 wants the end later; the library would
    otherwise turn the event round)."""
    if start is None or end is None or isinstance(start, datetime) != isinstance(end, datetime):
        return False
    if isinstance(start, datetime) and isinstance(end, datetime) \
            and (start.tzinfo is None) != (end.tzinfo is None):
        return False
    return end < start


def _rule_cost(rule: Any, first: date, window: datetime) -> tuple[float, float]:
    """Upper bounds of the repetitions a rule steps through from its ``first`` to ``window``
    (or its UNTIL or COUNT), a fruitless search counted in, and of its repetitions per
    second."""
    frequency = str(_part(rule, "FREQ")).upper()
    period = _PERIOD_SECONDS[frequency] * int(_part(rule, "INTERVAL", 1))
    per_period = _days_per_period(frequency, rule)
    for part in _MULTIPLYING_TIME_PARTS.get(frequency, _ALL_TIME_PARTS):
        per_period *= len(_parts(rule, part)) or 1
    end = window
    until = _part(rule, "UNTIL")
    if isinstance(until, date):
        end = min(end, _rough_utc(until))
    before = max(0.0, (end - _rough_utc(first)).total_seconds()) / period * per_period
    count = _part(rule, "COUNT")
    if isinstance(count, int):
        before = min(before, max(count, 0))
    if not _always_matches(frequency, rule, first):
        before += _FRUITLESS_SEARCH_COST.get(frequency, 0)
    return before, min(1.0, per_period / period)


def _always_matches(frequency: str, rule: Any, first: date) -> bool:
    """Whether a rule's day filters provably match again and again, as the rules calendar
    programs write do: weekdays (the fifth at most in a month), days of the month that exist
    in one of its months, a set position within the weekdays of a period. False is no proof
    of the opposite."""
    filters = {part for part in _DAY_FILTERS if _parts(rule, part)}
    found = [_WEEKDAY.fullmatch(str(day).upper()) for day in _parts(rule, "BYDAY")]
    weekdays = {day.group(2) for day in found if day is not None}
    numbers = [abs(int(day.group(1))) for day in found if day is not None and day.group(1)]
    months, days, positions = (_numbers(rule, part) for part in ("BYMONTH", "BYMONTHDAY",
                                                                 "BYSETPOS"))
    if None in found or months is None or days is None or positions is None:
        return False
    months = months or list(range(1, 13))
    if positions:
        # How many times, at least, each listed weekday comes in one period of the rule.
        each = {"WEEKLY": 1, "MONTHLY": 4, "YEARLY": 4 if "BYMONTH" in filters else 52}
        candidates = each[frequency] * len(weekdays) if frequency in each else 1
        return filters <= {"BYDAY", "BYMONTH"} and bool(weekdays) and not numbers \
            and all(1 <= abs(position) <= candidates for position in positions)
    if filters <= {"BYDAY", "BYMONTH"} and "BYDAY" in filters:
        return all(number <= (5 if frequency == "MONTHLY" or "BYMONTH" in filters else 53)
                   for number in numbers)
    if filters <= {"BYMONTH", "BYMONTHDAY"}:
        if not days and frequency in ("MONTHLY", "YEARLY"):
            days = [first.day]  # the rule engine takes the day of the month from the start
            if frequency == "YEARLY" and "BYMONTH" not in filters:
                months = [first.month]
        return not days or any(1 <= abs(day) <= _LONGEST_MONTH[month - 1]
                               for day in days for month in months if 1 <= month <= 12)
    return filters in ({"BYYEARDAY"}, {"BYWEEKNO"})


def _days_per_period(frequency: str, rule: Any) -> int:
    """At most how many days of one period a rule picks."""
    if frequency == "WEEKLY":
        return len(_parts(rule, "BYDAY")) or 1
    if frequency == "MONTHLY":
        return 31 if _parts(rule, "BYDAY") or _parts(rule, "BYMONTHDAY") else 1
    if frequency == "YEARLY":
        if any(_parts(rule, part) for part in _DAY_FILTERS if part != "BYMONTH"):
            return 366
        return len(_parts(rule, "BYMONTH")) or 1
    return 1


def _numbers(rule: Any, name: str) -> list[int] | None:
    """A rule part's whole numbers; None when one of them is something else."""
    values = _parts(rule, name)
    numbers = [value for value in values if isinstance(value, int)]
    return numbers if len(numbers) == len(values) else None


def _rules(event: Component) -> list[Any]:
    return _values(event, "RRULE")


def _extra_dates(event: Component) -> list[date]:
    """The RDATE values of an event: dates, times, and the starts of periods."""
    found: list[date] = []
    for values in _values(event, "RDATE"):
        for value in getattr(values, "dts", []):
            moment = value.dt[0] if isinstance(value.dt, tuple) else value.dt
            if isinstance(moment, date):
                found.append(moment)
    return found


def _moment(component: Component, name: str) -> date | None:
    """A property's date or time; None when it is absent, repeated or of another kind."""
    value = getattr(component.get(name), "dt", None)
    return value if isinstance(value, date) else None


def _values(component: Component, name: str) -> list[Any]:
    """A property's values as a list: absent, once or repeated."""
    value = component.get(name)
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _parts(rule: Any, name: str) -> list[Any]:
    value = rule.get(name)
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _part(rule: Any, name: str, default: Any = None) -> Any:
    values = _parts(rule, name)
    return values[0] if values else default


def _text(component: Component, name: str) -> str:
    values = _values(component, name)
    return str(values[0]).strip() if values else ""


def _parameter(address: Any, name: str) -> str:
    return str(getattr(address, "params", {}).get(name, "")).upper()


def _mailto(address: Any) -> str | None:
    """The lower-case email of a ``mailto:`` address, None for any other kind."""
    text = str(address).strip()
    if text[:7].lower() != "mailto:":
        return None
    email = text[7:].strip().lower()
    return email if _EMAIL.fullmatch(email) else None


def _unique(emails: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(emails))


def _place(value: date, zone: tzinfo) -> datetime:
    """A feed's date or time in UTC: a date is the start of that day in ``zone``, a floating
    time a wall-clock time there, a time with a zone the instant it names."""
    if not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day, tzinfo=zone).astimezone(UTC)
    if value.tzinfo is None:
        return value.replace(tzinfo=zone).astimezone(UTC)
    return value.astimezone(UTC)


def _rough_utc(value: date) -> datetime:
    """UTC for comparisons that allow a day's error: dates and floating times read as UTC."""
    if not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # a zoned time at the very edge of the calendar
        return value.replace(tzinfo=UTC)


def _excerpt(text: str, limit: int = 80) -> str:
    """Feed text fit for a message: printable, one line, short."""
    text = _UNPRINTABLE.sub(" ", text).strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"
