"""Engineer endpoints: the dispatch switch, the identity cache, availability (time zone, working
hours, cap on open issues) and time off (docs/policies.md, "Who can take a ticket")."""

from __future__ import annotations

from datetime import datetime

import falcon

from ticket_dispatcher.domain.availability import LOOKAHEAD, availability_at
from ticket_dispatcher.domain.availability_parsing import (
    parse_availability_settings,
    parse_time_off,
    settings_of,
)
from ticket_dispatcher.domain.catalog import ENGINEER_EMAIL
from ticket_dispatcher.domain.model import MAX_ACCOUNT_ID, MAX_DISPLAY_NAME, Engineer
from ticket_dispatcher.errors import InvalidInput, NotFound, Problem
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.binding import (
    bind_object,
    page,
    paging,
    query_choice,
    read_json,
)
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store import Store
from ticket_dispatcher.store.engineers import AvailabilityChanges
from ticket_dispatcher.timeutil import format_time


def normalise_email(text: str) -> str:
    email = text.strip().lower()
    if not ENGINEER_EMAIL(email):  # the rule assign receivers are validated by
        raise InvalidInput("the path must name an engineer by email address",
                           [Problem("email", "must be an email address")])
    return email


_MAX_LENGTHS = {"display_name": MAX_DISPLAY_NAME, "jira_account_id": MAX_ACCOUNT_ID}


def _check_lengths(body: dict) -> None:
    problems = [Problem(key, f"must be at most {limit} characters, not {len(body[key])}")
                for key, limit in _MAX_LENGTHS.items()
                if isinstance(body.get(key), str) and len(body[key]) > limit]
    if problems:
        raise InvalidInput("the engineer is not valid", problems)


def _flag(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise ValueError(text)


class EngineerCollection:
    roles = {"GET": VIEWER}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit, offset = paging(req)
        enabled = query_choice(req, "dispatch_enabled", _flag, "true or false")
        store = self._services.store
        items, total = store.engineers.page(limit=limit, offset=offset, dispatch_enabled=enabled)
        now = self._services.clock.now()
        away = store.engineers.time_off((e.email for e in items), now, now + LOOKAHEAD)
        resp.media = {"items": [shown(e, away.get(e.email, []), now) for e in items],
                      "total": total}


class EngineerItem:
    roles = {"GET": VIEWER, "PUT": OPERATOR, "DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        engineer = self._services.store.engineers.get(normalise_email(email))
        resp.media = _shown_now(self._services, engineer)

    def on_put(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        email = normalise_email(email)
        body = bind_object(
            read_json(req, self._services.max_body_bytes,
                      max_depth=self._services.max_json_depth),
            required={"dispatch_enabled": bool},
            optional={"display_name": str, "jira_account_id": str, "timezone": str,
                      "working_hours": dict, "max_open_issues": int},
        )
        _check_lengths(body)
        engineer, created = self._services.store.engineers.put(
            email,
            dispatch_enabled=body["dispatch_enabled"],
            display_name=body.get("display_name"),
            jira_account_id=body.get("jira_account_id"),
            availability=self._availability(email, body),
            now=self._services.clock.now(),
        )
        resp.status = falcon.HTTP_201 if created else falcon.HTTP_200
        resp.media = _shown_now(self._services, engineer)

    def _availability(self, email: str, body: dict) -> AvailabilityChanges:
        given = {key: body[key] for key in AVAILABILITY_KEYS if key in body}
        return availability_changes(self._services.store, email, given) if given else {}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        self._services.store.engineers.delete(normalise_email(email))
        resp.status = falcon.HTTP_204


AVAILABILITY_KEYS = ("timezone", "working_hours", "max_open_issues")


def availability_changes(store: Store, email: str, given: dict) -> AvailabilityChanges:
    """The availability settings ``given`` (some of ``AVAILABILITY_KEYS``), normalized and
    checked together with the engineer's stored ones they leave as they are (working hours
    are read in the stored zone); ``InvalidInput`` naming each field otherwise."""
    try:
        stored = store.engineers.get(email)
        current: dict[str, object] = {"working_hours": stored.working_hours,
                                      "max_open_issues": stored.max_open_issues}
        # Working hours are read in a zone someone chose: set on an engineer whose zone was
        # never set, they need one, as on a new engineer; other changes read it as UTC.
        if stored.timezone or "working_hours" not in given:
            current["timezone"] = stored.timezone or "UTC"
    except NotFound:
        current = {}
    settings, problems = parse_availability_settings({**current, **given})
    if settings is None:
        raise InvalidInput("body is not valid", list(problems))
    parsed = settings.to_json()
    changes: AvailabilityChanges = {}
    if "timezone" in given:
        changes["timezone"] = parsed["timezone"]
    if "working_hours" in given:
        changes["working_hours"] = parsed["working_hours"]
    if "max_open_issues" in given:
        changes["max_open_issues"] = parsed["max_open_issues"]
    return changes


def shown(engineer: Engineer, time_off: list, now: datetime) -> dict:
    """The engineer as the API answers: its record and its ``availability`` at ``now`` (time
    off and working hours; capacity is judged by an assignment, from Jira's count)."""
    settings = settings_of(engineer)
    state = availability_at(settings, time_off, now)
    return {**engineer.to_json(), "availability": {
        "available": state.available, "reasons": list(state.reasons),
        "until": format_time(state.until)}}


def _shown_now(services: Services, engineer: Engineer) -> dict:
    now = services.clock.now()
    away = services.store.engineers.time_off([engineer.email], now, now + LOOKAHEAD)
    return shown(engineer, away.get(engineer.email, []), now)


class TimeOffCollection:
    """An engineer's time off: listed by viewers (``past=true`` adds what has ended), added by
    operators."""

    roles = {"GET": VIEWER, "POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        email = normalise_email(email)
        limit, offset = paging(req)
        past = query_choice(req, "past", _flag, "true or false") or False
        store = self._services.store
        store.engineers.get(email)  # 404 for an unknown engineer, not an empty list
        items, total = store.time_off.page(email, now=self._services.clock.now(), past=past,
                                           limit=limit, offset=offset)
        resp.media = page(items, total)

    def on_post(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        email = normalise_email(email)
        raw = read_json(req, self._services.max_body_bytes,
                        max_depth=self._services.max_json_depth)
        entry, problems = parse_time_off(raw, email)
        if entry is None:
            raise InvalidInput("body is not valid", list(problems))
        stored = self._services.store.time_off.add(entry, self._services.clock.now())
        resp.status = falcon.HTTP_201
        resp.media = stored.to_json()


class TimeOffItem:
    roles = {"DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_delete(self, req: falcon.Request, resp: falcon.Response, email: str,
                  entry_id: int) -> None:
        self._services.store.time_off.delete(normalise_email(email), entry_id)
        resp.status = falcon.HTTP_204
