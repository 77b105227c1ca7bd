"""An independent fake of the Jira Cloud REST API, served over real HTTP.

It knows only what an ``assign`` dispatch and the assignment notification need:
read an issue (assignee, priority, status, severity), set its assignee, edit its fields and
labels, search users by email, search issues by key (the JQL ``key in ("A-1", ...)``), count
an assignee's issues (the JQL ``assignee = "ID"``, optionally ``AND statusCategory != Done``),
write internal comments. It shares no code with
the product or its sandbox, so a test that drives a real ``ticket-dispatcher serve`` process
against it checks the product against Jira's API, not against itself.

Besides answering, it lets a test control and observe the peer:

- ``hold(route, key)`` returns a ``Gate``: matching requests block inside the fake until the
  gate is released (the held ones are then applied, or answered 503 without being applied;
  later ones pass), or until ``hold_limit`` passes (answered 504, not applied), so a forgotten
  gate never hangs a test;
- ``barrier(route, parties, timeout)`` holds each matching request until ``parties`` of them
  are in flight at once, or until ``timeout`` passes;
- ``calls(route, key)`` is the call log (method, path, body, status, whether it was applied);
- ``concurrency(route)`` is the current and the maximum number of requests in flight;
- ``assignee(key)``, ``labels(key)``, ``comments(key)`` and ``status(key)`` are the issue as
  the fake now has it; ``set_status(key, status)`` changes it the way a person in Jira would.

Every piece of state sits behind one ``threading.Condition``; every change notifies it, so a
test waits for a state (``wait_until``) instead of sleeping. The server is wsgiref's, one
daemon thread per connection, so held requests never starve the fake of threads; ``serve``
starts one for any WSGI app (tests/peer_notify.py serves its fakes with it).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs, unquote
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

L2_FIELD_ID = "customfield_10053"  # default jira.l2_field_id
SEVERITY_FIELD_ID = "customfield_10076"  # default jira.severity_field_id
CREATED = "2026-01-05T09:30:00.000+0000"  # Jira's own time format
# The one JQL shape the fake counts: an assignee, optionally only issues not done.
COUNT_JQL = re.compile(r'assignee\s*=\s*"((?:[^"\\]|\\.)*)"'
                       r"(\s+AND\s+statusCategory\s*!=\s*Done)?", re.IGNORECASE)
DONE_STATUSES = ("done", "closed", "resolved")
# The one JQL shape the fake searches: issues by key.
KEYS_JQL = re.compile(r'key\s+in\s*\(((?:\s*"(?:[^"\\]|\\.)*"\s*,?)*)\)', re.IGNORECASE)
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


class Route(StrEnum):
    """The Jira endpoints an assign dispatch and the assignment notification use."""

    GET_ISSUE = "GET /rest/api/2/issue/{key}"
    # Every write of the Assignee: its own endpoint, or an issue edit whose ``fields`` set it
    # (with the labels, in one edit); ``Call.path`` tells them apart.
    ASSIGN = "PUT /rest/api/2/issue/{key}/assignee"
    EDIT_ISSUE = "PUT /rest/api/2/issue/{key}"
    SEARCH_USERS = "GET /rest/api/2/user/search"
    COUNT_ISSUES = "POST /rest/api/2/search/approximate-count"
    SEARCH_ISSUES = "POST /rest/api/2/search/jql"
    ADD_COMMENT = "POST /rest/servicedeskapi/request/{key}/comment"


_PATHS: tuple[tuple[str, re.Pattern[str], Route], ...] = (
    ("GET", re.compile(r"^/rest/api/2/issue/([^/]+)$"), Route.GET_ISSUE),
    ("PUT", re.compile(r"^/rest/api/2/issue/([^/]+)/assignee$"), Route.ASSIGN),
    ("PUT", re.compile(r"^/rest/api/2/issue/([^/]+)$"), Route.EDIT_ISSUE),
    ("GET", re.compile(r"^/rest/api/2/user/search$"), Route.SEARCH_USERS),
    ("POST", re.compile(r"^/rest/api/2/search/approximate-count$"), Route.COUNT_ISSUES),
    ("POST", re.compile(r"^/rest/api/2/search/jql$"), Route.SEARCH_ISSUES),
    ("POST", re.compile(r"^/rest/servicedeskapi/request/([^/]+)/comment$"), Route.ADD_COMMENT),
)


@dataclass
class Call:
    """One request as the fake saw it. ``status`` is None while it is still being handled."""

    method: str
    path: str
    route: Route | None
    key: str | None
    body: Any
    status: int | None = None
    applied: bool = False  # the fake changed its state because of this request

    @property
    def completed(self) -> bool:
        return self.status is not None


@dataclass
class Concurrency:
    current: int = 0
    maximum: int = 0


class Release(StrEnum):
    """What a held request does once its gate opens."""

    APPLY = "apply"  # handled normally
    REFUSE = "refuse"  # 503 without Retry-After, nothing applied


@dataclass(frozen=True)
class Comment:
    """A Service Desk comment; ``public: false`` is an internal one."""

    body: str
    public: bool


@dataclass
class _Issue:
    key: str
    project: str
    labels: list[str]
    assignee: str | None = None  # account ID
    priority: str | None = "P3"
    status: str | None = "Open"
    severity: str | None = None  # the severity custom field's option value
    fields: dict[str, Any] = field(default_factory=dict)  # other fields set by PUT issue
    comments: list[Comment] = field(default_factory=list)


@dataclass
class _User:
    email: str
    account_id: str
    display_name: str


class _PeerError(Exception):
    """Answered as Jira's error shape ``{"errorMessages": [...], "errors": {...}}``."""

    def __init__(self, status: int, message: str = "", errors: dict | None = None):
        super().__init__(message)
        self.status = status
        self.body = {"errorMessages": [message] if message else [], "errors": errors or {}}


class Gate:
    """Holds the requests of one route (optionally of one issue) until released.

    ``release(outcome)`` ends every request held at that moment with ``outcome``; the gate then
    stays open, so later requests (a retry, a resumed execution) are handled normally.
    """

    def __init__(self, condition: threading.Condition, route: Route, key: str | None):
        self._condition = condition
        self.route = route
        self.key = key
        self.held = 0  # requests waiting behind the gate now
        self.arrived = 0  # requests that ever reached it
        self._released_with: Release | None = None

    @property
    def is_open(self) -> bool:
        return self._released_with is not None

    def matches(self, route: Route | None, key: str | None) -> bool:
        return route is self.route and (self.key is None or key == self.key)

    def release(self, outcome: Release = Release.APPLY) -> None:
        with self._condition:
            self._released_with = outcome
            self._condition.notify_all()

    def wait_until_held(self, count: int = 1, timeout: float = 10) -> bool:
        """True once ``count`` requests are held at the same time."""
        with self._condition:
            return self._condition.wait_for(lambda: self.held >= count, timeout)

    def _pass(self, limit: float) -> Release | None:
        """Called with the condition held; the outcome, or None when ``limit`` ran out."""
        self.arrived += 1
        if self.is_open:
            return Release.APPLY
        self.held += 1
        self._condition.notify_all()
        try:
            self._condition.wait_for(lambda: self.is_open, limit)
        finally:
            self.held -= 1
            self._condition.notify_all()
        return self._released_with


class Barrier:
    """Holds each request of ``route`` until ``parties`` of them wait at once (then lets them
    all and every later one through), or until ``timeout`` passes for that request."""

    def __init__(self, condition: threading.Condition, route: Route, parties: int,
                 timeout: float):
        self._condition = condition
        self.route = route
        self.parties = parties
        self.timeout = timeout
        self.waiting = 0
        self.tripped = False

    def wait_tripped(self, timeout: float) -> bool:
        with self._condition:
            return self._condition.wait_for(lambda: self.tripped, timeout)

    def _pass(self) -> None:
        """Called with the condition held."""
        self.waiting += 1
        if self.waiting >= self.parties:
            self.tripped = True
            self._condition.notify_all()
        try:
            self._condition.wait_for(lambda: self.tripped, self.timeout)
        finally:
            self.waiting -= 1


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a request still held when a test ends never keeps pytest alive
    request_queue_size = 512  # 40+ connections arrive at once; the default backlog is 5
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a stopped dispatcher) is expected here; stay quiet."""


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(app: Callable, name: str, host: str = "127.0.0.1",
          port: int = 0) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``app`` on ``host``:``port`` (a free local port by default) from a daemon thread;
    ``server.shutdown()`` and ``server.server_close()`` stop it."""
    server = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    return server, thread


class Answering:
    """A WSGI app that answers every request with one status and ``{}``, and records the
    path of each request it got in ``paths`` (a proxy's: the absolute URL asked for)."""

    def __init__(self, status: str = "200 OK", headers: Iterable[tuple[str, str]] = ()):
        self.status = status
        self.headers = [("Content-Type", "application/json"), *headers]
        self.paths: list[str] = []

    def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
        self.paths.append(environ["PATH_INFO"])
        start_response(self.status, self.headers)
        return [b"{}"]


@contextmanager
def serving(app: Callable, name: str) -> Iterator[str]:
    """``app`` served by ``serve`` for the block; its base URL. Stopped when the block ends."""
    server, thread = serve(app, name)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class Served:
    """A fake served by ``serve``: ``start``/``stop`` (or ``with``), and its ``base_url``. A
    subclass gives ``_app`` and ``NAME``, and opens what it holds before ``stop``."""

    NAME = "peer"
    _server: WSGIServer | None = None
    _thread: threading.Thread | None = None
    advertise: str | None = None  # the host name in ``base_url``, when not the bound address

    def start(self, host: str = "127.0.0.1", port: int = 0):
        self._server, self._thread = serve(self._app, f"fake-{self.NAME}", host, port)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{self.advertise or host}:{port}"


class FakeJira(Served):
    """The fake Jira Cloud; ``with FakeJira() as jira:`` serves it on a free local port."""

    NAME = "jira"

    def __init__(self, *, email: str = "bot@example.com", api_token: str = "fake-jira-token",
                 hold_limit: float = 30):
        self.email = email
        self.api_token = api_token
        self.hold_limit = hold_limit
        self._condition = threading.Condition()
        self._issues: dict[str, _Issue] = {}
        self._users: dict[str, _User] = {}  # by account ID
        self._gates: list[Gate] = []
        self._barriers: list[Barrier] = []
        self._calls: list[Call] = []
        self._screens_without: dict[str, set[str]] = {}  # project -> fields not on its screen
        self._concurrency: dict[Route, Concurrency] = {route: Concurrency() for route in Route}
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Open every gate and stop serving; held requests end (their clients are gone)."""
        for gate in list(self._gates):
            gate.release(Release.REFUSE)
        super().stop()

    # -- the world ------------------------------------------------------------------------------

    def add_issue(self, key: str, *, labels: Iterable[str] = (), project: str | None = None,
                  assignee: str | None = None, priority: str | None = "P3",
                  status: str | None = "Open", severity: str | None = None) -> None:
        """An issue; ``assignee`` is the account ID of a user added before."""
        with self._condition:
            self._issues[key] = _Issue(key, project or key.split("-")[0], list(labels),
                                       assignee=assignee, priority=priority, status=status,
                                       severity=severity)

    def add_user(self, email: str, account_id: str, display_name: str | None = None) -> None:
        with self._condition:
            self._users[account_id] = _User(email, account_id, display_name or email)

    def leave_off_edit_screen(self, project: str, *fields: str) -> None:
        """The project's edit screen lacks ``fields``: an issue edit naming any of them is
        refused with Jira's 400 and applies nothing (the assignee endpoint still answers)."""
        with self._condition:
            self._screens_without.setdefault(project, set()).update(fields)

    def assignee(self, key: str) -> str | None:
        with self._condition:
            return self._issues[key].assignee

    def labels(self, key: str) -> list[str]:
        with self._condition:
            return list(self._issues[key].labels)

    def comments(self, key: str) -> list[Comment]:
        with self._condition:
            return list(self._issues[key].comments)

    def status(self, key: str) -> str | None:
        with self._condition:
            return self._issues[key].status

    def set_status(self, key: str, status: str | None) -> None:
        with self._condition:
            self._issues[key].status = status
            self._condition.notify_all()

    # -- control and observation ----------------------------------------------------------------

    def hold(self, route: Route, key: str | None = None) -> Gate:
        """A closed gate for ``route`` (of issue ``key``, or of every issue)."""
        with self._condition:
            gate = Gate(self._condition, route, key)
            self._gates.append(gate)
            return gate

    def barrier(self, route: Route, parties: int, timeout: float) -> Barrier:
        with self._condition:
            barrier = Barrier(self._condition, route, parties, timeout)
            self._barriers.append(barrier)
            return barrier

    def calls(self, route: Route | None = None, key: str | None = None) -> list[Call]:
        """A snapshot of the call log, oldest first."""
        with self._condition:
            return [Call(c.method, c.path, c.route, c.key, c.body, c.status, c.applied)
                    for c in self._calls
                    if (route is None or c.route is route) and (key is None or c.key == key)]

    def concurrency(self, route: Route) -> Concurrency:
        with self._condition:
            seen = self._concurrency[route]
            return Concurrency(seen.current, seen.maximum)

    def wait_until(self, predicate: Callable[[FakeJira], bool], timeout: float = 10) -> bool:
        """Wait (without polling) until ``predicate(self)`` holds; False after ``timeout``."""
        with self._condition:
            return self._condition.wait_for(lambda: predicate(self), timeout)

    # -- HTTP -----------------------------------------------------------------------------------

    def _app(self, environ: dict, start_response: Callable) -> list[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        route, key = _route(method, path)
        body = read_body(environ)
        if route is Route.EDIT_ISSUE and _sets_assignee(body):
            route = Route.ASSIGN
        call = Call(method, path, route, key, body)
        with self._condition:
            self._calls.append(call)
            self._enter(route)
        try:
            status, answer = self._answer(call, environ)
        finally:
            with self._condition:
                self._leave(route)
        with self._condition:
            call.status = status
            self._condition.notify_all()
        payload = b"" if answer is None else json.dumps(answer).encode()
        headers = [("Content-Length", str(len(payload)))]
        if payload:
            headers.append(("Content-Type", "application/json"))
        start_response(f"{status} {_REASONS.get(status, 'Status')}", headers)
        return [payload]

    def _enter(self, route: Route | None) -> None:
        if route is not None:
            seen = self._concurrency[route]
            seen.current += 1
            seen.maximum = max(seen.maximum, seen.current)
            self._condition.notify_all()

    def _leave(self, route: Route | None) -> None:
        if route is not None:
            self._concurrency[route].current -= 1
            self._condition.notify_all()

    def _answer(self, call: Call, environ: dict) -> tuple[int, Any]:
        try:
            self._authenticate(environ)
            if call.route is None:
                raise _PeerError(404, f"no such resource: {call.method} {call.path}")
            self._wait_at_barriers(call)
            self._wait_at_gates(call)
            return self._handle(call, parse_qs(environ.get("QUERY_STRING", "")))
        except _PeerError as error:
            return error.status, error.body

    def _authenticate(self, environ: dict) -> None:
        scheme, _, encoded = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        try:
            presented = base64.b64decode(encoded.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            presented = ""
        if scheme.lower() != "basic" or presented != f"{self.email}:{self.api_token}":
            raise _PeerError(401, "You are not authenticated. Authentication required to "
                                  "perform this operation.")

    def _wait_at_barriers(self, call: Call) -> None:
        with self._condition:
            for barrier in [b for b in self._barriers if b.route is call.route]:
                barrier._pass()

    def _wait_at_gates(self, call: Call) -> None:
        with self._condition:
            for gate in [g for g in self._gates if g.matches(call.route, call.key)]:
                outcome = gate._pass(self.hold_limit)
                if outcome is None:
                    raise _PeerError(504, "held by a gate that was never released")
                if outcome is Release.REFUSE:
                    raise _PeerError(503, "Service unavailable (the test refused this call)")

    def _handle(self, call: Call, query: dict[str, list[str]]) -> tuple[int, Any]:
        with self._condition:
            if call.route is Route.SEARCH_USERS:
                return 200, self._search_users((query.get("query") or [""])[0])
            if call.route is Route.COUNT_ISSUES:
                return 200, {"count": self._count(call.body)}
            if call.route is Route.SEARCH_ISSUES:
                keys = self._keys_in(call.body)
                missing = [key for key in keys if key not in self._issues]
                if missing:  # as Jira: a JQL naming an issue that does not exist is refused
                    return 400, {"errorMessages": [
                        f"An issue with key '{key}' does not exist for field 'key'."
                        for key in missing], "errors": {}}
                return 200, {"issues": [self._render(self._issues[key]) for key in keys]}
            issue = self._issues.get(call.key or "")
            if issue is None:
                raise _PeerError(404, "Issue does not exist or you do not have permission "
                                      "to see it.")
            if call.route is Route.GET_ISSUE:
                return 200, self._render(issue)
            if call.route is Route.ADD_COMMENT:
                comment = self._comment(call.body)
                issue.comments.append(comment)
                call.applied = True
                return 201, {"id": str(len(issue.comments)), "body": comment.body,
                             "public": comment.public}
            if call.route is Route.ASSIGN and call.path.endswith("/assignee"):
                issue.assignee = self._account(call.body, "assignee")
            else:
                self._edit(issue, call.body)
            call.applied = True
            return 204, None

    def _search_users(self, query: str) -> list[dict]:
        # Jira's search is fuzzy (prefixes, display names); the client must filter exactly.
        wanted = query.strip().lower()
        return [self._render_user(user) for user in self._users.values()
                if wanted and (wanted in user.email.lower()
                               or wanted in user.display_name.lower())]

    def _count(self, body: Any) -> int:
        jql = body.get("jql") if isinstance(body, dict) else None
        found = COUNT_JQL.fullmatch(jql.strip()) if isinstance(jql, str) else None
        if found is None:
            raise _PeerError(400, f"Error in the JQL Query: the fake cannot read {jql!r}")
        account_id = re.sub(r"\\(.)", r"\1", found.group(1))
        open_only = found.group(2) is not None
        return sum(1 for issue in self._issues.values() if issue.assignee == account_id
                   and not (open_only and (issue.status or "").lower() in DONE_STATUSES))

    @staticmethod
    def _keys_in(body: Any) -> list[str]:
        """The keys of the one JQL shape the fake searches: ``key in ("A-1", "B-2")``."""
        jql = body.get("jql") if isinstance(body, dict) else None
        found = KEYS_JQL.fullmatch(jql.strip()) if isinstance(jql, str) else None
        if found is None:
            raise _PeerError(400, f"Error in the JQL Query: the fake cannot read {jql!r}")
        return [re.sub(r"\\(.)", r"\1", key) for key in QUOTED.findall(found.group(1))]

    @staticmethod
    def _comment(body: Any) -> Comment:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str) \
                or not body["body"].strip():
            raise _PeerError(400, errors={"body": "The comment body is required."})
        if not isinstance(body.get("public"), bool):
            raise _PeerError(400, errors={"public": "expected true or false"})
        return Comment(body["body"], body["public"])

    def _account(self, value: Any, field_name: str) -> str | None:
        if not isinstance(value, dict) or "accountId" not in value:
            raise _PeerError(400, errors={field_name: "expected {\"accountId\": ID}"})
        account_id = value["accountId"]
        if account_id is not None and account_id not in self._users:
            raise _PeerError(400, errors={field_name: f"User '{account_id}' does not exist."})
        return account_id

    def _edit(self, issue: _Issue, body: Any) -> None:
        if not isinstance(body, dict):
            raise _PeerError(400, "The request body must be a JSON object.")
        named = {*(body.get("fields") or {}), *(body.get("update") or {})}
        missing = sorted(named & self._screens_without.get(issue.project, set()))
        if missing:  # as Jira: the whole edit is refused, nothing applied
            raise _PeerError(400, errors={name: f"Field '{name}' cannot be set. It is not on "
                                                f"the appropriate screen, or unknown."
                                          for name in missing})
        for name, value in (body.get("fields") or {}).items():
            if name == "assignee":
                issue.assignee = self._account(value, name)
                continue
            issue.fields[name] = (self._account(value, name) if name == L2_FIELD_ID
                                  and value is not None else value)
        for operation in (body.get("update") or {}).get("labels") or []:
            if "add" in operation and operation["add"] not in issue.labels:
                issue.labels.append(operation["add"])
            if "remove" in operation and operation["remove"] in issue.labels:
                issue.labels.remove(operation["remove"])

    def _render(self, issue: _Issue) -> dict:
        l2 = issue.fields.get(L2_FIELD_ID)
        return {"key": issue.key, "fields": {
            "summary": f"{issue.key} is broken",
            "project": {"key": issue.project, "name": issue.project},
            "environment": None,
            "reporter": None,
            "assignee": self._render_account(issue.assignee),
            L2_FIELD_ID: self._render_account(l2),
            "created": CREATED,
            "components": [],
            "labels": list(issue.labels),
            "priority": {"name": issue.priority} if issue.priority else None,
            "status": {"name": issue.status} if issue.status else None,
            SEVERITY_FIELD_ID: {"value": issue.severity} if issue.severity else None,
        }}

    def _render_account(self, account_id: str | None) -> dict | None:
        user = self._users.get(account_id) if account_id else None
        return self._render_user(user) if user else None

    @staticmethod
    def _render_user(user: _User) -> dict:
        return {"accountId": user.account_id, "accountType": "atlassian",
                "emailAddress": user.email, "displayName": user.display_name, "active": True}


_REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 401: "Unauthorized",
            404: "Not Found", 503: "Service Unavailable", 504: "Gateway Timeout"}


class SlowJira(FakeJira):
    """The fake Jira, answering the calls of ``routes`` (every call when None) after
    ``latency`` seconds: a slow peer. The wait is the peer's own, before its lock, so
    concurrent calls wait side by side."""

    def __init__(self, latency: float, routes: Iterable[Route] | None = None, **options: Any):
        super().__init__(**options)
        self.latency = latency
        self.routes = None if routes is None else frozenset(routes)

    def _handle(self, call: Call, query: dict[str, list[str]]) -> tuple[int, Any]:
        if self.routes is None or call.route in self.routes:
            time.sleep(self.latency)
        return super()._handle(call, query)


def _sets_assignee(body: Any) -> bool:
    fields = body.get("fields") if isinstance(body, dict) else None
    return isinstance(fields, dict) and "assignee" in fields


def _route(method: str, path: str) -> tuple[Route | None, str | None]:
    for verb, pattern, route in _PATHS:
        found = pattern.match(path)
        if verb == method and found:
            return route, unquote(found.group(1)) if found.groups() else None
    return None, None


def read_body(environ: dict) -> Any:
    """The request's JSON body; text when it is not JSON; None when empty."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")
