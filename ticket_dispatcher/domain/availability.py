"""Whether an engineer can take an issue now: on time off, outside their working hours, or at
capacity, each asked on its own and combined, and the verdicts an assign action chooses among.

Settings and time off arrive as JSON (an HTTP body, a stored record) and are checked with the
conventions of ``checks.py``: every problem names its field path and quotes the value. Working
hours are wall-clock spans in the engineer's own zone, so a clock change moves them in UTC, and
every sentence shows times in that zone.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum
from functools import cache, lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from ticket_dispatcher.domain.catalog import WEEKDAYS
from ticket_dispatcher.domain.checks import (
    INT32_MAX,
    Problems,
    at,
    check_keys,
    check_object,
    printable,
    quote,
    reason,
)
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.timeutil import (
    EARLIEST,
    LATEST,
    TimeOutOfRange,
    format_time,
    parse_rfc3339,
    to_utc,
)

log = logging.getLogger(__name__)

LOOKAHEAD = timedelta(days=14)  # how far ahead the next working span is looked for
MAX_SPANS_PER_DAY = 24
MAX_TIME_OFF_REASON = 500  # characters
MAX_SHOWN_REASON = 100  # characters of a time-off reason that a sentence shows

_DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_SPAN = re.compile(r"([0-9]{2}):([0-9]{2})-([0-9]{2}):([0-9]{2})")
_SETTINGS_KEYS = ("timezone", "working_hours", "max_open_issues")
_TIME_OFF_KEYS = ("start", "end", "reason")
_TIME_OFF_SERVER_KEYS = frozenset({"id", "email", "source"})
_PROBE = timedelta(days=1)  # zones change their offset a few times a year at most


# --- settings -------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Span:
    """Part of a day in minutes after local midnight: ``start`` inclusive, ``end`` exclusive
    (1440 is "24:00")."""

    start: int
    end: int

    def contains(self, minute: int) -> bool:
        return self.start <= minute < self.end

    def to_json(self) -> str:
        return f"{_hhmm(self.start)}-{_hhmm(self.end)}"


@dataclass(frozen=True)
class WorkingHours:
    """Each weekday's spans, Monday first, sorted and not overlapping; no span is a day off."""

    days: tuple[tuple[Span, ...], ...]

    def within(self, local: datetime) -> bool:
        """Whether wall-clock time ``local`` falls in a span. Seconds are dropped, so 17:59:59
        is inside "09:00-18:00" and 18:00 is not."""
        minute = local.hour * 60 + local.minute
        return any(span.contains(minute) for span in self.days[local.weekday()])

    def to_json(self) -> dict[str, list[str]]:
        """Every weekday key, Monday first, each day's spans sorted: parsing it gives these
        hours back, and a body written this way comes back unchanged."""
        return {key: [span.to_json() for span in spans]
                for key, spans in zip(WEEKDAYS, self.days, strict=True)}


@dataclass(frozen=True)
class AvailabilitySettings:
    """An engineer's IANA zone, working hours (None: any time) and own cap on open issues
    (None: no cap). ``zone`` is the loaded ``timezone``."""

    timezone: str = "UTC"
    working_hours: WorkingHours | None = None
    max_open_issues: int | None = None
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "zone", ZoneInfo(self.timezone))

    def to_json(self) -> dict[str, Any]:
        hours = self.working_hours
        return {
            "timezone": self.timezone,
            "working_hours": hours.to_json() if hours is not None else None,
            "max_open_issues": self.max_open_issues,
        }

    @classmethod
    def from_engineer(cls, engineer: Engineer) -> AvailabilitySettings:
        """The settings an engineer record holds (an empty zone reads as UTC). InvalidInput
        when they no longer pass the checks, such as a zone the installed tzdata dropped.
        Parsed once for each distinct set of settings: every assignment judges its
        candidates by them."""
        hours = engineer.working_hours
        days = None if hours is None else tuple(
            (day, tuple(spans) if isinstance(spans, list) else spans)
            for day, spans in sorted(hours.items()))
        try:
            return _parsed(engineer.timezone or "UTC", days, engineer.max_open_issues)
        except InvalidInput as exc:
            raise InvalidInput(f"the availability settings of {engineer.email} are invalid",
                               exc.problems) from None


def settings_of(engineer: Engineer) -> AvailabilitySettings:
    """The engineer's settings for judging and showing them; any time and no cap when they no
    longer read (a zone the installed tzdata dropped), which is what they meant before they
    were set. Logged, so that someone fixes the record."""
    try:
        return AvailabilitySettings.from_engineer(engineer)
    except InvalidInput:
        log.warning("an engineer's availability settings do not read; taken as any time",
                    extra={"engineer": engineer.email})
        return ANY_TIME


@lru_cache(maxsize=4096)
def _parsed(timezone: str, days: tuple[tuple[str, Any], ...] | None,
            cap: int | None) -> AvailabilitySettings:
    hours = None if days is None else {day: list(spans) if isinstance(spans, tuple) else spans
                                       for day, spans in days}
    settings, problems = parse_availability_settings(
        {"timezone": timezone, "working_hours": hours, "max_open_issues": cap})
    if settings is None:
        raise InvalidInput("invalid availability settings", problems)
    return settings


ANY_TIME = AvailabilitySettings()  # an engineer without settings: UTC, any time, no cap


def parse_availability_settings(
    raw: Any, path: str = ""
) -> tuple[AvailabilitySettings | None, Problems]:
    """An engineer's availability settings from JSON (a body, or the object at ``path`` in
    one): the settings and no problems, or None and every problem found.

    ``timezone``: an IANA name; "UTC" when absent, but required with working hours, which are
    read in it. ``working_hours``: null or absent for any time; otherwise an object of weekday
    keys ``mon`` … ``sun``, each a list of local "HH:MM-HH:MM" spans ("24:00" may end one) that
    neither overlap nor cross midnight; a key absent or an empty list is a day off.
    ``max_open_issues``: an integer of at least 1, or null for no cap.
    """
    problems = Problems()
    if not check_object(raw, path, problems):
        return None, problems
    check_keys(raw, path, _SETTINGS_KEYS, problems)
    timezone: str | None = "UTC"
    if "timezone" in raw:
        timezone = _parse_timezone(raw["timezone"], at(path, "timezone"), problems)
    elif isinstance(raw.get("working_hours"), dict):
        problems.rule(at(path, "timezone"), "is required with working hours, which are read "
                                            "in this zone")
    hours = _parse_working_hours(raw.get("working_hours"), at(path, "working_hours"), problems)
    cap = _parse_cap(raw.get("max_open_issues"), at(path, "max_open_issues"), problems)
    if problems or timezone is None:
        return None, problems
    return AvailabilitySettings(timezone, hours, cap), problems


def _parse_timezone(raw: Any, path: str, problems: Problems) -> str | None:
    if not isinstance(raw, str):
        problems.shape(path, 'must be a string: an IANA time zone like "Europe/Paris"')
        return None
    if raw in _known_zones():
        try:
            ZoneInfo(raw)
            return raw
        except (KeyError, ValueError, OSError):  # listed, but its file is missing or broken
            pass
    problems.rule(path, f'unknown time zone {quote(raw)}; use an IANA name like "Europe/Paris" '
                        'or "UTC"')
    return None


@cache
def _known_zones() -> frozenset[str]:
    """The IANA names, read once. A name is looked up here before ZoneInfo opens a file, so a
    key like "../etc/passwd" never reaches the file system. "localtime" is a host's alias."""
    return frozenset(available_timezones() - {"localtime"})


def _parse_working_hours(raw: Any, path: str, problems: Problems) -> WorkingHours | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        problems.shape(path, "must be an object of weekday keys, or null for any time")
        return None
    days: list[tuple[Span, ...]] = [() for _ in WEEKDAYS]
    for key, value in raw.items():
        if key in WEEKDAYS:
            days[WEEKDAYS.index(key)] = _parse_day(value, at(path, key), problems)
        else:
            problems.shape(at(path, key), f"unknown weekday {quote(key)}; use "
                                          f"{', '.join(WEEKDAYS)}")
    return WorkingHours(tuple(days))


def _parse_day(raw: Any, path: str, problems: Problems) -> tuple[Span, ...]:
    """One day's spans, sorted; each overlap named once, at the later-listed span's path."""
    if not isinstance(raw, list):
        problems.shape(path, 'must be a list of "HH:MM-HH:MM" spans')
        return ()
    if len(raw) > MAX_SPANS_PER_DAY:
        problems.rule(path, f"has {len(raw)} spans; at most {MAX_SPANS_PER_DAY} a day")
        return ()
    parsed: list[tuple[Span, int]] = []
    for index, item in enumerate(raw):
        span = _parse_span(item, at(path, index), problems)
        if span is not None:
            parsed.append((span, index))
    parsed.sort()
    reach: tuple[Span, int] | None = None  # the span reaching latest so far
    for span, index in parsed:
        if reach is not None and span.start < reach[0].end:
            first, second = sorted((index, reach[1]))
            problems.rule(at(path, second), f"{quote(raw[second])} overlaps {quote(raw[first])}")
        if reach is None or span.end > reach[0].end:
            reach = (span, index)
    return tuple(span for span, _ in parsed)


def _parse_span(raw: Any, path: str, problems: Problems) -> Span | None:
    if not isinstance(raw, str):
        problems.shape(path, 'must be a string like "09:00-18:00"')
        return None
    match = _SPAN.fullmatch(raw)
    if match is None:
        problems.rule(path, f'{quote(raw)} is not a span "HH:MM-HH:MM" like "09:00-18:00"')
        return None
    start_hour, start_minute, end_hour, end_minute = (int(part) for part in match.groups())
    start, end = start_hour * 60 + start_minute, end_hour * 60 + end_minute
    if start_hour > 23 or start_minute > 59 or end_minute > 59 or end > 1440:
        problems.rule(path, f"{quote(raw)} is not a span of times from 00:00 to 23:59 "
                            "(24:00 may end it)")
        return None
    if end < start:
        problems.rule(path, f"{quote(raw)}: end before start; a span does not cross midnight "
                            "(split it at 24:00)")
        return None
    if end == start:
        problems.rule(path, f"{quote(raw)}: end equals start; a span must not be empty")
        return None
    return Span(start, end)


def _parse_cap(raw: Any, path: str, problems: Problems) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        problems.shape(path, "must be an integer, or null for no cap")
        return None
    if raw < 1:
        problems.rule(path, f"{quote(raw)} is not at least 1; use null for no cap")
        return None
    if raw > INT32_MAX:
        problems.shape(path, f"{quote(raw)} is larger than {INT32_MAX}")
        return None
    return raw


# --- time off -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeOff:
    """A stretch ``[start, end)`` (aware, UTC) in which an engineer takes no issue. ``source``
    says where it came from: "api", or a calendar feed's name; ``id`` is None until stored."""

    id: int | None
    email: str
    start: datetime
    end: datetime
    reason: str = ""
    source: str = "api"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "email": self.email,
            "start": format_time(self.start),
            "end": format_time(self.end),
            "reason": self.reason,
            "source": self.source,
        }


def parse_time_off(
    raw: Any, email: str, *, source: str = "api", path: str = ""
) -> tuple[TimeOff | None, Problems]:
    """Time off for ``email`` from a create body ``{"start", "end", "reason"?}``: RFC 3339
    times with an offset ("Z" or "+08:00"), end after start, a reason of at most
    ``MAX_TIME_OFF_REASON`` characters. The time off (id None, UTC times) and no problems, or
    None and every problem found."""
    problems = Problems()
    if not check_object(raw, path, problems):
        return None, problems
    check_keys(raw, path, _TIME_OFF_KEYS, problems, required=("start", "end"),
               server_keys=_TIME_OFF_SERVER_KEYS)
    start = _parse_moment(raw["start"], at(path, "start"), problems) if "start" in raw else None
    end = _parse_moment(raw["end"], at(path, "end"), problems) if "end" in raw else None
    if start is not None and end is not None and end <= start:
        problems.rule(at(path, "end"), f"{quote(raw['end'])} is not after start "
                                       f"{quote(raw['start'])}")
    note = _parse_reason(raw.get("reason"), at(path, "reason"), problems)
    if problems or start is None or end is None:
        return None, problems
    return TimeOff(None, email, start, end, note, source), problems


def _parse_moment(raw: Any, path: str, problems: Problems) -> datetime | None:
    if not isinstance(raw, str):
        problems.shape(path, 'must be an RFC 3339 time like "2026-12-01T09:00:00+08:00"')
        return None
    try:
        moment = to_utc(parse_rfc3339(raw))
    except TimeOutOfRange:  # past either end of datetime's range once in UTC: out of range
        moment = LATEST
    except ValueError as exc:
        problems.rule(path, reason(exc, raw))
        return None
    if not EARLIEST <= moment < LATEST:
        problems.rule(path, f"{quote(raw)} is not between {EARLIEST:%Y-%m-%d} and "
                            f"{LATEST:%Y-%m-%d}")
        return None
    return moment


def _parse_reason(raw: Any, path: str, problems: Problems) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        problems.shape(path, "must be a string")
        return ""
    if len(raw) > MAX_TIME_OFF_REASON:
        problems.rule(path, f"{quote(raw)} is {len(raw)} characters long; at most "
                            f"{MAX_TIME_OFF_REASON}")
    return raw


# --- evaluation -----------------------------------------------------------------------------


class Unavailable(StrEnum):
    """Why an engineer cannot take an issue: the machine-readable twin of each sentence."""

    TIME_OFF = "time_off"
    OUTSIDE_WORKING_HOURS = "outside_working_hours"
    AT_CAPACITY = "at_capacity"


@dataclass(frozen=True)
class Hindrance:
    """One reason an engineer is unavailable: its code, a sentence with times in their zone,
    and when it lifts at the earliest (None: not known, or not within ``LOOKAHEAD``)."""

    code: Unavailable
    sentence: str
    until: datetime | None = None


@dataclass(frozen=True)
class Availability:
    """Whether an engineer is available, and if not why (sentences, and their codes in the
    same order) and when at the earliest they are again (None when available now, or when no
    time is known: capacity lifts when issues close, not at a time)."""

    available: bool
    reasons: tuple[str, ...] = ()
    codes: tuple[Unavailable, ...] = ()
    until: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reasons": list(self.reasons),
            "codes": [code.value for code in self.codes],
            "until": format_time(self.until),
        }


def covering(time_off: Iterable[TimeOff], at: datetime) -> list[TimeOff]:
    """The entries that make up the time off covering ``at``, by start: the one covering
    ``at``, then each that overlaps the time off so far or starts where it ends and takes it
    further; the last one's end is the time off's. Empty when nothing covers ``at``."""
    back, chain = to_utc(at), list[TimeOff]()
    for entry in sorted(time_off, key=lambda entry: entry.start):
        if entry.start > back:
            break
        if entry.end > back:
            back = entry.end
            chain.append(entry)
    return chain


def on_time_off(
    settings: AvailabilitySettings | None, time_off: Sequence[TimeOff], at: datetime
) -> Hindrance | None:
    """The time off covering ``at``, or None. It lasts until the end of the entry covering
    ``at``, carried on through every entry that overlaps it or starts where it ends; the
    sentence gives that end in the engineer's zone and the reasons of the entries that set it:
    ``on time off until Wed 2026-12-09 18:00 Asia/Shanghai (vacation)``."""
    chain = covering(time_off, at)
    if not chain:
        return None
    back, notes = chain[-1].end, list[str]()
    for entry in chain:
        shown = printable(entry.reason, MAX_SHOWN_REASON)
        if shown and shown not in notes:
            notes.append(shown)
    zone = (settings or ANY_TIME).zone
    why = f" ({', '.join(notes)})" if notes else ""
    return Hindrance(Unavailable.TIME_OFF, f"on time off until {_dated(back, zone)}{why}", back)


def outside_working_hours(
    settings: AvailabilitySettings | None, at: datetime
) -> Hindrance | None:
    """Outside the engineer's working hours at ``at``, or None (also when they have none set:
    any time). Until the start of their next span, looked for within ``LOOKAHEAD``:
    ``outside working hours: Sat 21:15 in Europe/Paris; next at Mon 09:00`` (the next start
    dated when it is a week or more away)."""
    if settings is None or settings.working_hours is None:
        return None
    at = to_utc(at)
    zone = settings.zone
    local = at.astimezone(zone)
    if settings.working_hours.within(local):
        return None
    back = next_working_moment(settings, at)
    nxt = (f"next at {_next_shown(back, local)}" if back is not None
           else f"no working span in the next {LOOKAHEAD.days} days")
    sentence = (f"outside working hours: {_DAY_NAMES[local.weekday()]} {local:%H:%M} in "
                f"{zone.key}; {nxt}")
    return Hindrance(Unavailable.OUTSIDE_WORKING_HOURS, sentence, back)


def at_capacity(open_issues: int | None, cap: int | None) -> Hindrance | None:
    """At capacity when ``open_issues`` reaches ``cap``: ``at capacity: 5 open issues, cap 5``.
    None when either is unknown; no time is known for it to lift."""
    if open_issues is None or cap is None or open_issues < cap:
        return None
    noun = "open issue" if open_issues == 1 else "open issues"
    return Hindrance(Unavailable.AT_CAPACITY, f"at capacity: {open_issues} {noun}, cap {cap}")


def effective_cap(settings: AvailabilitySettings | None, action_cap: int | None) -> int | None:
    """The cap that holds: the smaller of the engineer's own and the action's, when both are
    set; either one alone; None for no cap."""
    own = settings.max_open_issues if settings is not None else None
    caps = [cap for cap in (own, action_cap) if cap is not None]
    return min(caps) if caps else None


def next_working_moment(settings: AvailabilitySettings, since: datetime) -> datetime | None:
    """The first moment at or after ``since`` inside the engineer's working hours (``since``
    itself when they have none), or None when none comes within ``LOOKAHEAD``.

    Exact across clock changes: over a stretch of constant UTC offset the wall clock runs
    evenly, so a span starts there at its wall-clock start or at the stretch's start. A span
    starting in the hour a spring-forward skips begins when the clocks jump; the hour a
    fall-back repeats is inside a span both times."""
    since = to_utc(since)
    hours = settings.working_hours
    if hours is None:
        return since
    for start, end, offset in _offset_stretches(settings.zone, since, since + LOOKAHEAD):
        first = _first_working_wall(hours, _wall(start, offset), _wall(end, offset))
        if first is not None:
            return (first - offset).replace(tzinfo=UTC)
    return None


def availability_at(
    settings: AvailabilitySettings | None,
    time_off: Sequence[TimeOff],
    at: datetime,
    *,
    check_working_hours: bool = True,
    open_issues: int | None = None,
    cap: int | None = None,
) -> Availability:
    """Everything that keeps the engineer from an issue at ``at``: time off, working hours
    (unless ``check_working_hours`` is false) and, when ``open_issues`` is known, capacity
    against ``effective_cap(settings, cap)``. No settings (None): UTC, any time, no own cap.

    ``until`` is the first moment after the time off that is inside working hours (the one
    the working hours alone name when there is no time off); capacity does not move it."""
    at = to_utc(at)
    away = on_time_off(settings, time_off, at)
    outside = outside_working_hours(settings, at) if check_working_hours else None
    full = at_capacity(open_issues, effective_cap(settings, cap))
    hindrances = [hindrance for hindrance in (away, outside, full) if hindrance is not None]
    back: datetime | None = away.until if away is not None else at
    if check_working_hours and settings is not None and back is not None:
        back = next_working_moment(settings, back)
    return Availability(
        available=not hindrances,
        reasons=tuple(hindrance.sentence for hindrance in hindrances),
        codes=tuple(hindrance.code for hindrance in hindrances),
        until=None if back == at else back,
    )


def _dated(moment: datetime, zone: ZoneInfo) -> str:
    """``Wed 2026-12-09 18:00 Asia/Shanghai``."""
    local = moment.astimezone(zone)
    return f"{_DAY_NAMES[local.weekday()]} {local:%Y-%m-%d %H:%M} {zone.key}"


def _next_shown(moment: datetime, local_now: datetime) -> str:
    """``Mon 09:00`` in the zone of ``local_now``; dated when a week or more ahead, where the
    weekday alone would read as this week's."""
    local = moment.astimezone(local_now.tzinfo)
    if (local.date() - local_now.date()).days >= 7:
        return f"{_DAY_NAMES[local.weekday()]} {local:%Y-%m-%d %H:%M}"
    return f"{_DAY_NAMES[local.weekday()]} {local:%H:%M}"


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _wall(moment: datetime, offset: timedelta) -> datetime:
    """The naive wall-clock time of UTC ``moment`` at ``offset``."""
    return (moment + offset).replace(tzinfo=None)


def _first_working_wall(
    hours: WorkingHours, wall_start: datetime, wall_end: datetime
) -> datetime | None:
    """The first wall-clock time in ``[wall_start, wall_end)`` inside a span, or None."""
    day = wall_start.date()
    while day <= wall_end.date():
        midnight = datetime.combine(day, time())
        for span in hours.days[day.weekday()]:  # sorted: the first that fits is the earliest
            first = max(wall_start, midnight + timedelta(minutes=span.start))
            if first < min(wall_end, midnight + timedelta(minutes=span.end)):
                return first
        day += timedelta(days=1)
    return None


def _offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always knows its offset
    return offset


def _offset_stretches(
    zone: ZoneInfo, since: datetime, until: datetime
) -> Iterator[tuple[datetime, datetime, timedelta]]:
    """``(start, end, offset)`` for the consecutive stretches of ``[since, until)`` over which
    the zone's UTC offset does not change."""
    start, offset = since, _offset(zone, since)
    probe = since
    while probe < until:
        step = min(probe + _PROBE, until)
        if _offset(zone, step) != offset:
            change = _offset_change(zone, probe, step)
            yield start, change, offset
            start, offset = change, _offset(zone, change)
        probe = step
    yield start, until, offset


def _offset_change(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The moment between ``before`` and ``after`` (whose offsets differ) at which the offset
    changes, found by halving; transitions fall on whole seconds."""
    low, high = math.floor(before.timestamp()), math.ceil(after.timestamp())
    old = _offset(zone, datetime.fromtimestamp(low, UTC))
    while high - low > 1:
        middle = (low + high) // 2
        if _offset(zone, datetime.fromtimestamp(middle, UTC)) == old:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


# --- judging candidates ---------------------------------------------------------------------


class WorkingHoursMode(StrEnum):
    """How an assign action weighs working hours."""

    IGNORE = "ignore"  # they do not matter
    REQUIRED = "required"  # only those inside their hours are eligible
    PREFERRED = "preferred"  # all are eligible; those inside their hours are taken first


@dataclass(frozen=True)
class CandidateVerdict:
    """One candidate, judged: ``eligible`` to be chosen at all, ``preferred`` when eligible and
    inside working hours where hours count (every eligible one where they do not); ``reasons``
    hold the sentences of ``availability_at``, an eligible one's too (outside hours, preferred
    mode), and ``until`` when at the earliest nothing holds them back in time."""

    email: str
    eligible: bool
    preferred: bool
    reasons: tuple[str, ...] = ()
    codes: tuple[Unavailable, ...] = ()
    until: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "email": self.email,
            "eligible": self.eligible,
            "preferred": self.preferred,
            "reasons": list(self.reasons),
            "codes": [code.value for code in self.codes],
            "until": format_time(self.until),
        }


def judge_candidates(
    candidates: Sequence[str],
    profiles: Mapping[str, AvailabilitySettings],
    time_off: Mapping[str, Sequence[TimeOff]],
    at: datetime,
    *,
    working_hours: WorkingHoursMode | str = WorkingHoursMode.IGNORE,
    cap: int | None = None,
    open_issues: Mapping[str, int] | None = None,
) -> list[CandidateVerdict]:
    """A verdict per candidate, in the given order. Time off at ``at`` rules one out; so does
    being at capacity (open issues at least ``effective_cap`` of their own cap and the
    action's ``cap``; not judged when their count is not in ``open_issues``); and, with
    ``working_hours`` "required", being outside their hours. "preferred" keeps those outside
    eligible but not preferred (``preferred_first``); "ignore" does not look at hours. A
    candidate without a profile is available any time, with no cap of their own."""
    mode = WorkingHoursMode(working_hours)
    counts = open_issues or {}
    verdicts = []
    for email in candidates:
        state = availability_at(
            profiles.get(email), time_off.get(email, ()), at,
            check_working_hours=mode is not WorkingHoursMode.IGNORE,
            open_issues=counts.get(email), cap=cap,
        )
        outside = Unavailable.OUTSIDE_WORKING_HOURS in state.codes
        eligible = (Unavailable.TIME_OFF not in state.codes
                    and Unavailable.AT_CAPACITY not in state.codes
                    and not (outside and mode is WorkingHoursMode.REQUIRED))
        verdicts.append(CandidateVerdict(email, eligible, eligible and not outside,
                                         state.reasons, state.codes, state.until))
    return verdicts


def preferred_first(verdicts: Sequence[CandidateVerdict]) -> list[CandidateVerdict]:
    """The eligible verdicts, the preferred (inside their hours) first, each group in the
    given order; when none or all are preferred, simply the given order."""
    eligible = [verdict for verdict in verdicts if verdict.eligible]
    return ([verdict for verdict in eligible if verdict.preferred]
            + [verdict for verdict in eligible if not verdict.preferred])


def no_eligible_candidate_reason(verdicts: Sequence[CandidateVerdict]) -> str:
    """Why no candidate could be chosen, naming each one passed over and why:
    ``no eligible candidate: a@x.com on time off until …; b@x.com outside working hours: …``
    (one candidate's several reasons joined by " and ")."""
    passed_over = [f"{verdict.email} {' and '.join(verdict.reasons)}"
                   for verdict in verdicts if not verdict.eligible]
    return "no eligible candidate: " + ("; ".join(passed_over) or "no candidates")
