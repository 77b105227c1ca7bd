"""The fake Oncall service: its teams and the pages it placed (``OncallState``), and
the resources for a team's responders and for paging someone.

A page to someone without a phone is answered ``accepted: false, call_error: no_phone_number``;
every page is recorded for the control API. The sandbox knows only *whether* someone has a
phone (``people.py``), never a number, so no answer can carry one.

The control API can force the outcome of the next pages (``OutcomeOverride``): for everybody
or for one person, for a number of pages or until cleared. A forced outcome replaces the one
the directory gives and is answered exactly as the real service answers it:
``accepted`` with a call id, ``no_phone_number`` as for someone without a phone, ``call_error``
as a call that failed (HTTP 200, ``accepted: false``, ``call_error: call_failed``), which the
client reports as a failed call, not as a transport error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime

import falcon

from ticket_dispatcher.sandbox.base import PUBLIC, InternalServiceResource, guard
from ticket_dispatcher.sandbox.people import People, SandboxUser, email_key
from ticket_dispatcher.sandbox.traffic import Traffic
from ticket_dispatcher.timeutil import format_time

PAGE_FIELDS = ("email", "title", "message", "issue_key", "dedup_key")
NO_PHONE_NUMBER = "no_phone_number"
# The text of a forced failed call: Oncall answers a call it could not place with its own text
# (``call_error: TEXT``); any non-empty text is a failed call to the client.
FORCED_CALL_ERROR = "call_failed"
# Each outcome the control API can force, and the call_error it answers ("" = accepted).
FORCED_OUTCOMES: dict[str, str] = {
    "accepted": "",
    NO_PHONE_NUMBER: NO_PHONE_NUMBER,
    "call_error": FORCED_CALL_ERROR,
}


@dataclass(frozen=True)
class OncallPage:
    email: str
    title: str
    message: str
    issue_key: str
    dedup_key: str
    accepted: bool
    call_id: str
    call_error: str
    at: datetime
    repeated: bool = False  # the dedup_key was paged before: same call_id, still recorded
    forced: bool = False  # the outcome came from an ``OutcomeOverride``, not the directory

    def to_json(self) -> dict:
        return {
            "email": self.email,
            "title": self.title,
            "message": self.message,
            "issue_key": self.issue_key,
            "dedup_key": self.dedup_key,
            "accepted": self.accepted,
            "call_id": self.call_id,
            "call_error": self.call_error,
            "at": format_time(self.at),
            "repeated": self.repeated,
            "forced": self.forced,
        }


@dataclass
class OutcomeOverride:
    """The forced outcome of the next pages: to ``email`` only, or to anybody when None; for
    ``times`` more pages, or until cleared when None."""

    outcome: str
    email: str | None = None
    times: int | None = None

    def to_json(self) -> dict:
        return {"outcome": self.outcome, "email": self.email, "times": self.times}


class OncallState:
    """On-call teams (responders in order, the first is the primary) and every page placed."""

    def __init__(self, people: People, *, now: Callable[[], datetime]):
        self.people = people
        self.now = now
        self._lock = threading.Lock()
        self._teams: dict[str, list[str]] = {}
        self._pages: list[OncallPage] = []
        self._call_by_dedup: dict[str, str] = {}
        self._call_count = 0
        # Keyed by email, None for everybody; a person's own override comes first.
        self._overrides: dict[str | None, OutcomeOverride] = {}

    def put_team(self, name: str, emails: Iterable[str]) -> list[SandboxUser]:
        """Responders in order: the first is the primary."""
        responders = self.people.known(emails)
        with self._lock:
            self._teams[name] = [user.email for user in responders]
        return responders

    def team_responders(self, name: str) -> list[SandboxUser] | None:
        with self._lock:
            emails = self._teams.get(name)
        return None if emails is None else self.people.known(emails)

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> OncallPage:
        """Call someone. Everybody's page is recorded; a repeated ``dedup_key`` keeps its
        call id (as paging systems dedupe incidents) and is marked ``repeated``. A forced
        outcome (``force_outcome``) wins over the directory's."""
        key = email_key(email)
        call_error = self._directory_error(key)
        with self._lock:
            override = self._take_override(key)
            if override is not None:
                call_error = FORCED_OUTCOMES[override.outcome]
            repeated = bool(dedup_key) and dedup_key in self._call_by_dedup
            call_id = ""
            if not call_error:
                call_id = self._call_by_dedup.get(dedup_key) or self._new_call()
                if dedup_key:
                    self._call_by_dedup[dedup_key] = call_id
            page = OncallPage(key, title, message, issue_key, dedup_key, not call_error, call_id,
                        call_error, self.now(), repeated, override is not None)
            self._pages.append(page)
            return page

    def _directory_error(self, email: str) -> str:
        """The call error the directory gives: who is unknown, inactive or has no phone."""
        user = self.people.user(email)
        if user is None:
            return "unknown_user"
        if not user.active:
            return "user_inactive"
        if not user.has_phone:
            return NO_PHONE_NUMBER
        return ""

    def _take_override(self, email: str) -> OutcomeOverride | None:
        """The override this page uses up, the person's own before everybody's (lock held)."""
        key = email if email in self._overrides else None
        override = self._overrides.get(key)
        if override is None:
            return None
        if override.times is not None:
            override.times -= 1
            if override.times <= 0:
                del self._overrides[key]
        return replace(override)

    def force_outcome(self, outcome: str, *, email: str | None = None,
                      times: int | None = None) -> OutcomeOverride:
        """Make the next pages (to ``email``, or to anybody) come to ``outcome``, replacing
        the override for the same ``email``. ``times`` None: until ``clear_outcomes``."""
        if outcome not in FORCED_OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(FORCED_OUTCOMES)}")
        if times is not None and times < 1:
            raise ValueError("times must be >= 1")
        override = OutcomeOverride(outcome, email_key(email) if email else None, times)
        with self._lock:
            self._overrides[override.email] = override
            return replace(override)

    def outcome_overrides(self) -> list[OutcomeOverride]:
        """The overrides in force: everybody's first, then each person's by email."""
        with self._lock:
            overrides = [replace(override) for override in self._overrides.values()]
        return sorted(overrides, key=lambda o: (o.email is not None, o.email or ""))

    def clear_outcomes(self) -> int:
        """Back to the directory's outcomes; how many overrides were in force."""
        with self._lock:
            count = len(self._overrides)
            self._overrides.clear()
            return count

    def _new_call(self) -> str:
        self._call_count += 1
        return f"call-{self._call_count:06d}"

    def pages(self) -> list[OncallPage]:
        with self._lock:
            return list(self._pages)


# --- the resources -----------------------------------------------------------------------------


class OncallResource(InternalServiceResource):
    service = "oncall"
    state: OncallState


@falcon.before(guard)
class RespondersResource(OncallResource):
    roles = {"GET": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, team: str) -> None:
        responders = self.state.team_responders(team)
        if responders is None:
            raise self.error(404, f"team {team} not found")
        # Primary first: the team's configured order.
        resp.media = {"responders": [{"email": user.email, "name": user.display_name}
                                     for user in responders]}


@falcon.before(guard)
class PageResource(OncallResource):
    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = self.body(req)
        if not isinstance(body, dict):
            raise self.error(400, "the body must be a JSON object")
        wrong = [name for name in PAGE_FIELDS if not isinstance(body.get(name), str)]
        if wrong or not body["email"].strip():
            raise self.error(400, f"these fields must be strings: {', '.join(PAGE_FIELDS)} "
                                  "(email non-empty)")
        page = self.state.page(*(body[name] for name in PAGE_FIELDS))
        if page.accepted:
            resp.media = {"accepted": True, "call_id": page.call_id, "call_error": ""}
        else:
            resp.media = {"accepted": False, "call_error": page.call_error}


def routes(oncall: OncallState, traffic: Traffic) -> list[tuple[str, object]]:
    """Paths relative to the service's base URL."""
    return [
        ("/api/v1/teams/{team}/responders", RespondersResource(oncall, traffic)),
        ("/api/v1/page", PageResource(oncall, traffic)),
    ]
