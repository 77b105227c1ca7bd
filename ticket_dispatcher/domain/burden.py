"""The burden report: who was given how much work, who was interrupted and when, how fast each
person acknowledged, and whether each rotation shared its assignments evenly over the time its
members could be given work (docs/burden-report.md).

Pure: the store reads the rows (``BurdenRow``), the engineers' settings and time off, and this
module counts. Interruption bands are judged in each person's own zone and hours.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from ticket_dispatcher.domain.actions.notification_state import AckSource
from ticket_dispatcher.domain.availability import (
    ANY_TIME,
    AvailabilitySettings,
    TimeOff,
    WorkingHours,
)
from ticket_dispatcher.domain.burden_events import BurdenKind
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.timeutil import format_time, to_utc

DEFAULT_PERIOD = timedelta(days=28)
MAX_PERIOD = timedelta(days=400)
SLEEP_FROM, SLEEP_UNTIL = 22, 8  # local hours: sleep is 22:00–08:00
DEFAULT_DAY = (8, 18)  # business hours without working hours: 08:00–18:00, Monday to Friday
ACK_SOURCES = (AckSource.CARD_READ, AckSource.STATUS_CHANGE, AckSource.BUTTON)


class Band(StrEnum):
    BUSINESS = "business"
    OFF = "off"
    SLEEP = "sleep"


_BAND_NAMES = tuple((band, band.value) for band in Band)


def band_of(moment: datetime, settings: AvailabilitySettings) -> Band:
    """The band of ``moment`` for a person: their working hours (or 08:00–18:00 on weekdays
    when none are set) are business, 22:00–08:00 outside them is sleep, the rest is off."""
    local = to_utc(moment).astimezone(settings.zone)
    hours = settings.working_hours
    if hours is not None:
        if hours.within(local):
            return Band.BUSINESS
    elif local.weekday() < 5 and DEFAULT_DAY[0] <= local.hour < DEFAULT_DAY[1]:
        return Band.BUSINESS
    if local.hour >= SLEEP_FROM or local.hour < SLEEP_UNTIL:
        return Band.SLEEP
    return Band.OFF


class ScopeKind(StrEnum):
    EVERYONE = "everyone"
    POLICY = "policy"
    PROJECT = "project"
    ROTATION = "rotation"


@dataclass(frozen=True)
class BurdenQuery:
    """A period ``[since, until)`` and a scope: a policy's name, a project, a rotation, or
    everyone (``value`` empty)."""

    since: datetime
    until: datetime
    scope: ScopeKind = ScopeKind.EVERYONE
    value: str = ""

    @classmethod
    def of(cls, since: datetime | None, until: datetime | None, now: datetime, *,
           policy: str | None = None, project: str | None = None,
           rotation: str | None = None) -> BurdenQuery:
        """The query asked for, the last ``DEFAULT_PERIOD`` by default; ``InvalidInput``
        naming the parameter when the period is backwards or too long, or more than one
        scope is given."""
        until = to_utc(until) if until is not None else to_utc(now)
        since = to_utc(since) if since is not None else until - DEFAULT_PERIOD
        if since > until:
            raise InvalidInput("from must not be after to", [Problem("from", "after to")])
        if until - since > MAX_PERIOD:
            raise InvalidInput(f"the period is longer than {MAX_PERIOD.days} days",
                               [Problem("to", f"at most {MAX_PERIOD.days} days after from")])
        given = [(kind, value) for kind, value in ((ScopeKind.POLICY, policy),
                                                   (ScopeKind.PROJECT, project),
                                                   (ScopeKind.ROTATION, rotation))
                 if value is not None]
        if len(given) > 1:
            raise InvalidInput("give at most one of policy, project and rotation",
                               [Problem(given[1][0].value, "only one scope at a time")])
        for kind, value in given:
            if not value.strip():
                raise InvalidInput(f"{kind.value} must not be empty",
                                   [Problem(kind.value, "empty")])
            return cls(since, until, kind, value.strip())
        return cls(since, until)


@dataclass(frozen=True, slots=True)
class Tally:
    """How many stored events share these values (burden_events.BurdenEvent): the store
    counts them, the report adds them up."""

    kind: BurdenKind
    email: str
    count: int
    policy_family_id: str = ""
    rotation: str = ""
    leader: str = ""
    band: Band | None = None  # an interruption's, as judged when it was sent


@dataclass(frozen=True, slots=True)
class Membership:
    """Whom a rotation's receiver resolved to for one of its assignments, and whether that
    assign action required working hours."""

    rotation: str
    members: tuple[str, ...]
    hours_required: bool = False


@dataclass
class BurdenData:
    """What the store read for one report."""

    tallies: list[Tally] = field(default_factory=list)
    # each card's time to acknowledge, in seconds from its sending to the ACK's own time
    acks: dict[tuple[str, AckSource], list[float]] = field(default_factory=dict)
    memberships: list[Membership] = field(default_factory=list)
    open_counts: Mapping[str, int] = field(default_factory=dict)  # the latest read, by email
    pages_by_day: dict[datetime, int] = field(default_factory=dict)  # UTC midnight: pages


@dataclass(frozen=True)
class Availabilities:
    """What the report needs to know of the people it names: their settings (UTC, any time,
    when they have none) and their time off within the period."""

    settings: Mapping[str, AvailabilitySettings]
    time_off: Mapping[str, Sequence[TimeOff]]

    def of(self, email: str) -> AvailabilitySettings:
        return self.settings.get(email, ANY_TIME)


def percentiles(samples: Sequence[float]) -> dict[str, float | None]:
    """p50 and p90 (linear between the closest ranks); null without a sample."""
    if not samples:
        return {"p50": None, "p90": None}
    ordered = sorted(samples)
    return {"p50": _rank(ordered, 0.5), "p90": _rank(ordered, 0.9)}


def _rank(ordered: Sequence[float], q: float) -> float:
    at = (len(ordered) - 1) * q
    low, high = math.floor(at), math.ceil(at)
    value = ordered[low] + (ordered[high] - ordered[low]) * (at - low)
    return round(value, 3)


@dataclass
class PersonBurden:
    email: str
    assigned_by_policy: Counter[str] = field(default_factory=Counter)
    open_now: int | None = None
    counts: Counter[BurdenKind] = field(default_factory=Counter)
    escalations_received: int = 0
    bands: Counter[Band] = field(default_factory=Counter)
    ack: dict[AckSource, list[float]] = field(default_factory=lambda: defaultdict(list))

    def to_json(self) -> dict[str, Any]:
        every = [seconds for samples in self.ack.values() for seconds in samples]
        return {
            "email": self.email,
            "assigned": self.counts[BurdenKind.ASSIGNMENT],
            "assigned_by_policy": dict(sorted(self.assigned_by_policy.items())),
            "open_now": self.open_now,
            "cards": self.counts[BurdenKind.CARD],
            "urgent": self.counts[BurdenKind.URGENT],
            "pages": self.counts[BurdenKind.PAGE],
            "escalations_received": self.escalations_received,
            "escalations_away": self.counts[BurdenKind.ESCALATION],
            "interruptions": {name: self.bands[band] for band, name in _BAND_NAMES},
            "ack_seconds": {**percentiles(every), "by_source": {
                source.value: percentiles(self.ack.get(source, [])) for source in ACK_SOURCES}},
        }


def build_report(query: BurdenQuery, data: BurdenData, *, policy_names: Mapping[str, str],
                 people: Availabilities, complete_from: datetime | None) -> dict[str, Any]:
    """The report's JSON (docs/burden-report.md names every field)."""
    persons: dict[str, PersonBurden] = {}
    rotations: defaultdict[str, RotationTally] = defaultdict(RotationTally)

    def person(email: str) -> PersonBurden:
        if email not in persons:
            persons[email] = PersonBurden(email)
        return persons[email]

    for tally in data.tallies:
        who = person(tally.email)
        who.counts[tally.kind] += tally.count
        if tally.kind is BurdenKind.ASSIGNMENT:
            policy = policy_names.get(tally.policy_family_id, tally.policy_family_id)
            who.assigned_by_policy[policy] += tally.count
            rotations[tally.rotation].count(tally)
        elif tally.kind.interrupts and tally.band is not None:
            who.bands[tally.band] += tally.count
        elif tally.kind is BurdenKind.ESCALATION and tally.leader:
            person(tally.leader).escalations_received += tally.count
    for (email, source), seconds in data.acks.items():
        person(email).ack[source].extend(seconds)
    for membership in data.memberships:
        if membership.rotation in rotations:  # one with work in the scope
            rotations[membership.rotation].join(membership)
    for rotation in rotations.values():
        for member in rotation.members:
            person(member)
    for email, who in persons.items():
        who.open_now = data.open_counts.get(email)
    eligible: dict[tuple[str, bool], float] = {}  # a person in several rotations: once

    def hours_of(email: str, within_hours: bool) -> float:
        if (email, within_hours) not in eligible:
            eligible[email, within_hours] = eligible_hours(
                query.since, query.until, people.of(email), people.time_off.get(email, ()),
                within_hours=within_hours)
        return eligible[email, within_hours]

    weekly: Counter[datetime] = Counter()
    for day, count in data.pages_by_day.items():
        weekly[_week_of(day)] += count
    return {
        "from": format_time(query.since),
        "to": format_time(query.until),
        "complete_from": format_time(complete_from),
        "scope": {"kind": query.scope.value, "value": query.value or None},
        "people": [persons[email].to_json() for email in sorted(persons)],
        "rotations": [tally.to_json(rotation, hours_of, policy_names)
                      for rotation, tally in sorted(rotations.items())],
        "weekly_pages": [{"week": format_time(week), "pages": weekly[week]}
                         for week in _weeks(query.since, query.until)],
    }


def whole_months(since: datetime, until: datetime,
                 ) -> tuple[tuple[datetime, datetime] | None, list[tuple[datetime, datetime]]]:
    """``[since, until)`` split at UTC month starts: its whole months as ``[first, end)``
    (None when it holds none), and the parts before and after them."""
    since, until = to_utc(since), to_utc(until)
    first = _month_start(since)
    if first < since:
        first = _month_start(first + timedelta(days=32))
    end = _month_start(until)
    if first >= end:
        return None, [(since, until)] if since < until else []
    ends = [(start, stop) for start, stop in ((since, first), (end, until)) if start < stop]
    return (first, end), ends


def _month_start(moment: datetime) -> datetime:
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def latest_open_counts(reads: Iterable[tuple[str, Mapping[str, int]]]) -> dict[str, int]:
    """Each person's newest count of open issues, from assignments newest first: (the
    assignee, the counts that assignment read); the assignee holds one more since."""
    latest: dict[str, int] = {}
    for assignee, counts in reads:
        for email, count in counts.items():
            latest.setdefault(email, count + (1 if email == assignee else 0))
    return latest


def _week_of(moment: datetime) -> datetime:
    day = to_utc(moment).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


def _weeks(since: datetime, until: datetime) -> list[datetime]:
    """The Monday (UTC) of every week the period touches."""
    weeks, week = [], _week_of(since)
    while week < until:
        weeks.append(week)
        week += timedelta(days=7)
    return weeks


@dataclass
class RotationTally:
    """A rotation's assignments by member, its members, and its policies."""

    assigned: Counter[str] = field(default_factory=Counter)
    members: set[str] = field(default_factory=set)
    policies: Counter[str] = field(default_factory=Counter)
    hours_required: bool = False

    def count(self, tally: Tally) -> None:
        self.assigned[tally.email] += tally.count
        self.members.add(tally.email)
        self.policies[tally.policy_family_id] += tally.count

    def join(self, membership: Membership) -> None:
        self.members.update(membership.members)
        self.hours_required = self.hours_required or membership.hours_required

    def to_json(self, rotation: str, hours_of: Callable[[str, bool], float],
                policy_names: Mapping[str, str]) -> dict[str, Any]:
        """``hours_of(email, within_hours)``: a member's eligible hours in the period."""
        hours = {email: hours_of(email, self.hours_required) for email in sorted(self.members)}
        total_hours, total = sum(hours.values()), sum(self.assigned.values())
        members, ratios = [], []
        for email, eligible in hours.items():
            fair = total * eligible / total_hours if total_hours else 0.0
            members.append({"email": email, "assigned": self.assigned[email],
                            "eligible_hours": round(eligible, 2), "fair_share": round(fair, 3)})
            if fair > 0:
                ratios.append(self.assigned[email] / fair)
        family = self.policies.most_common(1)[0][0] if self.policies else ""
        return {
            "rotation": rotation,
            "policy": policy_names.get(family, family),
            "members": members,
            "cv": _variation(ratios),
            "max_over_fair": round(max(ratios), 4) if ratios else None,
            "min_over_fair": round(min(ratios), 4) if ratios else None,
        }


def _variation(ratios: Sequence[float]) -> float | None:
    """The coefficient of variation (population standard deviation over mean) of
    ``ratios``; none without a ratio or with a mean of 0. In floats: ``statistics.pstdev``
    works in exact fractions, which cost a tenth of a millisecond a rotation."""
    if not ratios:
        return None
    mean = math.fsum(ratios) / len(ratios)
    if mean <= 0:
        return None
    spread = math.sqrt(math.fsum((ratio - mean) ** 2 for ratio in ratios) / len(ratios))
    return round(spread / mean, 4)


def eligible_hours(since: datetime, until: datetime, settings: AvailabilitySettings,
                   time_off: Iterable[TimeOff], *, within_hours: bool) -> float:
    """The hours of ``[since, until)`` in which a person could be given work: not on time
    off and, where the rotation requires working hours and they have set some, within them
    (wall-clock spans in their zone, so a clock change moves them in UTC)."""
    since, until = to_utc(since), to_utc(until)
    hours = settings.working_hours if within_hours else None
    spans = ([(since, until)] if hours is None
             else _working_spans(since, until, hours, settings.zone))
    entries = [(to_utc(e.start), to_utc(e.end)) for e in time_off]
    away = _merged([(max(start, since), min(end, until)) for start, end in entries
                    if end > since and start < until])
    seconds = sum((end - start).total_seconds() for start, end in spans)
    for start, end in spans:
        for off_start, off_end in away:
            overlap = (min(end, off_end) - max(start, off_start)).total_seconds()
            seconds -= max(0.0, overlap)
    return seconds / 3600


def _working_spans(since: datetime, until: datetime, hours: WorkingHours,
                   zone: ZoneInfo) -> list[tuple[datetime, datetime]]:
    """The person's working spans within ``[since, until)``, in UTC, day by local day."""
    spans = []
    day, last = since.astimezone(zone).date(), until.astimezone(zone).date()
    while day <= last:
        for span in hours.days[day.weekday()]:
            start = _local(day, span.start, zone)
            end = _local(day, span.end, zone)
            start, end = max(start, since), min(end, until)
            if start < end:
                spans.append((start, end))
        day += timedelta(days=1)
    return spans


def _local(day: date, minutes: int, zone: ZoneInfo) -> datetime:
    """``minutes`` after local midnight of ``day`` (1440: the next midnight), in UTC."""
    # an aware datetime adds wall-clock time: 09:00 stays 09:00 across a clock change
    return (datetime.combine(day, time(0), zone) + timedelta(minutes=minutes)).astimezone(UTC)


def _merged(intervals: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Overlapping intervals joined, in order."""
    merged: list[tuple[datetime, datetime]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def csv_rows(report: Mapping[str, Any]) -> list[list[Any]]:
    """The people rows, one column per number and a header row first; a policy's
    assignments are ``assigned[<policy>]``, a percentile is empty without a sample."""
    policies = sorted({name for person in report["people"]
                       for name in person["assigned_by_policy"]})
    header = ["email", "assigned", *(f"assigned[{name}]" for name in policies), "open_now",
              "cards", "urgent", "pages", "escalations_received", "escalations_away",
              *(f"interruptions_{band.value}" for band in Band), "ack_p50_seconds",
              "ack_p90_seconds", *(f"ack_{source.value}_{q}_seconds" for source in ACK_SOURCES
                                   for q in ("p50", "p90"))]
    rows: list[list[Any]] = [header]
    for person in report["people"]:
        ack = person["ack_seconds"]
        rows.append([
            person["email"], person["assigned"],
            *(person["assigned_by_policy"].get(name, 0) for name in policies),
            _blank(person["open_now"]), person["cards"], person["urgent"], person["pages"],
            person["escalations_received"], person["escalations_away"],
            *(person["interruptions"][band.value] for band in Band),
            _blank(ack["p50"]), _blank(ack["p90"]),
            *(_blank(ack["by_source"][source.value][q]) for source in ACK_SOURCES
              for q in ("p50", "p90"))])
    return rows


def _blank(value: Any) -> Any:
    return "" if value is None else value



def table_lines(report: Mapping[str, Any]) -> list[str]:
    """The report as a terminal reads it: the period, one line per person, one per rotation
    member, and the rotations' spread."""
    lines = [f"burden from {report['from']} to {report['to']} "
             f"(data complete from {report['complete_from'] or 'unknown'})", ""]
    header = ("email", "assigned", "open", "cards", "urgent", "pages", "esc in", "esc away",
              "business", "off", "sleep", "ack p50 s", "ack p90 s")
    rows = [header] + [(
        person["email"], person["assigned"], _dash(person["open_now"]), person["cards"],
        person["urgent"], person["pages"], person["escalations_received"],
        person["escalations_away"], *(person["interruptions"][band.value] for band in Band),
        _dash(person["ack_seconds"]["p50"]), _dash(person["ack_seconds"]["p90"]))
        for person in report["people"]]
    lines += _aligned(rows) if report["people"] else ["nobody was given work or paged"]
    for rotation in report["rotations"]:
        lines += ["", f"rotation {rotation['rotation']} ({rotation['policy']}): "
                      f"cv {_dash(rotation['cv'])}, max/fair {_dash(rotation['max_over_fair'])}, "
                      f"min/fair {_dash(rotation['min_over_fair'])}"]
        lines += _aligned([("member", "assigned", "eligible h", "fair share")] + [
            (m["email"], m["assigned"], m["eligible_hours"], m["fair_share"])
            for m in rotation["members"]])
    return lines


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def _aligned(rows: Sequence[Sequence[Any]]) -> list[str]:
    texts = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in texts) for i in range(len(texts[0]))]
    return ["  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                      for i, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in texts]
