"""Engineer endpoints: the dispatch switch and identity cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

import falcon

from ticket_dispatcher.domain.catalog import ENGINEER_EMAIL
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.binding import bind_object, page, paging, query_choice, read_json

if TYPE_CHECKING:  # app.py imports this module
    from ticket_dispatcher.http.app import Services


def normalise_email(text: str) -> str:
    email = text.strip().lower()
    if not ENGINEER_EMAIL(email):  # the rule assign receivers are validated by
        raise InvalidInput("the path must name an engineer by email address",
                           [Problem("email", "must be an email address")])
    return email


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
        items, total = self._services.store.engineers.page(
            limit=limit, offset=offset, dispatch_enabled=enabled
        )
        resp.media = page(items, total)


class EngineerItem:
    roles = {"GET": VIEWER, "PUT": OPERATOR, "DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        resp.media = self._services.store.engineers.get(normalise_email(email)).to_json()

    def on_put(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        email = normalise_email(email)
        body = bind_object(
            read_json(req, self._services.max_body_bytes,
                      max_depth=self._services.max_json_depth),
            required={"dispatch_enabled": bool},
            optional={"display_name": str, "jira_account_id": str},
        )
        engineer, created = self._services.store.engineers.put(
            email,
            dispatch_enabled=body["dispatch_enabled"],
            display_name=body.get("display_name"),
            jira_account_id=body.get("jira_account_id"),
            now=self._services.clock.now(),
        )
        resp.status = falcon.HTTP_201 if created else falcon.HTTP_200
        resp.media = engineer.to_json()

    def on_delete(self, req: falcon.Request, resp: falcon.Response, email: str) -> None:
        self._services.store.engineers.delete(normalise_email(email))
        resp.status = falcon.HTTP_204
