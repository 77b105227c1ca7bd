"""Maintenance windows (docs/operations.md, "Maintenance windows"): a span of time, maybe
recurring, during which the work in its scope is held (``hold``: its triggers wait, pending,
until the window ends) or kept quiet (``quiet``: executions run and cards are sent, with no
App-urgent, no page and no escalation).

What a window is and which one rules a piece of work is decided here, from the windows, the
work's project, source and policy names, and the time; the store keeps the windows, the trigger
processor and the notification steps ask ``in_effect``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from ticket_dispatcher.domain.checks import (
    Problems,
    at,
    check_enum,
    check_keys,
    check_object,
    check_text_list,
    quote,
)
from ticket_dispatcher.timeutil import (
    EARLIEST,
    LATEST,
    TimeOutOfRange,
    format_time,
    parse_rfc3339,
    to_utc,
)

MAX_REASON = 500  # characters
MAX_SCOPE_NAMES = 100  # names in each list of a scope
MAX_OCCURRENCES = 1000  # of a recurring window: a longer series is refused

WINDOW_KEYS = ("scope", "reason", "start", "end", "recurrence", "effect")
SCOPE_KEYS = ("projects", "policies", "sources", "all")
RECURRENCE_KEYS = ("every", "until")
SERVER_KEYS = frozenset({"id", "state", "ended_at", "created_at"})


class Effect(StrEnum):
    """What a window does to the work in its scope; ``hold`` is the stricter."""

    HOLD = "hold"
    QUIET = "quiet"


class Every(StrEnum):
    DAILY = "daily"
    WEEKLY = "weekly"


class WindowState(StrEnum):
    PLANNED = "planned"  # its first occurrence, or the next, is ahead
    CURRENT = "current"  # in an occurrence now
    ENDED = "ended"  # its last occurrence is over, or an operator ended it


_PERIOD = {Every.DAILY: timedelta(days=1), Every.WEEKLY: timedelta(days=7)}
_STRICTNESS = {Effect.QUIET: 1, Effect.HOLD: 2}
_EVERY_VALUES = frozenset(every.value for every in Every)


def project_of(issue_key: str) -> str:
    """The project part of an issue key (``OPS`` of ``OPS-12``)."""
    return issue_key.rsplit("-", 1)[0]


@dataclass(frozen=True)
class Scope:
    """What a window covers: work of any of its projects, sources or policies (by name), or
    everything."""

    projects: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    all: bool = False

    def covers(self, project: str, source: str, policy_names: Iterable[str]) -> bool:
        return (self.all or project in self.projects or source in self.sources
                or any(name in self.policies for name in policy_names))

    def to_json(self) -> dict[str, Any]:
        if self.all:
            return {"all": True}
        named = {"projects": self.projects, "policies": self.policies, "sources": self.sources}
        return {key: list(names) for key, names in named.items() if names}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Scope:
        return cls(projects=tuple(raw.get("projects") or ()),
                   policies=tuple(raw.get("policies") or ()),
                   sources=tuple(raw.get("sources") or ()), all=bool(raw.get("all")))


@dataclass(frozen=True)
class Recurrence:
    every: Every
    until: datetime  # no occurrence starts after it

    @property
    def period(self) -> timedelta:
        return _PERIOD[self.every]


@dataclass(frozen=True)
class MaintenanceWindow:
    id: int | None
    scope: Scope
    reason: str
    start: datetime  # of the first occurrence
    end: datetime  # of the first occurrence
    effect: Effect
    recurrence: Recurrence | None = None
    ended_at: datetime | None = None  # ended early by an operator
    created_at: datetime | None = None

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    @property
    def last_end(self) -> datetime:
        """When its last occurrence ends, or when it was ended early."""
        last = self.end
        if self.recurrence is not None:
            count = (self.recurrence.until - self.start) // self.recurrence.period
            last = self.end + count * self.recurrence.period
        return min(last, self.ended_at) if self.ended_at is not None else last

    def occurrence(self, now: datetime) -> tuple[datetime, datetime] | None:
        """The occurrence (start, end) that ``now`` falls in, or None."""
        if now < self.start or now >= self.last_end:
            return None
        start = self.start
        if self.recurrence is not None:
            start += ((now - self.start) // self.recurrence.period) * self.recurrence.period
        end = min(start + self.duration, self.last_end)
        return (start, end) if now < end else None

    def current_since(self, now: datetime) -> datetime | None:
        """Since when the window has been current without a break (its occurrences may
        follow one another with no gap), or None when it is not current."""
        occurrence = self.occurrence(now)
        if occurrence is None:
            return None
        if self.recurrence is not None and self.duration >= self.recurrence.period:
            return self.start
        return occurrence[0]

    def state(self, now: datetime) -> WindowState:
        if now >= self.last_end:
            return WindowState.ENDED
        return WindowState.CURRENT if self.occurrence(now) else WindowState.PLANNED

    def to_json(self, now: datetime) -> dict[str, Any]:
        occurrence = self.occurrence(now)
        return {
            "id": self.id, "state": self.state(now).value, "scope": self.scope.to_json(),
            "reason": self.reason, "effect": self.effect.value,
            "start": format_time(self.start), "end": format_time(self.end),
            "recurrence": None if self.recurrence is None else {
                "every": self.recurrence.every.value,
                "until": format_time(self.recurrence.until)},
            "current_until": format_time(occurrence[1]) if occurrence else None,
            "ended_at": format_time(self.ended_at),
            "created_at": format_time(self.created_at),
        }


@dataclass(frozen=True)
class InEffect:
    """The window that rules a piece of work now: its effect, its id, and when its current
    occurrence ends (a held trigger is due again then)."""

    effect: Effect
    window_id: int
    until: datetime


def in_effect(windows: Iterable[MaintenanceWindow], project: str, source: str,
              policy_names: Iterable[str], now: datetime) -> InEffect | None:
    """The strictest effect of the windows current at ``now`` whose scope covers the work of
    ``project`` and ``source`` matched by ``policy_names``; among equals, the window whose
    occurrence ends last. None when no window covers it."""
    names = list(policy_names)
    found: InEffect | None = None
    for window in windows:
        occurrence = window.occurrence(now)
        if occurrence is None or window.id is None \
                or not window.scope.covers(project, source, names):
            continue
        candidate = InEffect(window.effect, window.id, occurrence[1])
        if found is None or (_STRICTNESS[candidate.effect], candidate.until) > (
                _STRICTNESS[found.effect], found.until):
            found = candidate
    return found


# --- reading a window from JSON -------------------------------------------------------------


@dataclass
class _Reading:
    problems: Problems = field(default_factory=Problems)

    def moment(self, raw: Any, path: str) -> datetime | None:
        if not isinstance(raw, str):
            self.problems.shape(path, 'must be an RFC 3339 time like "2026-12-01T09:00:00Z"')
            return None
        try:
            moment = to_utc(parse_rfc3339(raw))
        except TimeOutOfRange:
            moment = LATEST
        except ValueError:
            self.problems.rule(path, f"{quote(raw)} is not an RFC 3339 time")
            return None
        if not EARLIEST <= moment < LATEST:
            self.problems.rule(path, f"{quote(raw)} is not between {EARLIEST:%Y-%m-%d} and "
                                     f"{LATEST:%Y-%m-%d}")
            return None
        return moment

    def scope(self, raw: Any, path: str) -> Scope | None:
        if not check_object(raw, path, self.problems):
            return None
        check_keys(raw, path, SCOPE_KEYS, self.problems)
        names: dict[str, tuple[str, ...]] = {}
        for key in ("projects", "policies", "sources"):
            if key not in raw:
                continue
            values = check_text_list(raw[key], at(path, key), self.problems, unique=True)
            if values is not None and len(values) > MAX_SCOPE_NAMES:
                self.problems.rule(at(path, key), f"has {len(values)} names; at most "
                                                  f"{MAX_SCOPE_NAMES}")
            names[key] = tuple(values or ())
        everything = raw.get("all", False)
        if not isinstance(everything, bool):
            self.problems.shape(at(path, "all"), "must be true or false")
            everything = False
        if everything and any(names.values()):
            self.problems.rule(path, "names nothing beside all: true")
        if not everything and not any(names.values()):
            self.problems.rule(path, "names nothing: give projects, policies or sources, "
                                     "or all: true")
            return None
        return Scope(all=everything, **names)

    def recurrence(self, raw: Any, path: str) -> Recurrence | None:
        if raw is None:
            return None
        if not check_object(raw, path, self.problems):
            return None
        check_keys(raw, path, RECURRENCE_KEYS, self.problems, required=("every", "until"))
        every = raw.get("every")
        if every is not None:
            check_enum(every, at(path, "every"), Every, self.problems)
        until = self.moment(raw["until"], at(path, "until")) if "until" in raw else None
        if until is None or not isinstance(every, str) or every not in _EVERY_VALUES:
            return None
        return Recurrence(Every(every), until)


def parse_window(raw: Any, now: datetime,
                 max_duration: timedelta) -> tuple[MaintenanceWindow | None, Problems]:
    """A new window from a create body: ``scope``, ``end`` and ``effect`` required, ``start``
    now when left out, ``reason`` and ``recurrence`` (``{"every", "until"}``) optional. The
    window (no id yet) and no problems, or None and every problem found, each naming its
    field."""
    reading = _Reading()
    problems = reading.problems
    if not check_object(raw, "", problems):
        return None, problems
    check_keys(raw, "", WINDOW_KEYS, problems, required=("scope", "end", "effect"),
               server_keys=SERVER_KEYS)
    scope = reading.scope(raw["scope"], "scope") if "scope" in raw else None
    start = reading.moment(raw["start"], "start") if "start" in raw else to_utc(now)
    end = reading.moment(raw["end"], "end") if "end" in raw else None
    if "effect" in raw:
        check_enum(raw["effect"], "effect", Effect, problems)
    reason = raw.get("reason", "")
    if not isinstance(reason, str):
        problems.shape("reason", "must be a string")
    elif len(reason) > MAX_REASON:
        problems.rule("reason", f"is {len(reason)} characters long; at most {MAX_REASON}")
    recurrence = reading.recurrence(raw.get("recurrence"), "recurrence")
    if start is not None and end is not None:
        _check_span(start, end, max_duration, raw, problems)
        if recurrence is not None:
            _check_recurrence(start, end, recurrence, problems)
    if problems or scope is None or start is None or end is None:
        return None, problems
    return MaintenanceWindow(None, scope, reason, start, end, Effect(raw["effect"]),
                             recurrence, created_at=to_utc(now)), problems


def _check_span(start: datetime, end: datetime, max_duration: timedelta, raw: dict,
                problems: Problems) -> None:
    if end <= start:
        shown = quote(raw["start"]) if "start" in raw else "now"
        problems.rule("end", f"{quote(raw['end'])} is not after start {shown}")
    elif end - start > max_duration:
        problems.rule("end", f"the window lasts {end - start}; at most {max_duration} "
                             f"(maintenance.max_duration)")


def _check_recurrence(start: datetime, end: datetime, recurrence: Recurrence,
                      problems: Problems) -> None:
    if end - start > recurrence.period:
        problems.rule("recurrence.every", f"occurrences of {end - start} would overlap "
                                          f"{recurrence.every.value}")
    if recurrence.until < start:
        problems.rule("recurrence.until", "is before start")
    elif (recurrence.until - start) // recurrence.period >= MAX_OCCURRENCES:
        problems.rule("recurrence.until", f"gives more than {MAX_OCCURRENCES} occurrences")


def ended_early(window: MaintenanceWindow, now: datetime) -> MaintenanceWindow:
    return replace(window, ended_at=to_utc(now))
