"""The fake Jira Cloud (SPEC §11): read an issue, assign it, edit it, search users, comment.

Errors use Jira's shape ``{"errorMessages": [...], "errors": {field: message}}``. Callers must
send Basic auth (any ``user:token``); the sandbox only checks that it is there.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Any

import falcon

from ticket_dispatcher.http.auth import PUBLIC
from ticket_dispatcher.integrations.sandbox.base import ServiceError, ServiceResource, guard
from ticket_dispatcher.integrations.sandbox.state import (
    SandboxIssue,
    SandboxUser,
    UnknownIssue,
    UnknownUser,
)

ISSUE_MISSING = "Issue does not exist or you do not have permission to see it."
NOT_SETTABLE = ("status", "project", "created", "key")  # status moves by transition only
ALL_FIELDS = ("*all", "*navigable")


def jira_error(status: int, messages: list[str] | tuple = (), errors: dict | None = None,
               headers: dict[str, str] | None = None) -> ServiceError:
    return ServiceError(status, {"errorMessages": list(messages), "errors": dict(errors or {})},
                        headers)


def jira_user(user: SandboxUser | None) -> dict | None:
    if user is None:
        return None
    return {
        "accountId": user.account_id,
        "accountType": "atlassian",
        "emailAddress": user.email,
        "displayName": user.display_name,
        "active": user.active,
    }


def jira_time(moment: datetime) -> str:
    """Jira's own format: ``2021-01-17T12:34:00.000+0000``."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}+0000"


def render_issue(issue: SandboxIssue, people: dict[str, SandboxUser], l2_field_id: str,
                 severity_field_id: str, wanted: set[str] | None = None) -> dict:
    """``{"key", "fields"}`` as ``GET /rest/api/2/issue/{key}`` answers; ``wanted`` limits the
    fields like Jira's ``fields=`` parameter (None = all)."""

    def person(account_id: str | None) -> dict | None:
        return jira_user(people.get(account_id)) if account_id else None

    fields = {
        **issue.extra_fields,
        "summary": issue.summary,
        "project": {"key": issue.project_key, "name": issue.project_key},
        "environment": issue.environment,
        "reporter": person(issue.reporter),
        "assignee": person(issue.assignee),
        l2_field_id: person(issue.l2_assignee),
        "created": jira_time(issue.created_at) if issue.created_at else None,
        "components": [{"name": name} for name in issue.components],
        "labels": list(issue.labels),
        "priority": {"name": issue.priority} if issue.priority else None,
        "status": {"name": issue.status} if issue.status else None,
        severity_field_id: {"value": issue.severity} if issue.severity else None,
    }
    if wanted is not None:
        fields = {name: value for name, value in fields.items() if name in wanted}
    return {"key": issue.key, "fields": fields}


class JiraResource(ServiceResource):
    service = "jira"

    def error(self, status: int, message: str,
              headers: dict[str, str] | None = None) -> ServiceError:
        return jira_error(status, [message], headers=headers)

    def authenticate(self, req: falcon.Request) -> None:
        scheme, _, encoded = (req.get_header("Authorization") or "").partition(" ")
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode()
            user, _, token = decoded.partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user = token = ""
        if scheme.lower() != "basic" or not user or not token:
            raise jira_error(401, ["You are not authenticated. Authentication required to "
                                   "perform this operation."])

    def assignable(self, field: str, account_id: Any) -> str | None:
        """An account id a user field may be set to (None clears), or Jira's 400."""
        if account_id is None:
            return None
        if not isinstance(account_id, str):
            raise jira_error(400, errors={field: "accountId must be a string or null"})
        user = self.state.user_by_account(account_id)
        if user is None:
            raise jira_error(400, errors={field: f"User '{account_id}' does not exist."})
        if not user.active:
            raise jira_error(400, errors={field: f"User '{account_id}' cannot be assigned "
                                                 "issues."})
        return account_id


@falcon.before(guard)
class IssueResource(JiraResource):
    roles = {"GET": PUBLIC, "PUT": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        try:
            issue, people = self.state.jira_issue(key)
        except UnknownIssue:
            raise jira_error(404, [ISSUE_MISSING]) from None
        requested = [name.strip() for name in (req.get_param("fields") or "").split(",")]
        requested = [name for name in requested if name]
        wanted = None if not requested or set(requested) & set(ALL_FIELDS) else set(requested)
        resp.media = render_issue(issue, people, self.state.l2_field_id,
                                  self.state.severity_field_id, wanted)

    def on_put(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        body = self.body(req)
        if not isinstance(body, dict):
            raise jira_error(400, ["The request body must be a JSON object."])
        self._exists(key)
        edit = _IssueEdit(self)
        edit.read_fields(body.get("fields") or {})
        edit.read_update(body.get("update") or {})
        if edit.errors:
            raise jira_error(400, errors=edit.errors)
        try:
            self.state.update_issue(key, edit.changes, label_ops=edit.label_ops,
                                    extra_fields=edit.extra, via="jira")
        except UnknownIssue:
            raise jira_error(404, [ISSUE_MISSING]) from None
        except UnknownUser as exc:  # the user vanished between the check and the write
            raise jira_error(400, [exc.message]) from None
        resp.status = falcon.HTTP_204

    def _exists(self, key: str) -> None:
        try:
            self.state.issue(key)
        except UnknownIssue:
            raise jira_error(404, [ISSUE_MISSING]) from None


class _IssueEdit:
    """``PUT /issue/{key}``: ``fields`` set values, ``update`` adds/removes labels."""

    def __init__(self, resource: JiraResource):
        self.resource = resource
        state = resource.state
        self.user_fields = {"assignee": "assignee", "reporter": "reporter",
                            state.l2_field_id: "l2_assignee"}
        self.severity_field_id = state.severity_field_id
        self.changes: dict[str, Any] = {}
        self.label_ops: list[tuple[str, str]] = []
        self.extra: dict[str, Any] = {}
        self.errors: dict[str, str] = {}

    def read_fields(self, fields: Any) -> None:
        if not isinstance(fields, dict):
            self.errors["fields"] = "fields must be an object"
            return
        for name, value in fields.items():
            try:
                self._read_field(name, value)
            except ServiceError as exc:
                self.errors.update(exc.body["errors"])

    def _read_field(self, name: str, value: Any) -> None:
        if name in NOT_SETTABLE:
            self.errors[name] = (f"Field '{name}' cannot be set. It is not on the appropriate "
                                 "screen, or unknown.")
        elif name in self.user_fields:
            account_id = value.get("accountId") if isinstance(value, dict) else value
            if value is not None and not isinstance(value, dict):
                self.errors[name] = 'expected {"accountId": ...} or null'
                return
            self.changes[self.user_fields[name]] = self.resource.assignable(name, account_id)
        elif name == "priority":
            self.changes["priority"] = self._named(name, value, "name")
        elif name == self.severity_field_id:
            self.changes["severity"] = self._named(name, value, "value")
        elif name == "components":
            self.changes["components"] = self._names(name, value)
        elif name == "labels":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                self.errors[name] = "labels must be a list of strings"
            else:
                self.changes["labels"] = list(value)
        elif name in ("summary", "environment"):
            if value is not None and not isinstance(value, str):
                self.errors[name] = f"{name} must be a string"
            else:
                self.changes[name] = value if name == "environment" else (value or "")
        else:
            self.extra[name] = value

    def _named(self, name: str, value: Any, attribute: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, dict) or not isinstance(value.get(attribute), str):
            self.errors[name] = f'expected {{"{attribute}": "..."}} or null'
            return None
        return value[attribute]

    def _names(self, name: str, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(
            isinstance(item, dict) and isinstance(item.get("name"), str) for item in value
        ):
            self.errors[name] = 'expected a list of {"name": "..."}'
            return []
        return [item["name"] for item in value]

    def read_update(self, update: Any) -> None:
        if not isinstance(update, dict):
            self.errors["update"] = "update must be an object"
            return
        for name, operations in update.items():
            if name != "labels":
                self.errors[name] = f"Field '{name}' does not support update operations here."
                continue
            if not isinstance(operations, list):
                self.errors[name] = "expected a list of operations"
                continue
            for operation in operations:
                self._read_label_op(operation)

    def _read_label_op(self, operation: Any) -> None:
        if (not isinstance(operation, dict) or len(operation) != 1
                or next(iter(operation)) not in ("add", "remove")
                or not isinstance(next(iter(operation.values())), str)):
            self.errors["labels"] = 'each operation must be {"add": LABEL} or {"remove": LABEL}'
            return
        action, label = next(iter(operation.items()))
        self.label_ops.append((action, label))


@falcon.before(guard)
class AssigneeResource(JiraResource):
    roles = {"PUT": PUBLIC}

    def on_put(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        body = self.body(req)
        if not isinstance(body, dict) or "accountId" not in body:
            raise jira_error(400, errors={"accountId": "accountId is required (null unassigns)"})
        try:
            self.state.issue(key)
            account_id = self.assignable("assignee", body["accountId"])
            self.state.update_issue(key, {"assignee": account_id}, via="jira")
        except UnknownIssue:
            raise jira_error(404, [ISSUE_MISSING]) from None
        except UnknownUser as exc:
            raise jira_error(400, [exc.message]) from None
        resp.status = falcon.HTTP_204


@falcon.before(guard)
class UserSearchResource(JiraResource):
    roles = {"GET": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        query = (req.get_param("query") or "").strip()
        if not query:
            raise jira_error(400, ["The query parameter 'query' is required."])
        start = _int_param(req, "startAt", 0)
        size = _int_param(req, "maxResults", 50)
        # A *contains* match, as Jira's: the client must keep only an exact email (SPEC §11).
        users = self.state.search_users(query)[start:start + size]
        resp.media = [jira_user(user) for user in users]


def _int_param(req: falcon.Request, name: str, default: int) -> int:
    text = req.get_param(name)
    if text is None:
        return default
    if not text.isdigit():
        raise jira_error(400, [f"The parameter '{name}' must be a non-negative integer."])
    return int(text)


@falcon.before(guard)
class RequestCommentResource(JiraResource):
    """Jira Service Management: ``POST /rest/servicedeskapi/request/{key}/comment``."""

    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response, key: str) -> None:
        body = self.body(req)
        if not isinstance(body, dict) or not isinstance(body.get("body"), str) \
                or not body["body"].strip():
            raise jira_error(400, errors={"body": "The comment body must be a non-empty string."})
        public = body.get("public", True)
        if not isinstance(public, bool):
            raise jira_error(400, errors={"public": "public must be true or false"})
        try:
            comment = self.state.add_comment(key, body["body"], public)
        except UnknownIssue:
            raise jira_error(404, [ISSUE_MISSING]) from None
        resp.status = falcon.HTTP_201
        resp.media = {"id": comment["id"], "body": comment["body"], "public": comment["public"],
                      "created": {"iso8601": comment["created_at"]}}


def routes(state) -> list[tuple[str, object]]:
    """Paths relative to the service's base URL."""
    return [
        ("/rest/api/2/issue/{key}", IssueResource(state)),
        ("/rest/api/2/issue/{key}/assignee", AssigneeResource(state)),
        ("/rest/api/2/user/search", UserSearchResource(state)),
        ("/rest/servicedeskapi/request/{key}/comment", RequestCommentResource(state)),
    ]
