"""The fake Jira Cloud: its issues and what was done to them (``JiraState``), and the
resources that read an issue, assign it, edit it, search users, count issues by JQL (the
little JQL of ``jql.py``), search issues by key and comment.

Errors use Jira's shape ``{"errorMessages": [...], "errors": {field: message}}``. Callers must
send Basic auth (any ``user:token``); the sandbox only checks that it is there. The people are
the shared directory (``people.py``): user fields hold their Jira account ids.
"""

from __future__ import annotations

import base64
import binascii
import copy
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import falcon

from ticket_dispatcher.domain.issues import DEFAULT_L2_FIELD_ID, DEFAULT_SEVERITY_FIELD_ID
from ticket_dispatcher.sandbox.base import PUBLIC, ServiceError, ServiceResource, guard
from ticket_dispatcher.sandbox.jql import UnsupportedJql, keys_in, parse
from ticket_dispatcher.sandbox.people import People, SandboxError, SandboxUser, UnknownUser
from ticket_dispatcher.sandbox.traffic import Traffic
from ticket_dispatcher.timeutil import format_time

T = TypeVar("T")

# Issue attributes an edit may change; the user ones hold Jira account ids.
USER_FIELDS = ("assignee", "l2_assignee", "reporter")
ISSUE_FIELDS = (
    "project_key", "summary", "environment", "priority", "status", "severity",
    "labels", "components", "created_at", *USER_FIELDS,
)
ISSUE_MISSING = "Issue does not exist or you do not have permission to see it."
NOT_SETTABLE = ("status", "project", "created", "key")  # status moves by transition only
ALL_FIELDS = ("*all", "*navigable")


class UnknownIssue(SandboxError):
    pass


@dataclass
class SandboxIssue:
    key: str
    project_key: str
    summary: str = ""
    environment: str | None = None
    priority: str | None = None
    status: str | None = None
    severity: str | None = None
    labels: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)
    assignee: str | None = None  # account ids
    l2_assignee: str | None = None
    reporter: str | None = None
    created_at: datetime | None = None
    extra_fields: dict[str, Any] = field(default_factory=dict)  # raw Jira fields set by edits
    comments: list[dict] = field(default_factory=list)
    label_history: list[dict] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)


# --- the state ---------------------------------------------------------------------------------


class JiraState:
    """Issues, their comments and the history of every edit, behind one lock; everything
    handed out is a copy. The custom field ids are plain attributes (tests change them)."""

    def __init__(self, people: People, *, now: Callable[[], datetime],
                 l2_field_id: str = DEFAULT_L2_FIELD_ID,
                 severity_field_id: str = DEFAULT_SEVERITY_FIELD_ID):
        self.people = people
        self.now = now
        self.l2_field_id = l2_field_id
        self.severity_field_id = severity_field_id
        self._lock = threading.Lock()
        self._issues: dict[str, SandboxIssue] = {}
        self._armed: dict[str, SandboxIssue] = {}  # each issue as it was put, for ``rearm``
        self._comment_count = 0

    def put_issue(self, issue: SandboxIssue) -> bool:
        """Create or replace (comments and history start afresh). True when created. The
        issue as put is what ``rearm`` goes back to."""
        issue = copy.deepcopy(issue)
        issue.key = issue.key.upper()
        with self._lock:
            self._check_accounts({name: getattr(issue, name) for name in USER_FIELDS})
            if issue.created_at is None:
                issue.created_at = self.now()
            created = issue.key not in self._issues
            self._issues[issue.key] = issue
            self._armed[issue.key] = copy.deepcopy(issue)
            return created

    def rearm(self, key: str) -> None:
        """Put an issue back as it was put (``sandbox.json`` or ``POST /issues``): every field
        of ``ISSUE_FIELDS`` and the raw fields, so a demo that a workflow has finished can run
        again. It is one edit ``via="rearm"`` in the histories; the comments stay."""
        with self._lock:
            issue = self._issue(key)
            armed = self._armed[issue.key]
            changes = {name: copy.deepcopy(getattr(armed, name)) for name in ISSUE_FIELDS}
            self._check_accounts({name: changes[name] for name in USER_FIELDS})
            self._apply(issue, changes, (), via="rearm")
            issue.labels = list(armed.labels)  # the file's order, not the order of re-adding
            issue.extra_fields = copy.deepcopy(armed.extra_fields)

    def issue(self, key: str) -> SandboxIssue:
        with self._lock:
            return copy.deepcopy(self._issue(key))

    def issue_keys(self) -> list[str]:
        with self._lock:
            return sorted(self._issues)

    def _issue(self, key: str) -> SandboxIssue:
        issue = self._issues.get(key.upper())
        if issue is None:
            raise UnknownIssue(f"issue {key} does not exist")
        return issue

    def issue_with_people(self, key: str) -> tuple[SandboxIssue, dict[str, SandboxUser]]:
        """The issue and the people its user fields name, by account id."""
        with self._lock:
            issue = copy.deepcopy(self._issue(key))
            people = {}
            for name in USER_FIELDS:
                user = self.people.user_by_account(getattr(issue, name))
                if user is not None:
                    people[user.account_id] = user
            return issue, people

    def update_issue(
        self,
        key: str,
        changes: dict[str, Any],
        *,
        label_ops: Iterable[tuple[str, str]] = (),
        extra_fields: dict[str, Any] | None = None,
        via: str,
    ) -> None:
        """Apply one edit atomically. ``changes`` maps ``ISSUE_FIELDS`` names to new values
        (user fields as account ids, None clears); ``label_ops`` are ("add"|"remove", label)
        applied after a wholesale ``labels``; every change lands in the issue's histories."""
        unknown = set(changes) - set(ISSUE_FIELDS)
        if unknown:
            raise ValueError(f"not issue fields: {sorted(unknown)}")
        with self._lock:
            issue = self._issue(key)
            self._check_accounts({k: v for k, v in changes.items() if k in USER_FIELDS})
            self._apply(issue, changes, label_ops, via=via)
            issue.extra_fields.update(copy.deepcopy(extra_fields or {}))

    def _apply(self, issue: SandboxIssue, changes: dict[str, Any],
               label_ops: Iterable[tuple[str, str]], *, via: str) -> None:
        at = format_time(self.now())
        for name, value in changes.items():
            if name == "labels":
                _set_labels(issue, list(value), at, via)
                continue
            before = getattr(issue, name)
            if before != value:
                issue.history.append({"at": at, "field": name, "from": _plain(before),
                                      "to": _plain(value), "via": via})
                setattr(issue, name, list(value) if name == "components" else value)
        for action, label in label_ops:
            _change_label(issue, action, label, at, via)

    def _check_accounts(self, fields: dict[str, str | None]) -> None:
        for name, account_id in fields.items():
            if account_id is not None and self.people.user_by_account(account_id) is None:
                raise UnknownUser(f"{name}: no user has the account id {account_id}")

    def add_comment(self, key: str, body: str, public: bool) -> dict:
        with self._lock:
            issue = self._issue(key)
            self._comment_count += 1
            comment = {
                "id": str(10000 + self._comment_count),
                "issue_key": issue.key,
                "body": body,
                "public": public,
                "created_at": format_time(self.now()),
            }
            issue.comments.append(comment)
            return dict(comment)

    def comments(self, issue_key: str | None = None) -> list[dict]:
        with self._lock:
            keys = [self._issue(issue_key).key] if issue_key else sorted(self._issues)
            return [dict(c) for key in keys for c in self._issues[key].comments]

    def count_issues(self, matches: Callable[[SandboxIssue], bool]) -> int:
        """How many issues ``matches`` (a parsed JQL) holds for."""
        with self._lock:
            return sum(1 for issue in self._issues.values() if matches(issue))

    def search_users(self, query: str) -> list[SandboxUser]:
        """Jira's user search: a case-insensitive *contains* match on email or display name."""
        needle = query.lower()
        return [user for user in self.people.users()
                if needle in user.email or needle in user.display_name.lower()]


def _set_labels(issue: SandboxIssue, labels: list[str], at: str, via: str) -> None:
    for label in [label for label in issue.labels if label not in labels]:
        _change_label(issue, "remove", label, at, via)
    for label in labels:
        _change_label(issue, "add", label, at, via)


def _change_label(issue: SandboxIssue, action: str, label: str, at: str, via: str) -> None:
    # Like Jira: adding a present label or removing an absent one changes nothing.
    if action == "add" and label not in issue.labels:
        issue.labels.append(label)
    elif action == "remove" and label in issue.labels:
        issue.labels.remove(label)
    else:
        return
    issue.label_history.append({"at": at, "action": action, "label": label, "via": via})


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    return list(value) if isinstance(value, list) else value


# --- Jira's wire format ------------------------------------------------------------------------


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


# --- the resources -----------------------------------------------------------------------------


def basic_user(req: falcon.Request) -> str:
    """The user of an ``Authorization: Basic user:token`` header with both parts, or ""."""
    scheme, _, encoded = (req.get_header("Authorization") or "").partition(" ")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""
    user, _, token = decoded.partition(":")
    return user if scheme.lower() == "basic" and user and token else ""


class JiraServiceResource(ServiceResource):
    """Any fake Jira resource: Jira's error shape and Basic auth."""

    service = "jira"

    def error(self, status: int, message: str,
              headers: dict[str, str] | None = None) -> ServiceError:
        return jira_error(status, [message], headers=headers)

    def authenticate(self, req: falcon.Request) -> None:
        if not basic_user(req):
            raise jira_error(401, ["You are not authenticated. Authentication required to "
                                   "perform this operation."])


class JiraResource(JiraServiceResource):
    """A resource over the issues (``JiraState``)."""

    state: JiraState

    def assignable(self, field: str, account_id: Any) -> str | None:
        """An account id a user field may be set to (None clears), or Jira's 400."""
        if account_id is None:
            return None
        if not isinstance(account_id, str):
            raise jira_error(400, errors={field: "accountId must be a string or null"})
        user = self.state.people.user_by_account(account_id)
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
            issue, people = self.state.issue_with_people(key)
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
        # A *contains* match, as Jira's: the client must keep only an exact email.
        users = self.state.search_users(query)[start:start + size]
        resp.media = [jira_user(user) for user in users]


@falcon.before(guard)
class ApproximateCountResource(JiraResource):
    """``POST /rest/api/{2,3}/search/approximate-count``: ``{"jql": ...}`` answers
    ``{"count": n}``; a JQL the sandbox cannot read is Jira's 400."""

    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        _, matches = read_jql(self.body(req), parse)
        resp.media = {"count": self.state.count_issues(matches)}


def read_jql(body: object, reader: Callable[[str], T]) -> tuple[dict, T]:
    """The request body and what ``reader`` makes of its ``jql``; Jira's 400 for a body
    without a JQL string, or a JQL the sandbox cannot read."""
    jql = body.get("jql") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(jql, str):
        raise jira_error(400, ["The request body must be an object with a string 'jql'."])
    try:
        return body, reader(jql)
    except UnsupportedJql as exc:
        raise jira_error(400, [f"Error in the JQL Query: {exc}"]) from None


@falcon.before(guard)
class SearchResource(JiraResource):
    """``POST /rest/api/{2,3}/search/jql``: ``{"jql": "key in (...)", "fields": [...]}``
    answers ``{"issues": [...]}`` as ``GET`` renders them; as Jira does, a JQL naming an issue
    that does not exist is a 400 naming each such key, and any other JQL is a 400 too."""

    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body, keys = read_jql(self.body(req), keys_in)
        requested = body.get("fields") if isinstance(body.get("fields"), list) else []
        wanted = None if not requested or set(requested) & set(ALL_FIELDS) else set(requested)
        issues, missing = [], []
        for key in dict.fromkeys(keys):
            try:
                issue, people = self.state.issue_with_people(key)
            except UnknownIssue:
                missing.append(key)
                continue
            issues.append(render_issue(issue, people, self.state.l2_field_id,
                                       self.state.severity_field_id, wanted))
        if missing:
            raise jira_error(400, [f"An issue with key '{key}' does not exist for field 'key'."
                                   for key in missing])
        resp.media = {"issues": issues}


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


def routes(jira: JiraState, traffic: Traffic) -> list[tuple[str, object]]:
    """Paths relative to the service's base URL."""
    return [
        ("/rest/api/2/issue/{key}", IssueResource(jira, traffic)),
        ("/rest/api/2/issue/{key}/assignee", AssigneeResource(jira, traffic)),
        ("/rest/api/2/user/search", UserSearchResource(jira, traffic)),
        ("/rest/api/2/search/approximate-count", ApproximateCountResource(jira, traffic)),
        ("/rest/api/3/search/approximate-count", ApproximateCountResource(jira, traffic)),
        ("/rest/api/2/search/jql", SearchResource(jira, traffic)),
        ("/rest/api/3/search/jql", SearchResource(jira, traffic)),
        ("/rest/servicedeskapi/request/{key}/comment", RequestCommentResource(jira, traffic)),
    ]
