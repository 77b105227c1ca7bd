"""Engineer endpoints: the dispatch switch, the identity cache, availability (time zone, working
hours, cap on open issues) and time off (docs/policies.md, "Who can take a ticket")."""

from __future__ import annotations

from collections.abc import Mapping

import falcon

from ticket_dispatcher.domain.availability import LOOKAHEAD
from ticket_dispatcher.domain.availability_parsing import parse_time_off
from ticket_dispatcher.domain.engineers import (
    AVAILABILITY_KEYS,
    AvailabilityChanges,
    ShownEngineer,
    availability_changes,
    engineer_email,
    shown_engineer,
)
from ticket_dispatcher.domain.model import MAX_ACCOUNT_ID, MAX_DISPLAY_NAME, Engineer
from ticket_dispatcher.errors import InvalidInput, NotFound, Problem
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.binding import (
    bind_object,
    flag,
    page,
    paging,
    query_choice,
    read_json,
)
from ticket_dispatcher.http.changes import author_of
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store import Store


def checked_email(text: str) -> str:
    """The engineer's address a path names (``engineer_email``); a 400 when it names none."""
    email = engineer_email(text)
    if email is None:
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


class EngineerCollection:
    roles = {"GET": VIEWER}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit, offset = paging(req)
        enabled = query_choice(req, "dispatch_enabled", flag, "true or false")
        store = self._services.store
        items, total = store.engineers.page(limit=limit, offset=offset, dispatch_enabled=enabled)
        now = self._services.clock.now()
        away = store.engineers.time_off((e.email for e in items), now, now + LOOKAHEAD)
        resp.media = {"items": [shown_engineer(e, away.get(e.email, []), now) for e in items],
                      "total": total}


class EngineerItem:
    roles = {"GET": VIEWER, "PUT": OPERATOR, "DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        engineer = self._services.store.engineers.get(checked_email(email))
        resp.media = _shown_now(self._services, engineer)

    def on_put(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        email = checked_email(email)
        body = bind_object(
            read_json(req, self._services.max_body_bytes,
                      max_depth=self._services.max_json_depth),
            required={"dispatch_enabled": bool},
            optional={"display_name": str, "jira_account_id": str, "timezone": str,
                      "working_hours": dict, "max_open_issues": int},
        )
        _check_lengths(body)
        engineer, created = self._services.changes.put_engineer(
            author_of(req), email,
            dispatch_enabled=body["dispatch_enabled"],
            display_name=body.get("display_name"),
            jira_account_id=body.get("jira_account_id"),
            availability=self._availability(email, body),
        )
        resp.status = falcon.HTTP_201 if created else falcon.HTTP_200
        resp.media = _shown_now(self._services, engineer)

    def _availability(self, email: str, body: dict) -> AvailabilityChanges:
        return availability_update(self._services.store, email, body)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        self._services.changes.delete_engineer(author_of(req), checked_email(email))
        resp.status = falcon.HTTP_204


def availability_update(store: Store, email: str,
                        body: Mapping[str, object]) -> AvailabilityChanges:
    """The availability settings of ``body`` (those of ``AVAILABILITY_KEYS`` it has), checked
    with the stored engineer's that they leave as they are (``InvalidInput`` naming each
    field): what the API's PUT and the console's form write."""
    given = {key: body[key] for key in AVAILABILITY_KEYS if key in body}
    if not given:
        return {}
    try:
        stored: Engineer | None = store.engineers.get(email)
    except NotFound:
        stored = None
    return availability_changes(stored, given)


def _shown_now(services: Services, engineer: Engineer) -> ShownEngineer:
    now = services.clock.now()
    away = services.store.engineers.time_off([engineer.email], now, now + LOOKAHEAD)
    return shown_engineer(engineer, away.get(engineer.email, []), now)


class TimeOffCollection:
    """An engineer's time off: listed by viewers (``past=true`` adds what has ended), added by
    operators."""

    roles = {"GET": VIEWER, "POST": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        email = checked_email(email)
        limit, offset = paging(req)
        past = query_choice(req, "past", flag, "true or false") or False
        store = self._services.store
        store.engineers.get(email)  # 404 for an unknown engineer, not an empty list
        items, total = store.time_off.page(email, now=self._services.clock.now(), past=past,
                                           limit=limit, offset=offset)
        resp.media = page(items, total)

    def on_post(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        email = checked_email(email)
        raw = read_json(req, self._services.max_body_bytes,
                        max_depth=self._services.max_json_depth)
        entry, problems = parse_time_off(raw, email)
        if entry is None:
            raise InvalidInput("body is not valid", list(problems))
        stored = self._services.changes.add_time_off(author_of(req), entry)
        resp.status = falcon.HTTP_201
        resp.media = stored.to_json()


class TimeOffItem:
    roles = {"DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_delete(self, req: falcon.Request, resp: falcon.Response, email: str,
                  entry_id: int) -> None:
        self._services.changes.delete_time_off(author_of(req), checked_email(email), entry_id)
        resp.status = falcon.HTTP_204
