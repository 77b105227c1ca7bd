"""The fakes of Jira, Lark, Oncall and Core in a process of their own, with fault knobs and one
call log, for the chaos soak.

``python -m tests.chaos.fakes --ready-file PATH [--world JSON|FILE] [--calls-file FILE]``
serves the fakes of tests/peer.py and tests/peer_notify.py, as they are, each on a free
127.0.0.1 port, plus a control server, and then writes PATH (JSON: ``jira``, ``lark``,
``oncall``, ``core``, ``control`` base URLs, ``pid``, the credentials a ``serve`` process needs
and the same as ``settings``, the ``TICKET_DISPATCHER_*`` names without the prefix). It runs
until SIGTERM or SIGINT (or ``--max-seconds``), and stops within a bounded time.

Each fake's WSGI app is wrapped by a ``FaultLayer``: it reads the request, asks the ``Faults``
whether one applies to it, and either answers with the injected status (and ``Retry-After``)
without letting the fake see the request, or sleeps the injected latency and hands the request
to the fake. Either way the request lands in the ``CallLog`` with what was answered and
whether the fake changed its state. A soak cannot reach into another process's objects, so
everything else goes through the control API (JSON bodies and answers; 400 for a body that
makes no sense, 404 for something that does not exist):

- ``POST /world`` ``{"users": [...], "issues": [...], "groups": [...], "teams": [...]}`` (each
  part optional), or one part as ``POST /world/users`` (etc.) with the bare list. Additive
  (an issue, group or team given again replaces the earlier one); checked whole before
  anything changes. A user ``{"email", "name"?, "account_id"? (Jira), "open_id"? (Lark and Core),
  "phone"? (Oncall can call them; default true), "leader"? (an email, Core), "active"?}``;
  an issue ``{"key", "project"?, "priority"? ("P3"), "status"? ("Open"), "assignee"? (an email
  of a user with an account, or an account ID), "labels"? [], "severity"?}``; a Core group
  ``{"name", "members": [email | {"email", "active"}]}``; an Oncall team ``{"name",
  "responders": [email | {"email", "name"}]}``, primary first.
- ``POST /faults`` ``{"service": "jira"|"lark"|"oncall"|"core", "status"?: 400-599,
  "retry_after"?: seconds (with 429 or 503), "latency_ms"?: 0-60000, "until"?: epoch seconds
  | "times"?: n, "path_contains"?: text}``: the fault, with its ``id``. A request gets the
  newest live fault of its service whose ``path_contains`` is in its path: it sleeps
  ``latency_ms``, then is answered ``status`` unapplied, or (no status) handled normally.
  ``GET /faults``: the live ones, with their ``hits``. ``DELETE /faults[?service=S][&id=N]``
  (or the same as a body): clears them; the number cleared.
- ``GET /calls?since=N[&limit=M][&service=S]``: ``{"calls", "next", "total", "in_flight"}``,
  the calls recorded from index N on (``next`` is where to ask from next). A call: ``index``
  (the order its answer was recorded), ``t`` (arrival) and ``t_end`` (answer), epoch floats,
  ``service``, ``method``, ``path``, ``route`` (the fake's route name, e.g. ``ASSIGN``,
  ``SEND``, ``PAGE``; null for a path it does not serve), ``body``, ``status``, ``applied``,
  ``fault`` (the injected status or null), ``latency_ms``, ``key`` (``Meaning.key``) and
  ``issue_key`` (the Jira path's issue, an Oncall page's ``issue_key``, else null).
- ``GET /state[?keys=A-1,B-2]``: ``{"issues": [{"key", "assignee" (account ID),
  "assignee_email", "labels", "status", "comments"}], "messages": [{"message_id",
  "receive_id", "uuid", "issue_key", "urgent_for", "read_by"}], "pages": [{"email", "title",
  "message", "issue_key", "dedup_key", "accepted"}]}``.
- ``POST /ack/card-read`` ``{"issue_key" | "message_id", "email"}``: that person reads the
  newest card sent to them about the issue (or the card named); ``POST /ack/status``
  ``{"issue_key", "status"}``: a person moves the issue in Jira. ``GET /ready``: the ready file.

Every server is threaded (one daemon thread per connection), so a slow fault never holds up
another request; a shutdown wakes every injected sleep.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIServer

from tests.peer import FakeJira, Route, _route, serve
from tests.peer_notify import FakeCore, FakeLark, FakeOncall, LarkRoute, OncallRoute

SERVICES = ("jira", "lark", "oncall", "core")
MAX_LATENCY_MS = 60_000  # an injected sleep never lasts longer than this
MAX_TIMES = 1_000_000
CALLS_PAGE = 5_000  # calls answered per GET /calls unless ``limit`` asks for fewer
MAX_LIFETIME_S = 24 * 3600  # the process ends by itself after this, signal or not
STOP_JOIN_S = 10
LARK_RATE_LIMITED = 99991400  # Lark's "request trigger frequency limit"
LARK_FAULT = 99991000  # any non-zero code is a failure to a Lark client
RETRY_AFTER_STATUSES = (429, 503)

Router = Callable[[str, str], tuple[StrEnum | None, str | None]]


class BadRequest(Exception):
    """A control request the API cannot act on: answered 400 (or ``status``) with the reason."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# --- faults ---------------------------------------------------------------------------------


@dataclass
class Fault:
    """One fault knob: the requests of ``service`` (whose path contains ``path_contains``) are
    answered ``status`` without being applied, and/or delayed ``latency_ms``; until the epoch
    second ``until``, for ``times`` requests, or until cleared."""

    id: int
    service: str
    status: int | None
    retry_after: int | None
    latency_ms: int
    until: float | None
    times: int | None  # requests left; None: no count
    path_contains: str | None
    created: float
    hits: int = 0

    def live(self, now: float) -> bool:
        return (self.until is None or now < self.until) and (self.times is None or self.times > 0)

    def matches(self, service: str, path: str, now: float) -> bool:
        return (self.service == service and self.live(now)
                and (self.path_contains is None or self.path_contains in path))

    def to_json(self) -> dict:
        return {"id": self.id, "service": self.service, "status": self.status,
                "retry_after": self.retry_after, "latency_ms": self.latency_ms,
                "until": self.until, "times": self.times, "path_contains": self.path_contains,
                "created": self.created, "hits": self.hits}


FAULT_FIELDS = frozenset({"service", "status", "retry_after", "latency_ms", "until", "times",
                          "path_contains"})


def _integer(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{name} must be an integer from {low} to {high}")
    return value


def parse_fault(body: Any, fault_id: int, now: float) -> Fault:
    """The fault a ``POST /faults`` body describes; ``BadRequest`` when it makes no sense."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = sorted(set(body) - FAULT_FIELDS)
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(unknown)}")
    service = body.get("service")
    if service not in SERVICES:
        raise BadRequest(f"service must be one of {', '.join(SERVICES)}")
    status = body.get("status")
    if status is not None:
        status = _integer(status, "status", 400, 599)
    latency_ms = body.get("latency_ms")
    latency_ms = 0 if latency_ms is None else _integer(latency_ms, "latency_ms", 0,
                                                        MAX_LATENCY_MS)
    if status is None and latency_ms == 0:
        raise BadRequest("a fault needs a status, a latency_ms, or both")
    retry_after = body.get("retry_after")
    if retry_after is not None:
        if status not in RETRY_AFTER_STATUSES:
            raise BadRequest("retry_after goes with status 429 or 503")
        retry_after = _integer(retry_after, "retry_after", 0, 86_400)
    until, times = body.get("until"), body.get("times")
    if until is not None and times is not None:
        raise BadRequest("give until or times, not both")
    if until is not None:
        if isinstance(until, bool) or not isinstance(until, int | float) or until <= now:
            raise BadRequest("until must be a time in epoch seconds, after now")
        until = float(until)
    if times is not None:
        times = _integer(times, "times", 1, MAX_TIMES)
    path_contains = body.get("path_contains")
    if path_contains is not None and (not isinstance(path_contains, str) or not path_contains):
        raise BadRequest("path_contains must be a non-empty string")
    return Fault(fault_id, service, status, retry_after, latency_ms, until, times,
                 path_contains, now)


class Faults:
    """The fault knobs of all four services. The newest live fault that matches a request is
    the one it gets; a counted fault is used up under the lock, so ``times: n`` hits exactly
    n requests however many arrive at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._ids = itertools.count(1)

    def add(self, body: Any) -> Fault:
        with self._lock:
            fault = parse_fault(body, next(self._ids), time.time())
            self._faults.append(fault)
            return fault

    def clear(self, service: str | None = None, fault_id: int | None = None) -> int:
        with self._lock:
            kept = [f for f in self._faults
                    if not ((service is None or f.service == service)
                            and (fault_id is None or f.id == fault_id))]
            cleared = len(self._faults) - len(kept)
            self._faults = kept
            return cleared

    def take(self, service: str, path: str, now: float) -> Fault | None:
        """The fault this request gets (counted as used), or None."""
        with self._lock:
            self._faults = [f for f in self._faults if f.live(now)]
            for fault in reversed(self._faults):
                if fault.matches(service, path, now):
                    fault.hits += 1
                    if fault.times is not None:
                        fault.times -= 1
                    return replace(fault)  # a copy: the caller reads it unlocked
            return None

    def live(self) -> list[dict]:
        now = time.time()
        with self._lock:
            self._faults = [f for f in self._faults if f.live(now)]
            return [f.to_json() for f in self._faults]


# --- the call log ---------------------------------------------------------------------------


class CallLog:
    """Every request any of the four fakes got, in the order their answers were recorded
    (``index`` 0, 1, ...; ``t`` is when the request arrived). Optionally each record is also
    appended to a JSON-lines file as it is made."""

    def __init__(self, path: Path | None = None):
        self._lock = threading.Lock()
        self._calls: list[dict] = []
        self._in_flight = dict.fromkeys(SERVICES, 0)
        self._file = path.open("a", encoding="utf-8") if path else None

    def enter(self, service: str) -> None:
        with self._lock:
            self._in_flight[service] += 1

    def leave(self, service: str) -> None:
        with self._lock:
            self._in_flight[service] -= 1

    def record(self, call: dict) -> int:
        with self._lock:
            call["index"] = len(self._calls)
            self._calls.append(call)
            if self._file is not None:
                self._file.write(json.dumps(call) + "\n")
                self._file.flush()
            return call["index"]

    def since(self, index: int, limit: int, service: str | None = None) -> dict:
        """Calls from ``index`` on (at most ``limit``), and the index to ask from next."""
        with self._lock:
            found, position = [], index
            while position < len(self._calls) and len(found) < limit:
                if service is None or self._calls[position]["service"] == service:
                    found.append(dict(self._calls[position]))
                position += 1
            return {"calls": found, "next": position, "total": len(self._calls),
                    "in_flight": dict(self._in_flight)}

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


# --- what a request means to each fake ------------------------------------------------------


class Meaning:
    """Reads one fake's request and answer: its idempotency key, its issue, and whether the
    fake changed its state (the fakes of peer_notify.py do not say; their answers do)."""

    def __init__(self, service: str):
        self.service = service
        self._lock = threading.Lock()
        self._cards: set[str] = set()  # Lark message IDs some send was answered with

    def key(self, route: StrEnum | None, body: Any) -> str | None:
        """Lark send: its ``uuid``; Oncall page: its ``dedup_key``; Jira comment: its text
        (no marker of its own, but the text says which comment of the notification it is: the
        card's, page attempt n's, the ACK's; with the issue key, its identity within one
        execution). Nothing else the product sends carries one."""
        field_name = {LarkRoute.SEND: "uuid", OncallRoute.PAGE: "dedup_key",
                      Route.ADD_COMMENT: "body"}.get(route) if route is not None else None
        value = body.get(field_name) if field_name and isinstance(body, dict) else None
        return value if isinstance(value, str) and value else None

    def issue_key(self, route: StrEnum | None, path_key: str | None, body: Any) -> str | None:
        if self.service == "jira" and path_key is not None:
            return path_key
        if route is OncallRoute.PAGE and isinstance(body, dict) \
                and isinstance(body.get("issue_key"), str):
            return body["issue_key"]
        return None

    def applied(self, route: StrEnum | None, body: Any, status: int, answer: Any) -> bool:
        if route in (Route.ASSIGN, Route.EDIT_ISSUE):
            return status == 204
        if route is Route.ADD_COMMENT:
            return status == 201
        if route is OncallRoute.PAGE:
            return status == 200  # every page the fake takes is recorded, none deduplicated
        lark_ok = status == 200 and isinstance(answer, dict) and answer.get("code") == 0
        if route is LarkRoute.TOKEN:
            return lark_ok  # a token was minted
        data = answer.get("data") if lark_ok else None
        if route is LarkRoute.SEND and isinstance(data, dict):
            message_id = data.get("message_id")
            if not isinstance(message_id, str):
                return False
            with self._lock:  # a send repeated with its uuid answers the same message
                new = message_id not in self._cards
                self._cards.add(message_id)
            return new
        if route is LarkRoute.URGENT_APP and isinstance(data, dict) and isinstance(body, dict):
            asked = body.get("user_id_list") or []
            invalid = data.get("invalid_user_id_list") or []
            return any(user_id not in invalid for user_id in asked)
        return False


# --- the fault layer ------------------------------------------------------------------------


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Status"


def _fault_body(service: str, status: int) -> dict:
    """The injected answer, in the service's own error shape."""
    message = f"injected fault: HTTP {status}"
    if service == "jira":
        return {"errorMessages": [message], "errors": {}}
    if service == "lark":
        return {"code": LARK_RATE_LIMITED if status == 429 else LARK_FAULT, "msg": message,
                "data": {}}
    return {"error": message}


class FaultLayer:
    """One fake's WSGI app behind the fault knobs and the call log."""

    def __init__(self, service: str, app: Callable, router: Router, faults: Faults,
                 log: CallLog, stopping: threading.Event):
        self.service = service
        self._app = app
        self._router = router
        self._faults = faults
        self._log = log
        self._stopping = stopping
        self._meaning = Meaning(service)

    def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
        arrived = time.time()
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
        body = _json_or_text(raw)
        route, path_key = self._router(method, path)
        fault = self._faults.take(self.service, path, arrived)
        latency_ms = fault.latency_ms if fault else 0
        self._log.enter(self.service)
        try:
            if latency_ms:  # woken early by a shutdown; the threaded server serves the rest
                self._stopping.wait(latency_ms / 1000)
            if fault is not None and fault.status is not None:
                status, headers, payload = self._injected(fault)
                applied = False
            else:
                environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(raw), str(len(raw))
                status, headers, payload = self._handled(environ)
                applied = self._meaning.applied(route, body, status, _json_or_text(payload))
        finally:
            self._log.leave(self.service)
        self._log.record({
            "t": arrived, "t_end": time.time(), "service": self.service, "method": method,
            "path": path, "route": route.name if route is not None else None, "body": body,
            "status": status, "applied": applied,
            "fault": fault.status if fault is not None else None, "latency_ms": latency_ms,
            "key": self._meaning.key(route, body),
            "issue_key": self._meaning.issue_key(route, path_key, body)})
        start_response(_status_line(status), headers)
        return [payload]

    def _injected(self, fault: Fault) -> tuple[int, list[tuple[str, str]], bytes]:
        payload = json.dumps(_fault_body(self.service, fault.status)).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
        if fault.retry_after is not None:
            headers.append(("Retry-After", str(fault.retry_after)))
        return fault.status, headers, payload

    def _handled(self, environ: dict) -> tuple[int, list[tuple[str, str]], bytes]:
        """The fake's own answer, collected so it can be recorded before it is sent."""
        answered: dict[str, Any] = {}
        written: list[bytes] = []

        def keep(status: str, headers: list[tuple[str, str]], exc_info: Any = None):
            answered["status"], answered["headers"] = status, headers
            return written.append

        try:
            chunks = self._app(environ, keep)
            try:
                payload = b"".join([*written, *chunks])
            finally:
                getattr(chunks, "close", lambda: None)()
            return int(answered["status"].split()[0]), list(answered["headers"]), payload
        except Exception as exc:  # a fake's bug must show in the log, not kill the thread
            payload = json.dumps({"error": f"the fake failed: {exc!r}"}).encode()
            return 500, [("Content-Type", "application/json"),
                         ("Content-Length", str(len(payload)))], payload


# --- the world --------------------------------------------------------------------------------


@dataclass
class Person:
    """Someone the four services know, each in its own way."""

    email: str  # lower case
    name: str
    account_id: str | None  # Jira
    open_id: str | None  # Lark (Core gives it too)
    phone: bool  # Oncall can call them
    leader: str | None  # Core's direct leader, an email
    active: bool


USER_FIELDS = frozenset({"email", "name", "account_id", "open_id", "phone", "leader", "active"})
ISSUE_FIELDS = frozenset({"key", "project", "priority", "status", "assignee", "labels",
                          "severity"})
GROUP_FIELDS = frozenset({"name", "members"})
TEAM_FIELDS = frozenset({"name", "responders"})
WORLD_PARTS = ("users", "issues", "groups", "teams")
HEADER_ISSUE = re.compile(r"\bof\s+(\S+)\s*$")  # "You are the assignee of PAGE-1"
BOLD_ISSUE = re.compile(r"\*\*([^*\s]+)\*\*")  # "**PAGE-1** PAGE-1 is broken"


def _object(value: Any, allowed: frozenset[str], what: str) -> dict:
    if not isinstance(value, dict):
        raise BadRequest(f"each of {what} must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise BadRequest(f"{what}: unknown fields {', '.join(unknown)}")
    return value


def _text(value: Any, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} must be a non-empty string")
    return value.strip()


def _flag(value: Any, name: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false")
    return value


def _entries(body: Any, part: str) -> list:
    """A list, given bare or as ``{part: [...]}``."""
    if isinstance(body, dict) and set(body) == {part}:
        body = body[part]
    if not isinstance(body, list):
        raise BadRequest(f"{part}: expected a list (or {{\"{part}\": [...]}})")
    return body


def card_issue(card: Any) -> str | None:
    """The issue a notification card is about: its header names it, its text starts with it."""
    header = ((card.get("header") or {}).get("title") or {}).get("content") \
        if isinstance(card, dict) else None
    found = HEADER_ISSUE.search(header) if isinstance(header, str) else None
    if found:
        return found.group(1)
    found = BOLD_ISSUE.search(json.dumps(card))
    return found.group(1) if found else None


class World:
    """The four fakes and who is in them; what the control API sets up, reads and acts on."""

    def __init__(self) -> None:
        self.jira, self.lark = FakeJira(), FakeLark()
        self.oncall, self.core = FakeOncall(), FakeCore()
        self._lock = threading.Lock()
        self._people: dict[str, Person] = {}  # by email, lower case
        self._accounts: dict[str, str] = {}  # Jira account ID -> email
        self._issues: dict[str, None] = {}  # keys, in the order first added

    def fakes(self) -> dict[str, Any]:
        return {"jira": self.jira, "lark": self.lark, "oncall": self.oncall, "core": self.core}

    # -- setting it up ----------------------------------------------------------------------

    def add(self, body: Any) -> dict[str, int]:
        """Every part of a world at once; each part as its own endpoint takes it."""
        if not isinstance(body, dict) or not set(body) <= set(WORLD_PARTS):
            raise BadRequest(f"the world is an object of {', '.join(WORLD_PARTS)}")
        # Validate everything before changing anything: users first, others may name them.
        people = [self._person(u) for u in _entries(body.get("users", []), "users")]
        known = {p.email: p for p in people}
        issues = [self._issue(i, known) for i in _entries(body.get("issues", []), "issues")]
        groups = [self._group(g, known) for g in _entries(body.get("groups", []), "groups")]
        teams = [self._team(t, known) for t in _entries(body.get("teams", []), "teams")]
        for person in people:
            self._add_person(person)
        for issue in issues:
            self._add_issue(issue)
        for name, members in groups:
            self.core.add_group(name, members)
        for name, responders in teams:
            self.oncall.add_team(name, responders)
        return {"users": len(people), "issues": len(issues), "groups": len(groups),
                "teams": len(teams)}

    def _person(self, value: Any) -> Person:
        entry = _object(value, USER_FIELDS, "users")
        email = _text(entry.get("email"), "email").lower()
        leader = _text(entry.get("leader"), "leader", optional=True)
        return Person(email, _text(entry.get("name") or email, "name"),
                      _text(entry.get("account_id"), "account_id", optional=True),
                      _text(entry.get("open_id"), "open_id", optional=True),
                      _flag(entry.get("phone"), "phone", True), leader and leader.lower(),
                      _flag(entry.get("active"), "active", True))

    def _known(self, email: str, known: dict[str, Person]) -> Person | None:
        with self._lock:
            return known.get(email.lower()) or self._people.get(email.lower())

    def _issue(self, value: Any, known: dict[str, Person]) -> dict:
        entry = _object(value, ISSUE_FIELDS, "issues")
        key = _text(entry.get("key"), "key")
        if "-" not in key:
            raise BadRequest(f"issue key {key!r} has no project prefix")
        labels = entry.get("labels", [])
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            raise BadRequest("labels must be a list of non-empty strings")
        assignee = _text(entry.get("assignee"), "assignee", optional=True)
        if assignee is not None and "@" in assignee:  # an email: the person's account
            person = self._known(assignee, known)
            if person is None or person.account_id is None:
                raise BadRequest(f"assignee {assignee} is no user with a Jira account")
            assignee = person.account_id
        return {"key": key, "project": _text(entry.get("project"), "project", optional=True),
                "priority": _text(entry.get("priority", "P3"), "priority", optional=True),
                "status": _text(entry.get("status", "Open"), "status", optional=True),
                "severity": _text(entry.get("severity"), "severity", optional=True),
                "assignee": assignee, "labels": labels}

    def _group(self, value: Any, known: dict[str, Person]) -> tuple[str, list[tuple[str, bool]]]:
        entry = _object(value, GROUP_FIELDS, "groups")
        members = []
        for member in entry.get("members") or []:
            if isinstance(member, str):
                person = self._known(member, known)
                member = {"email": member, "active": person.active if person else True}
            member = _object(member, frozenset({"email", "active"}), "members")
            members.append((_text(member.get("email"), "email").lower(),
                            _flag(member.get("active"), "active", True)))
        return _text(entry.get("name"), "name"), members

    def _team(self, value: Any, known: dict[str, Person]) -> tuple[str, list[tuple[str, str]]]:
        entry = _object(value, TEAM_FIELDS, "teams")
        responders = []
        for responder in entry.get("responders") or []:
            if isinstance(responder, str):
                person = self._known(responder, known)
                responder = {"email": responder, "name": person.name if person else responder}
            responder = _object(responder, frozenset({"email", "name"}), "responders")
            email = _text(responder.get("email"), "email").lower()
            responders.append((email, _text(responder.get("name") or email, "name")))
        return _text(entry.get("name"), "name"), responders

    def _add_person(self, person: Person) -> None:
        if person.account_id:
            self.jira.add_user(person.email, person.account_id, person.name)
        if person.open_id:
            self.lark.add_user(person.email, person.open_id)
        if person.phone:
            self.oncall.add_phone(person.email)
        self.core.add_user(person.email, person.name, open_id=person.open_id,
                           active=person.active, leader=person.leader)
        with self._lock:
            self._people[person.email] = person
            if person.account_id:
                self._accounts[person.account_id] = person.email

    def _add_issue(self, issue: dict) -> None:
        self.jira.add_issue(issue["key"], labels=issue["labels"], project=issue["project"],
                            assignee=issue["assignee"], priority=issue["priority"],
                            status=issue["status"], severity=issue["severity"])
        with self._lock:
            self._issues[issue["key"]] = None

    # -- reading it ---------------------------------------------------------------------------

    def state(self, keys: Iterable[str] | None = None) -> dict:
        """The issues (of ``keys``, or all), the Lark cards with their readers, Oncall pages."""
        with self._lock:
            wanted = list(self._issues) if keys is None else [k for k in keys
                                                               if k in self._issues]
            accounts = dict(self._accounts)
        issues = []
        for key in wanted:
            assignee = self.jira.assignee(key)
            issues.append({"key": key, "assignee": assignee,
                           "assignee_email": accounts.get(assignee or ""),
                           "labels": self.jira.labels(key), "status": self.jira.status(key),
                           "comments": [{"body": c.body, "public": c.public}
                                        for c in self.jira.comments(key)]})
        messages = [{"message_id": m.message_id, "receive_id": m.receive_id, "uuid": m.uuid,
                     "issue_key": card_issue(m.card), "urgent_for": m.urgent_for,
                     "read_by": [open_id for open_id, _ in m.readers]}
                    for m in self.lark.messages()]
        pages = [{"email": p.email, "title": p.title, "message": p.message,
                  "issue_key": p.issue_key, "dedup_key": p.dedup_key, "accepted": p.accepted}
                 for p in self.oncall.pages()]
        return {"issues": issues, "messages": messages, "pages": pages}

    # -- what people do -----------------------------------------------------------------------

    def card_read(self, body: Any) -> dict:
        """``email`` opens a card: the one ``message_id`` names, or the newest card sent to
        them about ``issue_key``. The Lark read list is what the product polls for an ACK."""
        entry = _object(body, frozenset({"issue_key", "message_id", "email"}), "the body")
        email = _text(entry.get("email"), "email").lower()
        with self._lock:
            person = self._people.get(email)
        if person is None or not person.open_id:
            raise BadRequest(f"{email} is no user with a Lark open_id", 404)
        message_id = _text(entry.get("message_id"), "message_id", optional=True)
        issue_key = _text(entry.get("issue_key"), "issue_key", optional=True)
        if (message_id is None) == (issue_key is None):
            raise BadRequest("give issue_key or message_id")
        cards = self.lark.messages()
        if message_id is not None:
            found = [m for m in cards if m.message_id == message_id]
        else:
            found = [m for m in cards
                     if m.receive_id == person.open_id and card_issue(m.card) == issue_key]
        if not found:
            raise BadRequest("no such card", 404)
        card = found[-1]
        self.lark.mark_read(card.message_id, person.open_id, at_ms=int(time.time() * 1000))
        return {"message_id": card.message_id, "open_id": person.open_id,
                "issue_key": card_issue(card.card), "receive_id": card.receive_id}

    def status_change(self, body: Any) -> dict:
        """Someone moves the issue in Jira (a status ACK once it leaves the pending status)."""
        entry = _object(body, frozenset({"issue_key", "status"}), "the body")
        key = _text(entry.get("issue_key"), "issue_key")
        status = _text(entry.get("status"), "status")
        with self._lock:
            if key not in self._issues:
                raise BadRequest(f"no issue {key}", 404)
        previous = self.jira.status(key)
        self.jira.set_status(key, status)
        return {"issue_key": key, "status": status, "previous": previous}


# --- the control API --------------------------------------------------------------------------


class Control:
    """The control server's WSGI app; its endpoints are the module docstring's."""

    def __init__(self, world: World, faults: Faults, log: CallLog,
                 ready: Callable[[], dict]):
        self.world, self.faults, self.log, self._ready = world, faults, log, ready
        self._routes: dict[tuple[str, str], Callable[[Any, dict[str, str]], Any]] = {
            ("GET", "/ready"): lambda body, query: self._ready(),
            ("POST", "/world"): lambda body, query: self.world.add(body),
            **{("POST", f"/world/{part}"):
               (lambda body, query, part=part: self.world.add({part: _entries(body, part)}))
               for part in WORLD_PARTS},
            ("GET", "/faults"): lambda body, query: {"faults": self.faults.live()},
            ("POST", "/faults"): lambda body, query: self.faults.add(body).to_json(),
            ("DELETE", "/faults"): self._clear_faults,
            ("GET", "/calls"): self._calls,
            ("GET", "/state"): self._state,
            ("POST", "/ack/card-read"): lambda body, query: self.world.card_read(body),
            ("POST", "/ack/status"): lambda body, query: self.world.status_change(body),
        }

    def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
        try:
            handler = self._routes.get((method, path))
            if handler is None:
                known = any(p == path for _, p in self._routes)
                raise BadRequest(f"no such endpoint: {method} {path}", 405 if known else 404)
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                raise BadRequest("the body is not JSON") from None
            status, answer = 200, handler(body, query)
        except BadRequest as error:
            status, answer = error.status, {"error": str(error)}
        payload = json.dumps(answer).encode()
        start_response(_status_line(status), [("Content-Type", "application/json"),
                                              ("Content-Length", str(len(payload)))])
        return [payload]

    def _clear_faults(self, body: Any, query: dict[str, str]) -> dict:
        options = {**query, **(body if isinstance(body, dict) else {})}
        service, fault_id = options.get("service"), options.get("id")
        if service is not None and service not in SERVICES:
            raise BadRequest(f"service must be one of {', '.join(SERVICES)}")
        if fault_id is not None:
            try:
                fault_id = int(fault_id)
            except (TypeError, ValueError):
                raise BadRequest("id must be an integer") from None
        return {"cleared": self.faults.clear(service, fault_id)}

    def _calls(self, body: Any, query: dict[str, str]) -> dict:
        try:
            since = int(query.get("since", "0"))
            limit = int(query.get("limit", str(CALLS_PAGE)))
        except ValueError:
            raise BadRequest("since and limit must be integers") from None
        if since < 0 or not 1 <= limit <= CALLS_PAGE:
            raise BadRequest(f"since >= 0, limit 1 to {CALLS_PAGE}")
        service = query.get("service")
        if service is not None and service not in SERVICES:
            raise BadRequest(f"service must be one of {', '.join(SERVICES)}")
        return self.log.since(since, limit, service)

    def _state(self, body: Any, query: dict[str, str]) -> dict:
        keys = query.get("keys")
        return self.world.state([k for k in keys.split(",") if k] if keys else None)


# --- the process ------------------------------------------------------------------------------


class ChaosFakes:
    """The four fakes behind their fault layers and the control server, in this process."""

    def __init__(self, calls_file: Path | None = None):
        self.stopping = threading.Event()
        self.world = World()
        self.faults = Faults()
        self.log = CallLog(calls_file)
        self.control = Control(self.world, self.faults, self.log, self.ready)
        self._control_server: WSGIServer | None = None
        self._control_thread: threading.Thread | None = None
        self._advertise: str | None = None
        for name, fake in self.world.fakes().items():
            router: Router = _route if name == "jira" else fake._route
            # The fake's own ``start`` serves ``self._app``: the instance attribute set here
            # puts the layer in front of it without touching the fake's code.
            fake._app = FaultLayer(name, fake._app, router, self.faults, self.log,
                                   self.stopping)

    def start(self, host: str = "127.0.0.1", port: int = 0,
              advertise: str | None = None) -> ChaosFakes:
        """Serve on free local ports, or, with ``port``, on it and the next four (Jira,
        Lark, Oncall, Core, the control API) on ``host``, named ``advertise`` in the URLs a
        deployment elsewhere is pointed at."""
        for offset, fake in enumerate(self.world.fakes().values()):
            fake.advertise = advertise
            fake.start(host, port + offset if port else 0)
        self._control_server, self._control_thread = serve(
            self.control, "chaos-control", host, port + len(self.world.fakes()) if port else 0)
        self._advertise = advertise
        return self

    def stop(self) -> None:
        """Wake every injected sleep, then stop the five servers side by side (each notices
        its shutdown within its poll interval), waiting a bounded time for all of them."""
        self.stopping.set()
        stoppers = [threading.Thread(target=stop, name="chaos-stop", daemon=True)
                    for stop in (self._stop_control,
                                 *(fake.stop for fake in self.world.fakes().values()))]
        for stopper in stoppers:
            stopper.start()
        deadline = time.monotonic() + STOP_JOIN_S
        for stopper in stoppers:
            stopper.join(timeout=max(0.0, deadline - time.monotonic()))
        self.log.close()

    def _stop_control(self) -> None:
        if self._control_server is not None:
            self._control_server.shutdown()
            self._control_server.server_close()
            self._control_thread.join(timeout=STOP_JOIN_S)

    def ready(self) -> dict:
        """The ready file's content: where everything is, and what ``serve`` needs."""
        jira, lark, oncall, core = (self.world.jira, self.world.lark, self.world.oncall,
                                    self.world.core)
        host, port = self._control_server.server_address[:2]
        host = self._advertise or host
        return {
            "pid": os.getpid(),
            "jira": jira.base_url, "lark": lark.base_url, "oncall": oncall.base_url,
            "core": core.base_url, "control": f"http://{host}:{port}",
            "jira_email": jira.email, "jira_api_token": jira.api_token,
            "lark_app_id": lark.app_id, "lark_app_secret": lark.app_secret,
            "oncall_token": oncall.token, "core_token": core.token,
            "settings": serve_settings(self.world, {name: fake.base_url for name, fake
                                                    in self.world.fakes().items()}),
        }


def serve_settings(world: World, base_urls: dict[str, str]) -> dict[str, str]:
    """The ``TICKET_DISPATCHER_<name>`` settings (without the prefix) of a serve process that
    calls these fakes at ``base_urls`` (by peer name): the fakes' fixed test credentials."""
    jira, lark, oncall, core = world.jira, world.lark, world.oncall, world.core
    return {
        "JIRA_BASE_URL": base_urls["jira"], "JIRA_EMAIL": jira.email,
        "JIRA_API_TOKEN": jira.api_token, "NOTIFICATIONS_ENABLED": "true",
        "LARK_BASE_URL": base_urls["lark"], "LARK_APP_ID": lark.app_id,
        "LARK_APP_SECRET": lark.app_secret,
        "ONCALL_BASE_URL": base_urls["oncall"], "ONCALL_TOKEN": oncall.token,
        "CORE_BASE_URL": base_urls["core"], "CORE_TOKEN": core.token,
    }


def settings_at(host: str, port: int) -> dict[str, str]:
    """``serve_settings`` of fakes that ``--port port --advertise host`` would start."""
    world = World()
    return serve_settings(world, {name: f"http://{host}:{port + offset}"
                                  for offset, name in enumerate(world.fakes())})


def _world_argument(value: str) -> Any:
    """``--world``: the JSON itself, or the path of a file holding it."""
    text = value if value.lstrip().startswith(("{", "[")) else Path(value).read_text()
    return json.loads(text)


def _write_atomically(path: Path, content: dict) -> None:
    """Whoever waits for the file never reads half of it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(content, indent=2))
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.fakes",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready-file", type=Path,
                        help="written (JSON) once everything serves")
    parser.add_argument("--print-settings", action="store_true",
                        help="print the settings a deployment needs to call fakes started "
                             "with --port and --advertise, and exit")
    parser.add_argument("--world", help="a world to set up first: JSON, or a file holding it")
    parser.add_argument("--calls-file", type=Path,
                        help="also append every recorded call to this JSON-lines file")
    parser.add_argument("--max-seconds", type=float, default=MAX_LIFETIME_S,
                        help="stop by itself after this long (default: a day)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--port", type=int, default=0,
                        help="Jira's port; Lark, Oncall, Core and the control API take the "
                             "next four (default: free ports)")
    parser.add_argument("--advertise", help="the host name a deployment elsewhere reaches "
                                            "this machine by (default: the address)")
    args = parser.parse_args(argv)
    if args.print_settings:
        if not args.port:
            parser.error("--print-settings needs --port")
        for name, value in settings_at(args.advertise or args.host, args.port).items():
            print(f"TICKET_DISPATCHER_{name}={value}")
        return 0
    if args.ready_file is None:
        parser.error("--ready-file is required")
    try:
        world = _world_argument(args.world) if args.world else None
    except (OSError, ValueError) as exc:
        parser.error(f"--world: {exc}")

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    fakes = ChaosFakes(calls_file=args.calls_file).start(args.host, args.port, args.advertise)
    try:
        if world is not None:
            try:
                fakes.world.add(world)
            except BadRequest as exc:
                print(f"--world: {exc}", file=sys.stderr)
                return 2
        _write_atomically(args.ready_file, fakes.ready())
        deadline = time.monotonic() + args.max_seconds
        while not stop.is_set() and time.monotonic() < deadline:
            stop.wait(min(1.0, max(0.0, deadline - time.monotonic())))
    finally:
        fakes.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
