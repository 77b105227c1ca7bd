"""Engineers as the API and the command line name, show and change them: the address that
names one, the record with its availability now, and the availability settings a change sets.
Both faces call these, so a path, ``engineer show`` and ``engineer set`` agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TypedDict

from ticket_dispatcher.domain.availability import TimeOff, availability_at
from ticket_dispatcher.domain.availability_parsing import parse_availability_settings, settings_of
from ticket_dispatcher.domain.catalog import ENGINEER_EMAIL
from ticket_dispatcher.domain.model import Engineer, EngineerJson
from ticket_dispatcher.errors import InvalidInput, NotFound
from ticket_dispatcher.timeutil import format_time

AVAILABILITY_KEYS = ("timezone", "working_hours", "max_open_issues")
# The API's engineer path and the command that create one, as a "not found" names them.
ENGINEER_PATH = "/api/v1/ticketmanager/engineers/{email}"
ENGINEER_SET = "ticket-dispatcher engineer set {email} --dispatch-enabled true"


def engineer_not_found(email: str) -> NotFound:
    """The 404 for an engineer with no record, saying how to create one (the API's ``PUT``
    and ``engineer set`` both create the engineer they name)."""
    return NotFound(f"engineer {email} not found; create it with PUT "
                    f"{ENGINEER_PATH.format(email=email)} "
                    f'(body {{"dispatch_enabled": true}}) or '
                    f"`{ENGINEER_SET.format(email=email)}`")


def engineer_email(text: str) -> str | None:
    """The engineer's address ``text`` names, trimmed and lower-cased, or None when it is no
    email address by the rule assign receivers are validated by."""
    email = text.strip().lower()
    return email if ENGINEER_EMAIL(email) else None


class AvailabilityNow(TypedDict):
    """Whether an engineer is available at a moment, why not, and until when (RFC 3339)."""

    available: bool
    reasons: list[str]
    until: str | None


class ShownEngineer(EngineerJson):
    """An engineer's record as the API answers, with their availability now."""

    availability: AvailabilityNow


def shown_engineer(engineer: Engineer, time_off: Sequence[TimeOff],
                   now: datetime) -> ShownEngineer:
    """The engineer as the API answers: its record and its ``availability`` at ``now`` (time
    off and working hours; capacity is judged by an assignment, from Jira's count)."""
    state = availability_at(settings_of(engineer), time_off, now)
    return {**engineer.to_json(), "availability": {
        "available": state.available, "reasons": list(state.reasons),
        "until": format_time(state.until)}}


class AvailabilityChanges(TypedDict, total=False):
    """The availability settings a change sets: only the keys given."""

    timezone: str  # an IANA name
    working_hours: dict[str, list[str]] | None  # None: any time
    max_open_issues: int | None  # None: no cap


def availability_changes(stored: Engineer | None,
                         given: Mapping[str, object]) -> AvailabilityChanges:
    """The availability settings ``given`` (some of ``AVAILABILITY_KEYS``), normalized and
    checked together with the ``stored`` engineer's that they leave as they are (working hours
    are read in the stored zone); ``InvalidInput`` naming each field otherwise. ``stored`` is
    None for an engineer not created yet."""
    current: dict[str, object] = {}
    if stored is not None:
        # Working hours are read in the zone the engineer's record shows: the one set, else
        # UTC, which is then stored as chosen, so the record and the rule say the same.
        # A new engineer shows no zone yet: working hours need one in the same change.
        current = {"working_hours": stored.working_hours,
                   "max_open_issues": stored.max_open_issues,
                   "timezone": stored.timezone or "UTC"}
    settings, problems = parse_availability_settings({**current, **given})
    if settings is None:
        raise InvalidInput("body is not valid", list(problems))
    parsed = settings.to_json()
    changes: AvailabilityChanges = {}
    if "timezone" in given or (stored is not None and not stored.timezone
                               and given.get("working_hours") is not None):
        changes["timezone"] = parsed["timezone"]
    if "working_hours" in given:
        changes["working_hours"] = parsed["working_hours"]
    if "max_open_issues" in given:
        changes["max_open_issues"] = parsed["max_open_issues"]
    return changes
