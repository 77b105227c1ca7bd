"""Whether an engineer can take an issue now: on time off, outside their working hours, or at
capacity, each asked on its own and combined, and the verdicts an assign action chooses among.

The settings and time off judged here are read from JSON by ``availability_parsing.py``.
Working hours are wall-clock spans in the engineer's own zone, so a clock change moves them in
UTC, and every sentence shows times in that zone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from ticket_dispatcher.domain.catalog import WEEKDAYS
from ticket_dispatcher.domain.checks import printable
from ticket_dispatcher.timeutil import format_time, to_utc

LOOKAHEAD = timedelta(days=14)  # how far ahead the next working span is looked for
MAX_SHOWN_REASON = 100  # characters of a time-off reason that a sentence shows

_DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
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


ANY_TIME = AvailabilitySettings()  # an engineer without settings: UTC, any time, no cap


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
