"""The sandbox's control API under ``/sandbox/_control``: shape the fake
world and look at what the dispatcher did to it.

| method and path | what |
| --- | --- |
| `GET/POST /issues`, `GET/PATCH /issues/{key}` | list, create or replace, read as stored, change |
| `POST /issues/{key}/rearm` | put an issue back as it was created (``JiraState.rearm``) |
| `GET/POST /users` | the directory; create or replace one person |
| `PUT /groups/{group}` `{"members"}` | a Core group |
| `PUT /teams/{team}` `{"responders"}` | an Oncall team, primary first |
| `POST /lark/messages/{id}/reads` `{"email"|"open_id", "timestamp_ms"?}` | a card is read |
| `POST /lark/messages/{id}/press` `{"action", "open_id"?}` | a card's button is pressed |
| `DELETE /lark/tokens` | revoke every tenant token (clients must refresh) |
| `GET /messages`, `/urgents`, `/pages`, `/comments?issue_key=`, `/requests` | what was sent |
| `GET/POST/DELETE /faults` | list, inject, clear faults |
| `GET/PUT/DELETE /oncall/outcome` `{"outcome", "email"?, "times"?}` | force the next pages |

A forced page outcome is `accepted`, `no_phone_number` or `call_error` (``oncall.py``), for
everybody or one `email`, for `times` pages or until `DELETE`; `GET` lists those in force.

Users read about every route in ``ops/examples/README.md``; tests/sandbox/test_control_docs.py
fails when a route has no row there.

Bad input is a 400 in the project's error shape (``http/errors.py``); the parsers here are shared
with ``examples.py``, so ``ops/examples/sandbox.json`` uses exactly these bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import falcon
import requests

from ticket_dispatcher.domain.issues import ISSUE_KEY
from ticket_dispatcher.errors import Conflict, InvalidInput, NotFound, Problem
from ticket_dispatcher.safejson import bind_object
from ticket_dispatcher.sandbox.base import PUBLIC, read_json_body
from ticket_dispatcher.sandbox.jira import SandboxIssue, UnknownIssue
from ticket_dispatcher.sandbox.lark import NoButton, UnknownMessage, card_callback
from ticket_dispatcher.sandbox.oncall import FORCED_OUTCOMES
from ticket_dispatcher.sandbox.people import DuplicateId, People, UnknownUser
from ticket_dispatcher.sandbox.traffic import SERVICES
from ticket_dispatcher.sandbox.world import Sandbox
from ticket_dispatcher.timeutil import format_time, parse_rfc3339

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
_WORLD_OPTIONAL: dict[str, type] = {"users": list, "groups": dict, "teams": dict, "issues": list}


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _invalid(path: str, message: str) -> InvalidInput:
    return InvalidInput(f"{path} {message}", [Problem(path, message)])


# --- parsing (shared with examples.py) -------------------------------------------------------


def parse_world(raw: Any) -> dict:
    """The top level of ``sandbox.json``: people, groups, teams and issues, all optional."""
    return bind_object(raw, required={}, optional=_WORLD_OPTIONAL)


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


def issue_changes(people: People, body: dict, *, path: str = "") -> dict[str, Any]:
    """The ``JiraState.update_issue`` changes of a checked body: emails become account ids."""
    changes: dict[str, Any] = {}
    for name, value in body.items():
        if name in ("key", "fields"):
            continue
        if name in _EMAIL_FIELDS:
            changes[_EMAIL_FIELDS[name]] = _account(people, value, _at(path, name))
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


def _account(people: People, email: str | None, path: str) -> str | None:
    if email is None:
        return None
    try:
        return people.account_id_for(email)
    except UnknownUser:
        raise _invalid(path, f"{email} is not a sandbox user; add it first") from None


def build_issue(people: People, body: dict, *, path: str = "") -> SandboxIssue:
    key = body["key"].upper()
    changes = issue_changes(people, body, path=path)
    changes.setdefault("project_key", None)
    changes["project_key"] = changes["project_key"] or key.split("-")[0]
    return SandboxIssue(key=key, extra_fields=dict(body.get("fields") or {}), **changes)


def parse_user(raw: Any, *, path: str = "") -> dict:
    """Keyword arguments of ``People.put_user``."""
    body = bind_object(raw, required={"email": str}, optional=_USER_OPTIONAL, path=path)
    if "@" not in body["email"]:
        raise _invalid(_at(path, "email"), "must be an email address")
    return {key: value for key, value in body.items() if value is not None}


def put_user(people: People, raw: Any, *, path: str = "") -> tuple[dict, bool]:
    try:
        user, created = people.put_user(**parse_user(raw, path=path))
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


def parse_outcome(people: People, raw: Any) -> dict:
    """Keyword arguments of ``OncallState.force_outcome``: ``outcome`` one of
    ``FORCED_OUTCOMES``, ``email`` a sandbox user (only their pages), ``times`` >= 1."""
    body = bind_object(raw, required={"outcome": str},
                       optional={"email": str, "times": int})
    body = {key: value for key, value in body.items() if value is not None}
    if body["outcome"] not in FORCED_OUTCOMES:
        raise _invalid("outcome", f"must be one of {', '.join(FORCED_OUTCOMES)}")
    if "email" in body and people.user(body["email"]) is None:
        raise _invalid("email", f"{body['email']} is not a sandbox user; add it first")
    if body.get("times", 1) < 1:
        raise _invalid("times", "must be >= 1")
    return body


def issue_view(sandbox: Sandbox, key: str) -> dict:
    """The issue as stored, people by email, with comments and histories."""
    issue = sandbox.jira.issue(key)  # a copy

    def email(account_id: str | None) -> str | None:
        user = sandbox.people.user_by_account(account_id)
        return user.email if user else account_id

    return {
        "key": issue.key,
        "project_key": issue.project_key,
        "summary": issue.summary,
        "environment": issue.environment,
        "priority": issue.priority,
        "status": issue.status,
        "severity": issue.severity,
        "labels": issue.labels,
        "components": issue.components,
        "assignee_email": email(issue.assignee),
        "l2_assignee_email": email(issue.l2_assignee),
        "reporter_email": email(issue.reporter),
        "assignee_account_id": issue.assignee,
        "l2_assignee_account_id": issue.l2_assignee,
        "created_at": format_time(issue.created_at),
        "fields": issue.extra_fields,
        "comments": issue.comments,
        "label_history": issue.label_history,
        "history": issue.history,
    }


# --- resources -------------------------------------------------------------------------------


def _refuse(status: int, message: str) -> Exception:
    """A body the control API cannot read, in the project's error shape."""
    if status == 413:
        return falcon.HTTPContentTooLarge(description=message)
    return InvalidInput(message)


def _created(resp: falcon.Response, created: bool) -> None:
    resp.status = falcon.HTTP_201 if created else falcon.HTTP_200


class ControlResource:
    uses_database = False  # in-memory fakes (http/middleware.py)

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def body(self, req: falcon.Request) -> Any:
        return read_json_body(req, _refuse)

    def issue_view(self, key: str) -> dict:
        try:
            return issue_view(self.sandbox, key)
        except UnknownIssue as exc:
            raise NotFound(exc.message) from None


class IssuesControl(ControlResource):
    roles = {"GET": PUBLIC, "POST": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = [self.issue_view(key) for key in self.sandbox.jira.issue_keys()]
        resp.media = {"items": items, "total": len(items)}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = parse_issue(self.body(req))
        created = self.sandbox.jira.put_issue(build_issue(self.sandbox.people, body))
        _created(resp, created)
        resp.media = self.issue_view(body["key"])


class IssueControl(ControlResource):
    roles = {"GET": PUBLIC, "PATCH": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        resp.media = self.issue_view(key)

    def on_patch(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        self.issue_view(key)  # 404 before 400
        body = parse_issue(self.body(req), patch=True)
        try:
            self.sandbox.jira.update_issue(key, issue_changes(self.sandbox.people, body),
                                           extra_fields=body.get("fields"), via="control")
        except UnknownIssue as exc:
            raise NotFound(exc.message) from None
        resp.media = self.issue_view(key)


class IssueRearmControl(ControlResource):
    """Put an issue back as ``sandbox.json`` (or its ``POST /issues``) defined it: a finished
    notification workflow removed ``notify-assignee`` and an assignment removed
    ``auto-dispatch``, so the README's demos can run again. No body."""

    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        try:
            self.sandbox.jira.rearm(key)
        except UnknownIssue as exc:
            raise NotFound(exc.message) from None
        except UnknownUser as exc:  # a person of the issue was replaced since
            raise Conflict(f"issue {key} cannot be re-armed: {exc.message}") from None
        resp.media = self.issue_view(key)


class UsersControl(ControlResource):
    roles = {"GET": PUBLIC, "POST": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = [user.to_json() for user in self.sandbox.people.users()]
        resp.media = {"items": items, "total": len(items)}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        user, created = put_user(self.sandbox.people, self.body(req))
        _created(resp, created)
        resp.media = user


class GroupControl(ControlResource):
    roles = {"PUT": PUBLIC}

    def on_put(self, req: falcon.Request, resp: falcon.Response, group: str) -> None:
        emails = parse_emails(self.body(req), "members")
        members = put_members(self.sandbox.core.put_group, group, emails, "members")
        resp.media = {"group": group, "members": members}


class TeamControl(ControlResource):
    roles = {"PUT": PUBLIC}

    def on_put(self, req: falcon.Request, resp: falcon.Response, team: str) -> None:
        emails = parse_emails(self.body(req), "responders")
        responders = put_members(self.sandbox.oncall.put_team, team, emails, "responders")
        resp.media = {"team": team, "responders": responders}


class MessageReadsControl(ControlResource):
    """A person reads a Lark card: the read that counts as an ACK when it is the target's."""

    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response, message_id: str) -> None:
        body = bind_object(self.body(req), required={},
                           optional={"email": str, "open_id": str, "timestamp_ms": int})
        open_id = self._open_id(body)
        try:
            new = self.sandbox.lark.mark_read(message_id, open_id, body.get("timestamp_ms"))
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
        open_id = self.sandbox.lark.open_id_of(body["email"])
        if open_id is None:
            raise _invalid("email", f"{body['email']} is not a Lark user in the sandbox")
        return open_id


class MessagePressControl(ControlResource):
    """A person presses a card's button: the sandbox's Lark calls the service back, signed as
    Lark signs it, and answers what the service answered (the card, updated in place when the
    answer carries one)."""

    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response, message_id: str) -> None:
        body = bind_object(self.body(req), required={"action": str},
                           optional={"open_id": str})
        lark = self.sandbox.lark
        if lark.callbacks is None:
            raise Conflict("the service takes no card callbacks (lark.verification_token, "
                           "lark.encrypt_key)")
        try:
            receiver, value = lark.button_value(message_id, body["action"])
        except UnknownMessage as exc:
            raise NotFound(exc.message) from None
        except NoButton as exc:
            raise _invalid("action", exc.message) from None
        callback, headers = card_callback(lark.callbacks.keys, message_id,
                                          body.get("open_id") or receiver, value, lark.now())
        answer = requests.post(lark.callbacks.url, data=callback, headers=headers, timeout=10)
        try:
            answered = answer.json()
        except ValueError:
            answered = {"text": answer.text}
        card = answered.get("card") if isinstance(answered, dict) else None
        if answer.status_code == 200 and isinstance(card, dict) and \
                isinstance(card.get("data"), dict):
            lark.update_card(message_id, card["data"])
        resp.media = {"message_id": message_id, "status": answer.status_code,
                      "answer": answered}


class LarkTokensControl(ControlResource):
    roles = {"DELETE": PUBLIC}

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"revoked": self.sandbox.lark.revoke_tokens()}


class ListControl(ControlResource):
    """A read-only list of what the fake services recorded."""

    roles = {"GET": PUBLIC}

    def __init__(self, sandbox: Sandbox, fetch: Callable[[falcon.Request], list[dict]]):
        super().__init__(sandbox)
        self.fetch = fetch

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = self.fetch(req)
        resp.media = {"items": items, "total": len(items)}


class FaultsControl(ControlResource):
    roles = {"GET": PUBLIC, "POST": PUBLIC, "DELETE": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = [fault.to_json() for fault in self.sandbox.traffic.faults()]
        resp.media = {"items": items, "total": len(items)}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = parse_fault(self.body(req))
        resp.status = falcon.HTTP_201
        resp.media = self.sandbox.traffic.add_fault(body.pop("service"), **body).to_json()

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"cleared": self.sandbox.traffic.clear_faults()}


class OncallOutcomeControl(ControlResource):
    """Force what the next pages come to (accepted, no phone, a failed call), to
    show each page outcome."""

    roles = {"GET": PUBLIC, "PUT": PUBLIC, "DELETE": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = [o.to_json() for o in self.sandbox.oncall.outcome_overrides()]
        resp.media = {"items": items, "total": len(items)}

    def on_put(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = parse_outcome(self.sandbox.people, self.body(req))
        resp.media = self.sandbox.oncall.force_outcome(body.pop("outcome"), **body).to_json()

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"cleared": self.sandbox.oncall.clear_outcomes()}


def _comments(sandbox: Sandbox) -> Callable[[falcon.Request], list[dict]]:
    def fetch(req: falcon.Request) -> list[dict]:
        try:
            return sandbox.jira.comments(req.get_param("issue_key"))
        except UnknownIssue as exc:
            raise NotFound(exc.message) from None
    return fetch


def routes(sandbox: Sandbox) -> list[tuple[str, object]]:
    """Paths relative to ``{prefix}/_control``."""
    lark, oncall, traffic = sandbox.lark, sandbox.oncall, sandbox.traffic
    return [
        ("/issues", IssuesControl(sandbox)),
        ("/issues/{key}", IssueControl(sandbox)),
        ("/issues/{key}/rearm", IssueRearmControl(sandbox)),
        ("/users", UsersControl(sandbox)),
        ("/groups/{group}", GroupControl(sandbox)),
        ("/teams/{team}", TeamControl(sandbox)),
        ("/lark/messages/{message_id}/reads", MessageReadsControl(sandbox)),
        ("/lark/messages/{message_id}/press", MessagePressControl(sandbox)),
        ("/lark/tokens", LarkTokensControl(sandbox)),
        ("/messages", ListControl(sandbox, lambda req: [m.to_json() for m in lark.messages()])),
        ("/urgents", ListControl(sandbox, lambda req: [u.to_json() for u in lark.urgents()])),
        ("/pages", ListControl(sandbox, lambda req: [p.to_json() for p in oncall.pages()])),
        ("/comments", ListControl(sandbox, _comments(sandbox))),
        ("/requests", ListControl(sandbox, lambda req: traffic.requests())),
        ("/faults", FaultsControl(sandbox)),
        ("/oncall/outcome", OncallOutcomeControl(sandbox)),
    ]
