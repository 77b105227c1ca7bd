"""Availability settings and time off read from JSON (an HTTP body, a stored engineer record,
a time-off entry given on the command line), checked with the conventions of ``checks.py``:
every problem names its field path and quotes the value. What they mean for an assignment is
``availability.py``'s.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from functools import cache, lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from ticket_dispatcher.domain.availability import (
    ANY_TIME,
    AvailabilitySettings,
    Span,
    TimeOff,
    WorkingHours,
)
from ticket_dispatcher.domain.catalog import WEEKDAYS
from ticket_dispatcher.domain.checks import (
    INT32_MAX,
    Problems,
    at,
    check_keys,
    check_object,
    quote,
    reason,
)
from ticket_dispatcher.domain.model import Engineer
from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.timeutil import (
    EARLIEST,
    LATEST,
    TimeOutOfRange,
    parse_rfc3339,
    to_utc,
)

log = logging.getLogger(__name__)

MAX_SPANS_PER_DAY = 24
MAX_TIME_OFF_REASON = 500  # characters

_SPAN = re.compile(r"([0-9]{2}):([0-9]{2})-([0-9]{2}):([0-9]{2})")
_SETTINGS_KEYS = ("timezone", "working_hours", "max_open_issues")
_TIME_OFF_KEYS = ("start", "end", "reason")
_TIME_OFF_SERVER_KEYS = frozenset({"id", "email", "source"})


# --- an engineer's settings -----------------------------------------------------------------


def settings_of(engineer: Engineer) -> AvailabilitySettings:
    """The engineer's settings for judging and showing them; any time and no cap when they no
    longer read (a zone the installed tzdata dropped), which is what they meant before they
    were set. Logged, so that someone fixes the record."""
    try:
        return settings_from_engineer(engineer)
    except InvalidInput:
        log.warning("an engineer's availability settings do not read; taken as any time",
                    extra={"engineer": engineer.email})
        return ANY_TIME



def settings_from_engineer(engineer: Engineer) -> AvailabilitySettings:
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
