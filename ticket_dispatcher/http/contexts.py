"""Dispatch context endpoints: per-issue memory, including the escalation slots
(docs/design.md, "The escalation slot")."""

from __future__ import annotations

import falcon

from ticket_dispatcher.domain.issues import ISSUE_KEY
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.http.auth import OPERATOR, VIEWER
from ticket_dispatcher.http.changes import author_of
from ticket_dispatcher.http.services import Services


def checked_issue_key(text: str, path: str = "issue_key") -> str:
    if not isinstance(text, str) or not ISSUE_KEY.fullmatch(text):
        raise InvalidInput(f"{path} must be a Jira issue key like TCID-12345",
                           [Problem(path, "must be a Jira issue key like TCID-12345")])
    return text


class ContextItem:
    roles = {"GET": VIEWER, "DELETE": OPERATOR}

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, issue_key: str) -> None:
        resp.media = self._services.store.contexts.get(checked_issue_key(issue_key)).to_json()

    def on_delete(self, req: falcon.Request, resp: falcon.Response, issue_key: str) -> None:
        self._services.changes.delete_context(author_of(req), checked_issue_key(issue_key))
        resp.status = falcon.HTTP_204
