"""Time parsing and formatting: a leaf module that the domain and every I/O layer may import."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# Surrounding blanks are allowed on purpose; fullmatch, as "$" would accept a final "\n".
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)\s*")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """Parse ``"500ms"``, ``"5s"``, ``"5m"``, ``"1h"`` or ``"1d"``; raise ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"expected a duration string like '5s', got {type(text).__name__}")
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration like '500ms', '5s', '5m' or '1h'")
    number, unit = match.groups()
    try:
        return timedelta(seconds=float(number) * _UNIT_SECONDS[unit])
    except OverflowError:  # "99999999999999999999d": bad input, not a crash
        raise ValueError(f"{text!r} is too long a duration") from None


# RFC 3339's date-time: seconds required, a fraction of any length, an offset; the offset's
# colon may be left out, as Jira writes its times ("2026-11-30T08:00:00.000+0000"). What else
# ``fromisoformat`` reads (week dates, the basic format, an offset with seconds) is refused.
_RFC3339 = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}"
                      r"(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:?[0-9]{2})\Z")


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp with an offset (``Z`` or ``+08:00``) into an aware datetime."""
    if not isinstance(text, str):
        raise ValueError(f"expected an RFC 3339 time string, got {type(text).__name__}")
    if not _RFC3339.match(text):
        if _RFC3339.match(text + "Z"):
            raise ValueError(f"{text!r} has no UTC offset; RFC 3339 times need 'Z' or '+HH:MM'")
        raise ValueError(f"{text!r} is not an RFC 3339 time")
    try:
        value = datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time") from None
    try:  # 9999-12-31T23:59:59-23:59 is a time no UTC datetime can hold: every use would fail
        value.astimezone(UTC)
    except OverflowError:
        raise TimeOutOfRange(f"{text!r} is out of range: in UTC it falls outside the years 1 "
                             f"to 9999") from None
    return value


# The times the service takes from its users for the calendar (time off, a dry run's "now"):
# far enough from datetime's limits that showing them in any zone cannot overflow.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)


def parse_business_now(text: str) -> datetime:
    """A dry run's "now" (``dryrun.overwrite_data.now``, ``policy test --now``): an RFC 3339
    time from ``EARLIEST`` up to ``LATEST``; ValueError otherwise."""
    value = parse_rfc3339(text)
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"{text!r} is not between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}")
    return value


class TimeOutOfRange(ValueError):
    """An RFC 3339 time that is well formed but past either end of the years a UTC datetime
    holds once its offset is applied."""


def zone_named(name: str) -> ZoneInfo | None:
    """The IANA time zone ``name``; None when there is none by that name. Names that are no
    zone at all (a directory of the database such as "America", a path, a name too long for
    a file name) are None too, not an error of the file system."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("naive datetimes are not accepted; attach a zone")
    return value.astimezone(UTC)


@overload
def format_time(value: datetime) -> str: ...
@overload
def format_time(value: datetime | None) -> str | None: ...


def format_time(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with ``Z`` and millisecond precision, as every API answer carries."""
    if value is None:
        return None
    return to_utc(value).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
