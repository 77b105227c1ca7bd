"""The fake Oncall service (SPEC §11): its teams and the pages it placed (``OncallState``), and
the resources for a team's responders and for paging someone.

A page to someone without a phone is answered ``accepted: false, call_error: no_phone_number``;
every page is recorded for the control API. The sandbox knows only *whether* someone has a
phone (``people.py``), never a number, so no answer can carry one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

import falcon

from ticket_dispatcher.sandbox.base import PUBLIC, InternalServiceResource, guard
from ticket_dispatcher.sandbox.people import People, SandboxUser, email_key
from ticket_dispatcher.sandbox.traffic import Traffic
from ticket_dispatcher.timeutil import format_time

PAGE_FIELDS = ("email", "title", "message", "issue_key", "dedup_key")


@dataclass(frozen=True)
class Page:
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
        }


class OncallState:
    """On-call teams (responders in order, the first is the primary) and every page placed."""

    def __init__(self, people: People, *, now: Callable[[], datetime]):
        self.people = people
        self.now = now
        self._lock = threading.Lock()
        self._teams: dict[str, list[str]] = {}
        self._pages: list[Page] = []
        self._call_by_dedup: dict[str, str] = {}
        self._call_count = 0

    def put_team(self, name: str, emails: Iterable[str]) -> list[SandboxUser]:
        """Responders in order: the first is the primary (SPEC §11)."""
        responders = self.people.known(emails)
        with self._lock:
            self._teams[name] = [user.email for user in responders]
        return responders

    def team_responders(self, name: str) -> list[SandboxUser] | None:
        with self._lock:
            emails = self._teams.get(name)
        return None if emails is None else self.people.known(emails)

    def page(self, email: str, title: str, message: str, issue_key: str,
             dedup_key: str) -> Page:
        """Call someone. Everybody's page is recorded; a repeated ``dedup_key`` keeps its
        call id (as paging systems dedupe incidents) and is marked ``repeated``."""
        user = self.people.user(email)
        call_error = ""
        if user is None:
            call_error = "unknown_user"
        elif not user.active:
            call_error = "user_inactive"
        elif not user.has_phone:
            call_error = "no_phone_number"
        with self._lock:
            repeated = bool(dedup_key) and dedup_key in self._call_by_dedup
            call_id = ""
            if not call_error:
                call_id = self._call_by_dedup.get(dedup_key) or self._new_call()
                if dedup_key:
                    self._call_by_dedup[dedup_key] = call_id
            page = Page(email_key(email), title, message, issue_key, dedup_key,
                        not call_error, call_id, call_error, self.now(), repeated)
            self._pages.append(page)
            return page

    def _new_call(self) -> str:
        self._call_count += 1
        return f"call-{self._call_count:06d}"

    def pages(self) -> list[Page]:
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
        # Primary first: the team's configured order (SPEC §11).
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
