"""Independent fakes of Feishu/Lark, Oncall and Core, served over real HTTP.

Like ``tests/peer.py`` (the fake Jira) they share no code with the product or its sandbox:
they are written from the services' APIs alone, so a test that drives a real
``ticket-dispatcher serve`` process against them checks the product against those APIs, not
against itself. Each fake knows only what the assignment notification calls:

- ``FakeLark``: the tenant token (flat answer, checked on every other call), open_id lookup by
  email, the interactive card (deduplicated by ``uuid``, as Lark does), App-urgent and the
  card's read users (paged);
- ``FakeOncall``: team responders and phone pages (``accepted``/``call_id``/``call_error``);
  pages are *not* deduplicated by ``dedup_key``, so a repeated page shows as a second call;
- ``FakeCore``: users (with their Lark ``open_id``), direct leaders and group members.

Each keeps a thread-safe call log (``calls(route)``: method, path, query, body, status,
answer) behind one ``threading.Condition`` that every change notifies, so a test waits for a
state (``wait_until``) instead of sleeping; ``hold(route)`` returns a ``Gate`` that keeps the
route's requests inside the fake until released (or ``hold_limit`` passes: 504). Served by
``tests.peer.serve``: wsgiref on a free local port, one daemon thread per connection.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs, unquote
from wsgiref.simple_server import WSGIServer

from tests.peer import Served, read_body


@dataclass(frozen=True)
class Call:
    """One request as a fake saw it; ``status`` and ``answer`` are None while it is held."""

    method: str
    path: str
    route: StrEnum | None
    key: str | None  # the path parameter: message ID, email, team or group
    query: dict[str, str]
    body: Any
    status: int | None = None
    answer: Any = None


class Gate:
    """Holds every request of one route until ``release()``; it then stays open."""

    def __init__(self, condition: threading.Condition, route: StrEnum):
        self._condition = condition
        self.route = route
        self.held = 0
        self.is_open = False

    def release(self) -> None:
        with self._condition:
            self.is_open = True
            self._condition.notify_all()

    def wait_until_held(self, count: int = 1, timeout: float = 10) -> bool:
        with self._condition:
            return self._condition.wait_for(lambda: self.held >= count, timeout)

    def _pass(self, limit: float) -> bool:
        """Called with the condition held; False when ``limit`` ran out first."""
        if self.is_open:
            return True
        self.held += 1
        self._condition.notify_all()
        try:
            return self._condition.wait_for(lambda: self.is_open, limit)
        finally:
            self.held -= 1
            self._condition.notify_all()


class PeerError(Exception):
    """An answer other than success: ``status`` and the service's own error body."""

    def __init__(self, status: int, body: Any):
        super().__init__(status)
        self.status = status
        self.body = body


class _Peer(Served):
    """Serving, routing, the call log and gates; a subclass names its routes and answers."""

    NAME = "peer"
    ROUTES: tuple[tuple[str, re.Pattern[str], StrEnum], ...] = ()

    def __init__(self, hold_limit: float = 30):
        self.hold_limit = hold_limit
        self._condition = threading.Condition()
        self._calls: list[Call] = []
        self._gates: list[Gate] = []
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        for gate in list(self._gates):
            gate.release()
        super().stop()

    # -- control and observation ----------------------------------------------------------------

    def calls(self, route: StrEnum | None = None) -> list[Call]:
        """A snapshot of the call log, oldest first."""
        with self._condition:
            return [c for c in self._calls if route is None or c.route is route]

    def hold(self, route: StrEnum) -> Gate:
        with self._condition:
            gate = Gate(self._condition, route)
            self._gates.append(gate)
            return gate

    def wait_until(self, predicate: Callable[[Any], bool], timeout: float = 10) -> bool:
        """Wait (without polling) until ``predicate(self)`` holds; False after ``timeout``."""
        with self._condition:
            return self._condition.wait_for(lambda: predicate(self), timeout)

    # -- HTTP -----------------------------------------------------------------------------------

    def _app(self, environ: dict, start_response: Callable) -> list[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        route, key = self._route(method, path)
        query = {name: values[0] for name, values in
                 parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).items()}
        call = Call(method, path, route, key, query, read_body(environ))
        with self._condition:
            index = len(self._calls)
            self._calls.append(call)
            self._condition.notify_all()
        try:
            if route is None:
                raise PeerError(404, self._error(404, f"no such resource: {method} {path}"))
            self._wait_at_gates(route)
            with self._condition:
                self._authenticate(route, environ.get("HTTP_AUTHORIZATION", ""))
                status, answer = self._handle(call)
        except PeerError as error:
            status, answer = error.status, error.body
        with self._condition:
            self._calls[index] = Call(method, path, route, key, query, call.body, status, answer)
            self._condition.notify_all()
        payload = json.dumps(answer).encode()
        start_response(f"{status} {_REASONS.get(status, 'Status')}", [
            ("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
        return [payload]

    def _route(self, method: str, path: str) -> tuple[StrEnum | None, str | None]:
        for verb, pattern, route in self.ROUTES:
            found = pattern.match(path)
            if verb == method and found:
                return route, unquote(found.group(1)) if found.groups() else None
        return None, None

    def _wait_at_gates(self, route: StrEnum) -> None:
        with self._condition:
            for gate in [g for g in self._gates if g.route is route]:
                if not gate._pass(self.hold_limit):
                    raise PeerError(504, self._error(504, "held by a gate never released"))

    def _authenticate(self, route: StrEnum, authorization: str) -> None:
        raise NotImplementedError

    def _handle(self, call: Call) -> tuple[int, Any]:
        raise NotImplementedError

    def _error(self, status: int, message: str) -> Any:
        return {"error": message}


class _BearerPeer(_Peer):
    """Oncall and Core: ``Authorization: Bearer <token>`` with one static token."""

    def __init__(self, token: str, hold_limit: float = 30):
        super().__init__(hold_limit)
        self.token = token

    def _authenticate(self, route: StrEnum, authorization: str) -> None:
        if authorization != f"Bearer {self.token}":
            raise PeerError(401, {"error": "unauthorized"})


# --- Lark -------------------------------------------------------------------------------------


class LarkRoute(StrEnum):
    TOKEN = "POST /open-apis/auth/v3/tenant_access_token/internal"
    BATCH_GET_ID = "POST /open-apis/contact/v3/users/batch_get_id"
    SEND = "POST /open-apis/im/v1/messages"
    URGENT_APP = "PATCH /open-apis/im/v1/messages/{message_id}/urgent_app"
    READ_USERS = "GET /open-apis/im/v1/messages/{message_id}/read_users"


TOKEN_INVALID = 99991663  # Lark: the tenant access token is invalid or expired
APP_SECRET_INVALID = 10014
MESSAGE_NOT_FOUND = 230001  # Lark's "invalid message id"; any non-zero code is a failure
BAD_REQUEST = 99992402  # Lark's "field validation failed"


@dataclass
class Message:
    """A card as Lark has it: who it went to, who was App-urgent'ed, who read it."""

    message_id: str
    receive_id: str
    card: dict
    uuid: str
    urgent_for: list[str] = field(default_factory=list)
    readers: list[tuple[str, int]] = field(default_factory=list)  # (open_id, read at, ms)


class FakeLark(_Peer):
    """The Feishu/Lark open platform; ``with FakeLark() as lark:`` serves it."""

    NAME = "lark"
    ROUTES = (
        ("POST", re.compile(r"^/open-apis/auth/v3/tenant_access_token/internal$"),
         LarkRoute.TOKEN),
        ("POST", re.compile(r"^/open-apis/contact/v3/users/batch_get_id$"),
         LarkRoute.BATCH_GET_ID),
        ("POST", re.compile(r"^/open-apis/im/v1/messages$"), LarkRoute.SEND),
        ("PATCH", re.compile(r"^/open-apis/im/v1/messages/([^/]+)/urgent_app$"),
         LarkRoute.URGENT_APP),
        ("GET", re.compile(r"^/open-apis/im/v1/messages/([^/]+)/read_users$"),
         LarkRoute.READ_USERS),
    )

    def __init__(self, *, app_id: str = "cli_fake_app", app_secret: str = "fake-lark-secret",
                 hold_limit: float = 30):
        super().__init__(hold_limit)
        self.app_id = app_id
        self.app_secret = app_secret
        self._tokens: set[str] = set()
        self._users: dict[str, str] = {}  # email (lower case) -> open_id
        self._messages: dict[str, Message] = {}  # by message ID
        self._by_uuid: dict[str, str] = {}  # uuid -> message ID
        self._sequence = itertools.count(1)

    # -- the world ------------------------------------------------------------------------------

    def add_user(self, email: str, open_id: str) -> None:
        with self._condition:
            self._users[email.lower()] = open_id

    def messages(self) -> list[Message]:
        """The cards Lark holds (one per uuid), oldest first; copies."""
        with self._condition:
            return [Message(m.message_id, m.receive_id, m.card, m.uuid, list(m.urgent_for),
                            list(m.readers)) for m in self._messages.values()]

    def mark_read(self, message_id: str, open_id: str, at_ms: int = 1_767_225_600_000) -> None:
        """``open_id`` opens the card (a read ACK when it is the expected target)."""
        with self._condition:
            self._messages[message_id].readers.append((open_id, at_ms))
            self._condition.notify_all()

    # -- HTTP -----------------------------------------------------------------------------------

    def _error(self, status: int, message: str) -> Any:
        return {"code": BAD_REQUEST, "msg": message, "data": {}}

    def _authenticate(self, route: StrEnum, authorization: str) -> None:
        if route is LarkRoute.TOKEN:
            return  # the token call is authenticated by its body
        scheme, _, token = authorization.partition(" ")
        if scheme != "Bearer" or token not in self._tokens:
            raise PeerError(400, {"code": TOKEN_INVALID, "msg": "Invalid access token for "
                                  "authorization. Please make a request with token attached."})

    def _handle(self, call: Call) -> tuple[int, Any]:
        handler = {LarkRoute.TOKEN: self._token, LarkRoute.BATCH_GET_ID: self._batch_get_id,
                   LarkRoute.SEND: self._send, LarkRoute.URGENT_APP: self._urgent_app,
                   LarkRoute.READ_USERS: self._read_users}[call.route]
        return handler(call)

    def _token(self, call: Call) -> tuple[int, Any]:
        body = call.body if isinstance(call.body, dict) else {}
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return 400, {"code": APP_SECRET_INVALID, "msg": "app secret invalid"}
        token = f"t-fake-{next(self._sequence)}"
        self._tokens.add(token)
        # the token answer is flat, unlike every other envelope
        return 200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200}

    def _batch_get_id(self, call: Call) -> tuple[int, Any]:
        self._expect_id_type(call, "user_id_type")
        emails = (call.body or {}).get("emails") if isinstance(call.body, dict) else None
        if not isinstance(emails, list) or not 1 <= len(emails) <= 50:
            raise PeerError(400, self._error(400, "emails: 1 to 50 emails"))
        user_list = []
        for email in emails:
            open_id = self._users.get(str(email).lower())
            user_list.append({"email": email, "user_id": open_id} if open_id
                             else {"email": email})
        return 200, _ok({"user_list": user_list})

    def _send(self, call: Call) -> tuple[int, Any]:
        self._expect_id_type(call, "receive_id_type")
        body = call.body if isinstance(call.body, dict) else {}
        if body.get("msg_type") != "interactive" or not isinstance(body.get("content"), str):
            raise PeerError(400, self._error(400, "msg_type interactive with a JSON content"))
        try:
            card = json.loads(body["content"])
        except ValueError:
            raise PeerError(400, self._error(400, "content is not JSON")) from None
        if body.get("receive_id") not in self._users.values():
            raise PeerError(400, self._error(400, "invalid receive_id"))
        uuid = body.get("uuid") or ""
        if uuid and uuid in self._by_uuid:  # the same send again: the same message
            return 200, _ok({"message_id": self._by_uuid[uuid]})
        message = Message(f"om_fake_{next(self._sequence)}", body["receive_id"], card, uuid)
        self._messages[message.message_id] = message
        if uuid:
            self._by_uuid[uuid] = message.message_id
        return 200, _ok({"message_id": message.message_id, "msg_type": "interactive"})

    def _urgent_app(self, call: Call) -> tuple[int, Any]:
        self._expect_id_type(call, "user_id_type")
        message = self._message(call.key)
        ids = (call.body or {}).get("user_id_list") if isinstance(call.body, dict) else None
        if not isinstance(ids, list) or not ids:
            raise PeerError(400, self._error(400, "user_id_list is required"))
        # only the card's own receiver can be App-urgent'ed for it
        invalid = [user_id for user_id in ids if user_id != message.receive_id]
        message.urgent_for.extend(user_id for user_id in ids if user_id not in invalid)
        return 200, _ok({"invalid_user_id_list": invalid})

    def _read_users(self, call: Call) -> tuple[int, Any]:
        self._expect_id_type(call, "user_id_type")
        message = self._message(call.key)
        try:
            size = int(call.query.get("page_size", "20"))
            start = int(call.query.get("page_token") or 0)
        except ValueError:
            raise PeerError(400, self._error(400, "page_size and page_token")) from None
        if not 1 <= size <= 100:
            raise PeerError(400, self._error(400, "page_size must be 1 to 100"))
        page = message.readers[start:start + size]
        more = start + size < len(message.readers)
        return 200, _ok({
            "items": [{"user_id_type": "open_id", "user_id": open_id, "timestamp": str(at)}
                      for open_id, at in page],
            "has_more": more, "page_token": str(start + size) if more else ""})

    def _message(self, message_id: str | None) -> Message:
        message = self._messages.get(message_id or "")
        if message is None:
            raise PeerError(400, {"code": MESSAGE_NOT_FOUND, "msg": "invalid message id"})
        return message

    def _expect_id_type(self, call: Call, name: str) -> None:
        if call.query.get(name) != "open_id":
            raise PeerError(400, self._error(400, f"{name} must be open_id here"))


def _ok(data: dict) -> dict:
    return {"code": 0, "msg": "ok", "data": data}


# --- Oncall -----------------------------------------------------------------------------------


class OncallRoute(StrEnum):
    RESPONDERS = "GET /api/v1/teams/{team}/responders"
    PAGE = "POST /api/v1/page"


NO_PHONE = "no_phone_number"
PAGE_KEYS = ("email", "title", "message", "issue_key", "dedup_key")


@dataclass(frozen=True)
class Page:
    email: str
    title: str
    message: str
    issue_key: str
    dedup_key: str
    accepted: bool


class FakeOncall(_BearerPeer):
    """The internal Oncall service; ``with FakeOncall() as oncall:`` serves it."""

    NAME = "oncall"
    ROUTES = (
        ("GET", re.compile(r"^/api/v1/teams/([^/]+)/responders$"), OncallRoute.RESPONDERS),
        ("POST", re.compile(r"^/api/v1/page$"), OncallRoute.PAGE),
    )

    def __init__(self, *, token: str = "fake-oncall-token", hold_limit: float = 30):
        super().__init__(token, hold_limit)
        self._phones: set[str] = set()
        self._teams: dict[str, list[dict]] = {}
        self._pages: list[Page] = []
        self._sequence = itertools.count(1)

    def add_phone(self, email: str) -> None:
        """``email`` can be phoned; a page to anyone else answers ``no_phone_number``."""
        with self._condition:
            self._phones.add(email.lower())

    def add_team(self, team: str, responders: Iterable[tuple[str, str]]) -> None:
        """The team's responders, ``(email, name)``, primary first."""
        with self._condition:
            self._teams[team] = [{"email": e, "name": n} for e, n in responders]

    def pages(self) -> list[Page]:
        """Every page request Oncall received, oldest first (none is deduplicated)."""
        with self._condition:
            return list(self._pages)

    def _handle(self, call: Call) -> tuple[int, Any]:
        if call.route is OncallRoute.RESPONDERS:
            if call.key not in self._teams:
                raise PeerError(404, {"error": f"no team {call.key}"})
            return 200, {"responders": list(self._teams[call.key])}
        body = call.body if isinstance(call.body, dict) else {}
        missing = [key for key in PAGE_KEYS if not isinstance(body.get(key), str)]
        if missing or not body["email"]:
            raise PeerError(400, {"error": f"missing {', '.join(missing) or 'email'}"})
        accepted = body["email"].lower() in self._phones
        self._pages.append(Page(*(body[key] for key in PAGE_KEYS), accepted=accepted))
        if not accepted:
            return 200, {"accepted": False, "call_id": "", "call_error": NO_PHONE}
        return 200, {"accepted": True, "call_id": f"call-{next(self._sequence)}",
                     "call_error": ""}


# --- Core -------------------------------------------------------------------------------------


class CoreRoute(StrEnum):
    USER = "GET /api/v1/users/{email}"
    LEADER = "GET /api/v1/users/{email}/leader"
    GROUP_MEMBERS = "GET /api/v1/groups/{group}/members"


@dataclass(frozen=True)
class _Person:
    email: str
    name: str
    active: bool
    open_id: str | None
    leader: str | None  # the leader's email


class FakeCore(_BearerPeer):
    """The internal Core directory; ``with FakeCore() as core:`` serves it."""

    NAME = "core"
    ROUTES = (
        ("GET", re.compile(r"^/api/v1/users/([^/]+)$"), CoreRoute.USER),
        ("GET", re.compile(r"^/api/v1/users/([^/]+)/leader$"), CoreRoute.LEADER),
        ("GET", re.compile(r"^/api/v1/groups/([^/]+)/members$"), CoreRoute.GROUP_MEMBERS),
    )

    def __init__(self, *, token: str = "fake-core-token", hold_limit: float = 30):
        super().__init__(token, hold_limit)
        self._people: dict[str, _Person] = {}
        self._groups: dict[str, list[dict]] = {}

    def add_user(self, email: str, name: str = "", *, open_id: str | None = None,
                 active: bool = True, leader: str | None = None) -> None:
        with self._condition:
            self._people[email.lower()] = _Person(email.lower(), name or email, active,
                                                  open_id, leader and leader.lower())

    def add_group(self, group: str, members: Iterable[tuple[str, bool]]) -> None:
        """The group's members, ``(email, active)``."""
        with self._condition:
            self._groups[group] = [{"email": e, "active": a} for e, a in members]

    def _handle(self, call: Call) -> tuple[int, Any]:
        if call.route is CoreRoute.GROUP_MEMBERS:
            if call.key not in self._groups:
                raise PeerError(404, {"error": f"no group {call.key}"})
            return 200, {"members": list(self._groups[call.key])}
        person = self._people.get((call.key or "").lower())
        if person is not None and call.route is CoreRoute.LEADER:
            person = self._people.get(person.leader or "")
        if person is None:
            raise PeerError(404, {"error": "not found"})
        user = {"email": person.email, "name": person.name, "active": person.active}
        if person.open_id:
            user["open_id"] = person.open_id
        return 200, user


# ----------------------------------------------------------------------------------------------

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            504: "Gateway Timeout"}
