"""The sandbox's control API under ``/sandbox/_control`` (SPEC §11 *Sandbox*): shape the fake
world and look at what the dispatcher did to it.

| method and path | what |
| --- | --- |
| `GET/POST /issues`, `GET/PATCH /issues/{key}` | list, create or replace, read as stored, change |
| `GET/POST /users` | the directory; create or replace one person |
| `PUT /groups/{group}` `{"members"}` | a Core group |
| `PUT /teams/{team}` `{"responders"}` | an Oncall team, primary first |
| `POST /lark/messages/{id}/reads` `{"email"|"open_id", "timestamp_ms"?}` | a card is read |
| `DELETE /lark/tokens` | revoke every tenant token (clients must refresh) |
| `GET /messages`, `/urgents`, `/pages`, `/comments?issue_key=`, `/requests` | what was sent |
| `GET/POST/DELETE /faults` | list, inject, clear faults |

Bad input is a 400 in the project's error shape (SPEC §10); the parsers here are shared with
``examples.py``, so ``ops/examples/sandbox.json`` uses exactly these bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import falcon

from ticket_dispatcher.domain.issues import ISSUE_KEY
from ticket_dispatcher.domain.timeutil import parse_rfc3339
from ticket_dispatcher.errors import InvalidInput, NotFound, Problem
from ticket_dispatcher.http.auth import PUBLIC
from ticket_dispatcher.http.binding import bind_object, read_json
from ticket_dispatcher.integrations.sandbox.state import (
    SERVICES,
    DuplicateId,
    SandboxIssue,
    SandboxState,
    UnknownIssue,
    UnknownMessage,
    UnknownUser,
)

MAX_BODY_BYTES = 1024 * 1024
MAX_LATENCY_MS = 60_000
_ISSUE_TEXT = ("project_key", "summary", "environment", "priority", "status", "severity",
               "assignee_email", "l2_assignee_email", "reporter_email", "created_at")
_ISSUE_OPTIONAL: dict[str, type] = {
    **{name: str for name in _ISSUE_TEXT}, "labels": list, "components": list, "fields": dict,
}
_EMAIL_FIELDS = {"assignee_email": "assignee", "l2_assignee_email": "l2_assignee",
                 "reporter_email": "reporter"}
_USER_OPTIONAL: dict[str, type] = {
    "display_name": str, "account_id": str, "active": bool, "open_id": str, "has_phone": bool,
    "leader_email": str,
}


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _invalid(path: str, message: str) -> InvalidInput:
    return InvalidInput(f"{path} {message}", [Problem(path, message)])


# --- parsing (shared with examples.py) -------------------------------------------------------


def parse_issue(raw: Any, *, path: str = "", patch: bool = False) -> dict:
    """A checked create (``key`` required) or patch (no ``key``) body."""
    required = {} if patch else {"key": str}
    body = bind_object(raw, required=required, optional=_ISSUE_OPTIONAL, path=path)
    if not patch and not ISSUE_KEY.fullmatch(body["key"].upper()):
        raise _invalid(_at(path, "key"), "must look like PROJ-123")
    for name in ("labels", "components"):
        value = body.get(name)
        if value is not None and not all(isinstance(item, str) and item for item in value):
            raise _invalid(_at(path, name), "must be a list of non-empty strings")
    if body.get("created_at") is not None:
        try:
            parse_rfc3339(body["created_at"])
        except ValueError as exc:
            raise _invalid(_at(path, "created_at"), str(exc)) from None
    return body


def issue_changes(state: SandboxState, body: dict, *, path: str = "") -> dict[str, Any]:
    """The ``SandboxState.update_issue`` changes of a checked body: emails become account ids."""
    changes: dict[str, Any] = {}
    for name, value in body.items():
        if name in ("key", "fields"):
            continue
        if name in _EMAIL_FIELDS:
            changes[_EMAIL_FIELDS[name]] = _account(state, value, _at(path, name))
        elif name == "created_at":
            changes[name] = parse_rfc3339(value) if value is not None else None
        elif name in ("labels", "components"):
            changes[name] = list(value or [])
        elif name == "summary":
            changes[name] = value or ""
        elif name == "project_key":
            if value:  # an issue always has a project; null keeps it
                changes[name] = value
        else:
            changes[name] = value
    return changes


def _account(state: SandboxState, email: str | None, path: str) -> str | None:
    if email is None:
        return None
    try:
        return state.account_id_for(email)
    except UnknownUser:
        raise _invalid(path, f"{email} is not a sandbox user; add it first") from None


def build_issue(state: SandboxState, body: dict, *, path: str = "") -> SandboxIssue:
    key = body["key"].upper()
    changes = issue_changes(state, body, path=path)
    changes.setdefault("project_key", None)
    changes["project_key"] = changes["project_key"] or key.split("-")[0]
    return SandboxIssue(key=key, extra_fields=dict(body.get("fields") or {}), **changes)


def parse_user(raw: Any, *, path: str = "") -> dict:
    """Keyword arguments of ``SandboxState.put_user``."""
    body = bind_object(raw, required={"email": str}, optional=_USER_OPTIONAL, path=path)
    if "@" not in body["email"]:
        raise _invalid(_at(path, "email"), "must be an email address")
    return {key: value for key, value in body.items() if value is not None}


def put_user(state: SandboxState, raw: Any, *, path: str = "") -> tuple[dict, bool]:
    try:
        user, created = state.put_user(**parse_user(raw, path=path))
    except DuplicateId as exc:
        raise _invalid(path or "body", exc.message) from None
    return user.to_json(), created


def parse_emails(raw: Any, key: str, *, path: str = "") -> list[str]:
    body = bind_object(raw, required={key: list}, optional={}, path=path)
    if not all(isinstance(email, str) for email in body[key]):
        raise _invalid(_at(path, key), "must be a list of emails")
    return body[key]


def put_members(put: Callable[[str, list[str]], list], name: str, emails: list[str],
                path: str) -> list[str]:
    try:
        return [user.email for user in put(name, emails)]
    except UnknownUser as exc:
        raise _invalid(path, exc.message) from None


def parse_fault(raw: Any) -> dict:
    body = bind_object(raw, required={"service": str}, optional={
        "path_contains": str, "status": int, "retry_after": int, "times": int, "latency_ms": int,
    })
    body = {key: value for key, value in body.items() if value is not None}
    if body["service"] not in SERVICES:
        raise _invalid("service", f"must be one of {', '.join(SERVICES)}")
    if "status" not in body and "latency_ms" not in body:
        raise _invalid("status", "give a status, a latency_ms, or both")
    if not 400 <= body.get("status", 400) <= 599:
        raise _invalid("status", "must be an HTTP error status (400-599)")
    if not 0 <= body.get("latency_ms", 0) <= MAX_LATENCY_MS:
        raise _invalid("latency_ms", f"must be between 0 and {MAX_LATENCY_MS}")
    if body.get("retry_after", 0) < 0:
        raise _invalid("retry_after", "must be >= 0")
    if body.get("times", 1) < 1:
        raise _invalid("times", "must be >= 1")
    return body


# --- resources -------------------------------------------------------------------------------


class ControlResource:
    uses_database = False  # in-memory fakes (http/middleware.py)

    def __init__(self, state: SandboxState):
        self.state = state

    def issue_view(self, key: str) -> dict:
        try:
            return self.state.issue_view(key)
        except UnknownIssue as exc:
            raise NotFound(exc.message) from None


def _created(resp: falcon.Response, created: bool) -> None:
    resp.status = falcon.HTTP_201 if created else falcon.HTTP_200


class IssuesControl(ControlResource):
    roles = {"GET": PUBLIC, "POST": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = [self.issue_view(key) for key in self.state.issue_keys()]
        resp.media = {"items": items, "total": len(items)}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = parse_issue(read_json(req, MAX_BODY_BYTES))
        created = self.state.put_issue(build_issue(self.state, body))
        _created(resp, created)
        resp.media = self.issue_view(body["key"])


class IssueControl(ControlResource):
    roles = {"GET": PUBLIC, "PATCH": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        resp.media = self.issue_view(key)

    def on_patch(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        self.issue_view(key)  # 404 before 400
        body = parse_issue(read_json(req, MAX_BODY_BYTES), patch=True)
        try:
            self.state.update_issue(key, issue_changes(self.state, body),
                                    extra_fields=body.get("fields"), via="control")
        except UnknownIssue as exc:
            raise NotFound(exc.message) from None
        resp.media = self.issue_view(key)


class UsersControl(ControlResource):
    roles = {"GET": PUBLIC, "POST": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = [user.to_json() for user in self.state.users()]
        resp.media = {"items": items, "total": len(items)}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        user, created = put_user(self.state, read_json(req, MAX_BODY_BYTES))
        _created(resp, created)
        resp.media = user


class GroupControl(ControlResource):
    roles = {"PUT": PUBLIC}

    def on_put(self, req: falcon.Request, resp: falcon.Response, group: str) -> None:
        emails = parse_emails(read_json(req, MAX_BODY_BYTES), "members")
        members = put_members(self.state.put_group, group, emails, "members")
        resp.media = {"group": group, "members": members}


class TeamControl(ControlResource):
    roles = {"PUT": PUBLIC}

    def on_put(self, req: falcon.Request, resp: falcon.Response, team: str) -> None:
        emails = parse_emails(read_json(req, MAX_BODY_BYTES), "responders")
        responders = put_members(self.state.put_team, team, emails, "responders")
        resp.media = {"team": team, "responders": responders}


class MessageReadsControl(ControlResource):
    """A person reads a Lark card: the ACK signal of N§6.4."""

    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response, message_id: str) -> None:
        body = bind_object(read_json(req, MAX_BODY_BYTES), required={},
                           optional={"email": str, "open_id": str, "timestamp_ms": int})
        open_id = self._open_id(body)
        try:
            new = self.state.mark_read(message_id, open_id, body.get("timestamp_ms"))
        except UnknownMessage as exc:
            raise NotFound(exc.message) from None
        except UnknownUser as exc:
            raise _invalid("open_id", exc.message) from None
        resp.media = {"message_id": message_id, "open_id": open_id, "newly_read": new}

    def _open_id(self, body: dict) -> str:
        if bool(body.get("email")) == bool(body.get("open_id")):
            raise _invalid("email", "give exactly one of email or open_id")
        if body.get("open_id"):
            return body["open_id"]
        open_id = self.state.open_ids([body["email"]]).get(body["email"].strip().lower())
        if open_id is None:
            raise _invalid("email", f"{body['email']} is not a Lark user in the sandbox")
        return open_id


class LarkTokensControl(ControlResource):
    roles = {"DELETE": PUBLIC}

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"revoked": self.state.revoke_tokens()}


class ListControl(ControlResource):
    """A read-only list of what the fake services recorded."""

    roles = {"GET": PUBLIC}

    def __init__(self, state: SandboxState, fetch: Callable[[falcon.Request], list[dict]]):
        super().__init__(state)
        self.fetch = fetch

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = self.fetch(req)
        resp.media = {"items": items, "total": len(items)}


class FaultsControl(ControlResource):
    roles = {"GET": PUBLIC, "POST": PUBLIC, "DELETE": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = [fault.to_json() for fault in self.state.faults()]
        resp.media = {"items": items, "total": len(items)}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = parse_fault(read_json(req, MAX_BODY_BYTES))
        resp.status = falcon.HTTP_201
        resp.media = self.state.add_fault(body.pop("service"), **body).to_json()

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"cleared": self.state.clear_faults()}


def _comments(state: SandboxState) -> Callable[[falcon.Request], list[dict]]:
    def fetch(req: falcon.Request) -> list[dict]:
        try:
            return state.comments(req.get_param("issue_key"))
        except UnknownIssue as exc:
            raise NotFound(exc.message) from None
    return fetch


def routes(state: SandboxState) -> list[tuple[str, object]]:
    """Paths relative to ``{prefix}/_control``."""
    return [
        ("/issues", IssuesControl(state)),
        ("/issues/{key}", IssueControl(state)),
        ("/users", UsersControl(state)),
        ("/groups/{group}", GroupControl(state)),
        ("/teams/{team}", TeamControl(state)),
        ("/lark/messages/{message_id}/reads", MessageReadsControl(state)),
        ("/lark/tokens", LarkTokensControl(state)),
        ("/messages", ListControl(state, lambda req: [m.to_json() for m in state.messages()])),
        ("/urgents", ListControl(state, lambda req: [u.to_json() for u in state.urgents()])),
        ("/pages", ListControl(state, lambda req: [p.to_json() for p in state.pages()])),
        ("/comments", ListControl(state, _comments(state))),
        ("/requests", ListControl(state, lambda req: state.requests())),
        ("/faults", FaultsControl(state)),
    ]
