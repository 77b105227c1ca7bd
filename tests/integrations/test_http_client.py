"""The shared session helper: request shape, errors, Retry-After, safe logs."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import shutil
import socket
import ssl
import subprocess
import threading
import zlib
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from responses import matchers

from tests.clocks import ManualClock
from tests.peer import Answering, serving
from ticket_dispatcher.errors import IntegrationError, LeaseLost, OutcomeUnknown
from ticket_dispatcher.integrations.http import (
    BearerAuth,
    HttpClient,
    IntegrationRejected,
    IntegrationTimeout,
    segment,
    send_guard,
)

BASE = "https://svc.example.com"
TOKEN = "s3cr3t-token-value"


class Waits(list):
    """A fake ``sleep`` that records each wait instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def client(**overrides) -> HttpClient:
    options = dict(auth=BearerAuth(TOKEN), connect_timeout=1, read_timeout=2,
                   sleep=Waits(), secrets=(TOKEN,))
    options.update(overrides)
    return HttpClient("svc", BASE, **options)


def test_request_sends_method_path_query_body_and_bearer_auth(mocked):
    mocked.post(f"{BASE}/api/v1/things", json={"ok": True}, match=[
        matchers.query_param_matcher({"kind": "a,b"}),
        matchers.json_params_matcher({"name": "x"}),
        matchers.header_matcher({"Authorization": f"Bearer {TOKEN}"}),
    ])

    answer = client().request_json("POST", "/api/v1/things", params={"kind": "a,b"},
                                   json={"name": "x"})

    assert answer == {"ok": True}


@pytest.mark.parametrize("method,path,params,body", [
    ("GET", "/rest/api/2/issue/TCID-1", {"fields": "summary,labels", "expand": None}, None),
    ("GET", "/rest/api/2/user/search", {"query": "ann+o'neil@example.com"}, None),
    ("GET", "/open-apis/contact/v3/users/batch", [("user_ids", "ou_1"), ("user_ids", "ou_2")],
     None),
    ("GET", "/teams", {"ids": ["a b", "ç/d"], "limit": 10, "active": True}, None),
    ("PUT", f"/rest/api/2/issue/{segment('TCID 1/ü')}/assignee", None,
     {"accountId": "acc-ü", "n": [1, 2.5, None, True]}),
    ("POST", "/token", None, None),
    ("DELETE", "/rest/api/2/issue/TCID-1/watchers", {"accountId": "x"}, None),
])
def test_a_request_is_sent_as_requests_itself_prepares_it(mocked, method, path, params, body):
    # The sender builds the request without requests' own preparation: URL, query, body and
    # headers must still be exactly what requests would have sent.
    mocked.add(method, f"{BASE}{path.split('?')[0]}")
    auth = ("bot@example.com", "pw")

    client(auth=auth).request(method, path, params=params, json=body)

    sent = mocked.calls[0].request
    expected = requests.Request(method, BASE + path, params=params, json=body,
                                auth=auth, headers=requests.Session().headers).prepare()
    assert sent.method == expected.method
    assert sent.url == expected.url
    assert sent.body == expected.body
    assert dict(sent.headers) == dict(expected.headers)


def test_basic_auth_tuple_and_header_callable_are_both_accepted(mocked):
    basic = base64.b64encode(b"bot@example.com:pw").decode()
    mocked.get(f"{BASE}/basic", match=[
        matchers.header_matcher({"Authorization": f"Basic {basic}"})])
    mocked.get(f"{BASE}/headers", match=[matchers.header_matcher({"X-Token": "t"})])

    client(auth=("bot@example.com", "pw")).request("GET", "/basic")
    client(auth=lambda: {"X-Token": "t"}).request("GET", "/headers")

    assert len(mocked.calls) == 2


def test_unauthenticated_request_sends_no_authorization_header(mocked):
    mocked.post(f"{BASE}/token")

    client().request("POST", "/token", authenticate=False)

    assert "Authorization" not in mocked.calls[0].request.headers


def test_timeouts_are_passed_to_requests(mocked):
    mocked.get(f"{BASE}/x")

    client(connect_timeout=1.5, read_timeout=7).request("GET", "/x")

    assert mocked.calls[0].request.req_kwargs["timeout"] == (1.5, 7)


def test_jira_error_body_is_in_the_message_with_status_and_service(mocked):
    mocked.put(f"{BASE}/rest/api/2/issue/TCID-1", status=400, json={
        "errorMessages": ["Field cannot be set"], "errors": {"customfield_10053": "bad user"}})

    with pytest.raises(IntegrationRejected) as caught:
        client().request("PUT", "/rest/api/2/issue/TCID-1", json={}, expected=(204,))

    error = caught.value
    assert (error.status, error.service, error.timeout) == (400, "svc", False)
    assert error.message == ("svc PUT /rest/api/2/issue/TCID-1 failed: HTTP 400: "
                             "Field cannot be set; customfield_10053: bad user")


def test_lark_style_error_carries_its_code(mocked):
    mocked.post(f"{BASE}/open-apis/x", status=400, json={"code": 99991663, "msg": "bad token"})

    with pytest.raises(IntegrationRejected) as caught:
        client().request("POST", "/open-apis/x")

    assert caught.value.code == 99991663
    assert "code 99991663: bad token" in caught.value.message


def test_server_error_with_html_body_does_not_echo_the_body(mocked):
    mocked.get(f"{BASE}/x", status=500, body="<html>Authorization: Bearer leaked</html>")

    with pytest.raises(IntegrationRejected) as caught:
        client().request("GET", "/x")

    assert caught.value.status == 500
    assert caught.value.message == "svc GET /x failed: HTTP 500"


def test_long_service_error_text_is_truncated(mocked):
    mocked.get(f"{BASE}/x", status=422, json={"message": "y" * 5000})

    with pytest.raises(IntegrationRejected) as caught:
        client().request("GET", "/x")

    assert len(caught.value.message) < 300


def test_secret_echoed_by_the_service_is_masked(mocked):
    mocked.get(f"{BASE}/x", status=401, json={"message": f"token {TOKEN} is revoked"})

    with pytest.raises(IntegrationRejected) as caught:
        client().request("GET", "/x")

    assert TOKEN not in caught.value.message
    assert "***" in caught.value.message


def test_malformed_json_is_an_integration_error(mocked):
    mocked.get(f"{BASE}/x", body="not json{")

    with pytest.raises(IntegrationError) as caught:
        client().request_json("GET", "/x")

    assert caught.value.status == 200
    assert "not JSON" in caught.value.message


def test_read_timeout_is_an_unknown_outcome_without_status(mocked):
    mocked.get(f"{BASE}/x",
               body=requests.exceptions.ReadTimeout(f"{BASE}/x?email=a@example.com timed out"))

    with pytest.raises(IntegrationTimeout) as caught:
        client().request("GET", "/x", params={"email": "a@example.com"})

    error = caught.value
    # Sent, but unanswered: the peer may have acted.
    assert isinstance(error, OutcomeUnknown)
    assert (error.status, error.service, error.timeout) == (None, "svc", True)
    assert error.__cause__ is None and error.__suppress_context__
    assert "a@example.com" not in error.message


def test_connect_timeout_is_a_plain_connection_failure(mocked):
    # The request never reached the peer, so nothing can have happened there.
    mocked.get(f"{BASE}/x",
               body=requests.exceptions.ConnectTimeout(f"{BASE}/x?email=a@example.com"))

    with pytest.raises(IntegrationError) as caught:
        client().request("GET", "/x", params={"email": "a@example.com"})

    error = caught.value
    assert not isinstance(error, OutcomeUnknown)
    assert (error.status, error.service) == (None, "svc")
    assert "connection failed (ConnectTimeout)" in error.message
    assert "a@example.com" not in error.message


def test_connection_failure_is_an_error_but_not_a_timeout(mocked):
    mocked.get(f"{BASE}/x", body=requests.exceptions.ConnectionError("refused"))

    with pytest.raises(IntegrationError) as caught:
        client().request("GET", "/x")

    assert not isinstance(caught.value, IntegrationTimeout)
    assert caught.value.status is None
    assert "connection failed" in caught.value.message


def test_429_with_retry_after_is_retried_after_that_wait(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=429, headers={"Retry-After": "2"})
    mocked.get(f"{BASE}/x", json={"ok": True})

    answer = client(sleep=waits).request_json("GET", "/x")

    assert answer == {"ok": True}
    assert waits == [2.0]
    assert len(mocked.calls) == 2


def test_503_with_http_date_retry_after_waits_until_that_date(mocked):
    waits = Waits()
    clock = ManualClock(datetime(2026, 11, 30, 1, 0, 0, tzinfo=UTC))
    mocked.get(f"{BASE}/x", status=503, headers={"Retry-After": "Mon, 30 Nov 2026 01:00:04 GMT"})
    mocked.get(f"{BASE}/x")

    client(sleep=waits, clock=clock).request("GET", "/x")

    assert waits == [4.0]


def test_429_with_too_long_retry_after_fails_fast(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=429, headers={"Retry-After": "60"},
               json={"code": 99991400, "msg": "request trigger frequency limit"})

    with pytest.raises(IntegrationRejected) as caught:
        client(sleep=waits, max_retry_wait=10).request("GET", "/x")

    assert caught.value.status == 429
    assert waits == []
    assert len(mocked.calls) == 1


def test_429_without_retry_after_is_not_retried(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=429)

    with pytest.raises(IntegrationRejected):
        client(sleep=waits).request("GET", "/x")

    assert waits == [] and len(mocked.calls) == 1


def test_retries_are_bounded(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=503, headers={"Retry-After": "1"})

    with pytest.raises(IntegrationRejected) as caught:
        client(sleep=waits, max_retries=2).request("GET", "/x")

    assert caught.value.status == 503
    assert waits == [1.0, 1.0]
    assert len(mocked.calls) == 3


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE"])
def test_a_write_answered_503_goes_back_to_its_caller_unrepeated(mocked, method):
    """A 503 may come after the service acted: the caller reads before it writes again."""
    waits = Waits()
    mocked.add(method, f"{BASE}/x", status=503, headers={"Retry-After": "1"})

    with pytest.raises(IntegrationRejected) as caught:
        client(sleep=waits).request(method, "/x", json={}, expected=(204,))

    assert (caught.value.status, caught.value.retry_after) == (503, 1.0)
    assert waits == [] and len(mocked.calls) == 1


def test_a_read_sent_as_post_is_repeated_after_a_503_when_it_says_so(mocked):
    waits = Waits()
    mocked.post(f"{BASE}/search", status=503, headers={"Retry-After": "1"})
    mocked.post(f"{BASE}/search", json={"issues": []})

    answer = client(sleep=waits).request_json("POST", "/search", json={}, repeatable=True)

    assert answer == {"issues": []} and waits == [1.0]


def test_a_write_answered_429_is_repeated_after_the_wait(mocked):
    """A rate limit refuses the request: nothing was applied, so it is sent again."""
    waits = Waits()
    mocked.put(f"{BASE}/x", status=429, headers={"Retry-After": "2"})
    mocked.put(f"{BASE}/x", status=204)

    client(sleep=waits).request("PUT", "/x", json={}, expected=(204,))

    assert waits == [2.0] and len(mocked.calls) == 2


@pytest.mark.parametrize("given, taken", [
    ("999999", 600.0), ("1e12", None), ("inf", None), ("nan", None), ("-5", None),
    ("1.5", 1.5), ("0", 0.0), ("9" * 400, 600.0), ("Fri, 31 Dec 9999 23:59:59 GMT", 600.0),
    ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0), ("soon", None),
])
def test_retry_after_is_seconds_or_a_date_and_never_more_than_ten_minutes(mocked, given, taken):
    mocked.get(f"{BASE}/x", status=429, headers={"Retry-After": given})

    with pytest.raises(IntegrationRejected) as caught:
        client(max_retries=0).request("GET", "/x")

    assert caught.value.retry_after == taken


def test_500_is_not_retried(mocked):
    waits = Waits()
    mocked.get(f"{BASE}/x", status=500, headers={"Retry-After": "1"})

    with pytest.raises(IntegrationRejected):
        client(sleep=waits).request("GET", "/x")

    assert waits == [] and len(mocked.calls) == 1


def test_each_call_is_logged_at_debug_without_headers_query_or_body(mocked, caplog):
    mocked.post(f"{BASE}/api/v1/page", status=201)
    caplog.set_level(logging.DEBUG, logger="ticket_dispatcher.integrations")

    http = client()
    http.request("POST", "/api/v1/page", params={"q": "a@example.com"},
                 json={"message": "call +8613800138000"}, expected=(201,))

    [record] = [r for r in caplog.records if r.name == "ticket_dispatcher.integrations.http"]
    text = record.getMessage()
    assert record.levelno == logging.DEBUG
    assert text.startswith("svc POST /api/v1/page -> 201 in ")
    for absent in (TOKEN, "Bearer", "a@example.com", "+8613800138000"):
        assert absent not in text
    assert http.last_latency_ms is not None and http.last_latency_ms >= 0


def test_a_failed_call_is_logged_with_no_status(mocked, caplog):
    mocked.get(f"{BASE}/x", body=requests.exceptions.ReadTimeout("slow"))
    caplog.set_level(logging.DEBUG, logger="ticket_dispatcher.integrations")

    with pytest.raises(IntegrationTimeout):
        client().request("GET", "/x")

    assert any(r.getMessage().startswith("svc GET /x -> None in ") for r in caplog.records)


def test_a_redirect_is_not_followed_and_is_an_unexpected_status(mocked):
    mocked.get(f"{BASE}/rest/api/2/myself", status=302,
               headers={"Location": "https://elsewhere.example.com/steal"})

    with pytest.raises(IntegrationRejected) as raised:
        client().request("GET", "/rest/api/2/myself")

    assert raised.value.status == 302
    assert [call.request.url for call in mocked.calls] == [f"{BASE}/rest/api/2/myself"]


def test_the_answer_body_is_read_before_the_call_returns(mocked):
    mocked.get(f"{BASE}/big", body=b"x" * 100_000)

    response = client().request("GET", "/big")

    assert response._content_consumed and len(response.content) == 100_000


def test_bearer_auth_repr_hides_the_token():
    assert TOKEN not in repr(BearerAuth(TOKEN))


def test_path_segments_are_quoted():
    assert segment("TCID-1") == "TCID-1"
    assert segment("a.b@example.com") == "a.b@example.com"
    assert segment("team/one two?") == "team%2Fone%20two%3F"


@pytest.fixture
def proxy():
    """A forward proxy that answers every request itself; a client talking to a proxy names
    the absolute URL in its request line, which the proxy records."""
    app = Answering()
    with serving(app, "proxy") as app.url:
        yield app


def test_proxy_named_by_the_environment_carries_the_calls(proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    http = HttpClient("svc", "http://jira.invalid", connect_timeout=1, read_timeout=2)

    assert http.request_json("GET", "/rest/api/2/myself") == {}
    assert http.request_json("GET", "/rest/api/2/issue/TCID-1") == {}

    assert proxy.paths == ["http://jira.invalid/rest/api/2/myself",
                             "http://jira.invalid/rest/api/2/issue/TCID-1"]


def test_host_in_no_proxy_is_called_directly(proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "jira.invalid")
    http = HttpClient("svc", "http://jira.invalid", connect_timeout=1, read_timeout=2)

    with pytest.raises(IntegrationError):  # straight to a host that does not resolve
        http.request("GET", "/rest/api/2/myself")

    assert proxy.paths == []


def test_a_proxy_nobody_listens_on_is_a_proxy_failure(monkeypatch):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]  # closed again at once: nothing listens there now
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    http = HttpClient("svc", "http://jira.invalid", connect_timeout=1, read_timeout=2)

    with pytest.raises(IntegrationError) as caught:
        http.request("GET", "/rest/api/2/myself")

    assert not isinstance(caught.value, OutcomeUnknown)
    assert "connection failed (ProxyError)" in caught.value.message


class _CookieSetter:
    """Answers every call with a session cookie and records the Cookie header it was sent."""

    def __init__(self):
        self.cookies: list[str | None] = []

    def __call__(self, environ, start_response):
        self.cookies.append(environ.get("HTTP_COOKIE"))
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Set-Cookie", "JSESSIONID=abc123; Path=/")])
        return [b"{}"]


def test_a_cookie_a_peer_sets_is_never_sent_back():
    app = _CookieSetter()
    with serving(app, "cookies") as url:
        http = HttpClient("svc", url, connect_timeout=1, read_timeout=2)
        for _ in range(2):
            assert http.request_json("GET", "/rest/api/2/myself") == {}

    assert app.cookies == [None, None]


class _Listener:
    """A bare TCP peer: accepts one connection and keeps every byte it receives until the
    client closes it."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.received = b""
        self.closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="listener", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        connection, _ = self.socket.accept()
        with connection:
            connection.settimeout(5)
            while chunk := connection.recv(65536):
                self.received += chunk
        self.closed.set()

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def listener():
    peer = _Listener()
    yield peer
    peer.close()


def guarded(guard, call):
    token = send_guard.set(guard)
    try:
        return call()
    finally:
        send_guard.reset(token)


def test_a_refusing_guard_lets_no_byte_of_the_request_leave(listener):
    http = HttpClient("svc", listener.url, connect_timeout=1, read_timeout=2)

    def refuse() -> None:
        raise LeaseLost("the lease ran out")

    with pytest.raises(LeaseLost):
        guarded(refuse, lambda: http.request("PUT", "/rest/api/2/issue/X-1/assignee",
                                             json={"accountId": "acc-1"}, expected=(204,)))

    assert listener.closed.wait(5)  # the connection was dropped, with nothing written to it
    assert listener.received == b""


def test_a_guard_refusing_after_the_head_left_cuts_the_request_short(listener):
    # Checked before each write: the request's head, then its body. A lease that ran out in
    # between leaves the peer a head whose announced body never comes, and a closed connection.
    http = HttpClient("svc", listener.url, connect_timeout=1, read_timeout=2)
    checks = []

    def once() -> None:
        checks.append(len(checks))
        if len(checks) > 1:
            raise LeaseLost("the lease ran out")

    with pytest.raises(LeaseLost):
        guarded(once, lambda: http.request("PUT", "/rest/api/2/issue/X-1/assignee",
                                           json={"accountId": "acc-1"}, expected=(204,)))

    assert listener.closed.wait(5)
    head, _, body = listener.received.partition(b"\r\n\r\n")
    assert head.startswith(b"PUT /rest/api/2/issue/X-1/assignee HTTP/1.1")
    assert b"Content-Length: 22" in head  # {"accountId": "acc-1"}
    assert body == b""
    assert checks == [0, 1]


# --- the transport, against real sockets -------------------------------------------------------


class _ThreadedPeer:
    """A local TCP server on a free port: each connection it accepts is served by ``_serve``
    on a thread of its own until ``close``; ``connections`` counts them."""

    def listen(self, name: str) -> None:
        self.connections = 0
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        threading.Thread(target=self._accept, name=name, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:  # closed
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.socket.close()


class _HttpPeer(_ThreadedPeer):
    """A bare HTTP/1.1 peer on a real socket: answers each request with ``answer`` (head
    lines and body) and keeps the connection open unless the answer says ``Connection:
    close``; ``silent`` reads requests and never answers. Counts the connections it got."""

    def __init__(self, headers: list[tuple[str, str]] = (), body: bytes = b"{}",
                 silent: bool = False):
        self.headers, self.body, self.silent = list(headers), body, silent
        self.listen("http-peer")

    def _serve(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as requests_in:
            while head := _read_head(requests_in):
                length = int(head.get("content-length", "0"))
                requests_in.read(length)
                if self.silent:
                    continue
                lines = [f"{name}: {value}" for name, value in
                         [("Content-Length", str(len(self.body))), *self.headers]]
                connection.sendall(("HTTP/1.1 200 OK\r\n" + "".join(
                    line + "\r\n" for line in lines) + "\r\n").encode() + self.body)
                if ("Connection", "close") in self.headers:
                    return


def _read_head(stream) -> dict[str, str]:
    """One request's head from ``stream``: its header fields by lowercase name; {} at the
    end of the connection."""
    fields: dict[str, str] = {}
    if not stream.readline():
        return fields
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        fields[name.strip().lower()] = value.strip()
    return fields


@pytest.fixture
def peer_factory():
    peers: list[_HttpPeer] = []

    def start(**options) -> _HttpPeer:
        peers.append(_HttpPeer(**options))
        return peers[-1]

    yield start
    for peer in peers:
        peer.close()


def test_calls_share_one_kept_alive_connection(peer_factory):
    peer = peer_factory(headers=[("Content-Type", "application/json")])
    http = HttpClient("svc", peer.url, connect_timeout=1, read_timeout=2)

    assert [http.request_json("GET", "/rest/api/2/myself") for _ in range(3)] == [{}] * 3

    assert peer.connections == 1


def test_a_connection_the_peer_closes_is_replaced_by_a_new_one(peer_factory):
    peer = peer_factory(headers=[("Content-Type", "application/json"), ("Connection", "close")])
    http = HttpClient("svc", peer.url, connect_timeout=1, read_timeout=2)

    assert [http.request_json("GET", "/rest/api/2/myself") for _ in range(2)] == [{}] * 2

    assert peer.connections == 2


@pytest.mark.parametrize("coding, encode", [
    ("gzip", gzip.compress),
    ("gzip", lambda data: gzip.compress(data[:9]) + gzip.compress(data[9:])),  # two members
    ("deflate", zlib.compress),
    ("deflate", lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)),  # raw, as some send
])
def test_a_compressed_answer_is_read_decoded(peer_factory, coding, encode):
    answer = {"key": "TCID-1", "fields": {"summary": "décodé"}}
    peer = peer_factory(body=encode(json.dumps(answer).encode()),
                        headers=[("Content-Type", "application/json"),
                                 ("Content-Encoding", coding)])
    http = HttpClient("svc", peer.url, connect_timeout=1, read_timeout=2)

    assert http.request_json("GET", "/rest/api/2/issue/TCID-1") == answer


def test_a_corrupt_compressed_answer_is_a_failed_call(peer_factory):
    peer = peer_factory(body=b"not gzip at all", headers=[("Content-Encoding", "gzip")])
    http = HttpClient("svc", peer.url, connect_timeout=1, read_timeout=2)

    with pytest.raises(OutcomeUnknown) as caught:  # it was answered, so it was received
        http.request("GET", "/rest/api/2/myself")

    assert "could not be decoded (ContentDecodingError)" in caught.value.message


def test_a_header_the_peer_sends_twice_is_read_with_both_values(peer_factory):
    peer = peer_factory(headers=[("Warning", "199 - first"), ("Warning", "199 - second")])
    http = HttpClient("svc", peer.url, connect_timeout=1, read_timeout=2)

    assert http.request("GET", "/x").headers["warning"] == "199 - first, 199 - second"


def test_a_peer_that_never_answers_is_a_read_timeout_with_an_unknown_outcome(peer_factory):
    peer = peer_factory(silent=True)
    http = HttpClient("svc", peer.url, connect_timeout=1, read_timeout=0.2)

    with pytest.raises(IntegrationTimeout) as caught:
        http.request("PUT", "/rest/api/2/issue/X-1/assignee", json={"accountId": "a"},
                     expected=(204,))

    assert isinstance(caught.value, OutcomeUnknown)
    # The connection that timed out is not reused: the next call opens another.
    with pytest.raises(IntegrationTimeout):
        http.request("GET", "/x")
    assert peer.connections == 2


@pytest.mark.parametrize("cut", ["reset", "close"])
def test_a_connection_broken_after_the_request_was_sent_is_an_unknown_outcome(cut):
    """The peer read the whole request (and may have acted on it), then the connection broke
    before any answer: not a failed connection, after which nothing can have happened."""
    with socket.create_server(("127.0.0.1", 0)) as server:

        def read_then_break() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)
                if cut == "reset":  # RST instead of FIN
                    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                          b"\x01\x00\x00\x00\x00\x00\x00\x00")

        thread = threading.Thread(target=read_then_break, name="breaker", daemon=True)
        thread.start()
        http = HttpClient("svc", f"http://127.0.0.1:{server.getsockname()[1]}",
                          connect_timeout=1, read_timeout=2)

        with pytest.raises(OutcomeUnknown) as caught:
            http.request("POST", "/rest/servicedeskapi/request/X-1/comment", json={"body": "b"},
                         expected=(201,))
        thread.join(5)

    assert caught.value.status is None
    assert "the outcome is unknown" in caught.value.message


def test_a_port_nobody_listens_on_is_a_connection_failure_not_a_timeout():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]  # closed again at once: nothing listens there now
    http = HttpClient("svc", f"http://127.0.0.1:{port}", connect_timeout=1, read_timeout=2)

    with pytest.raises(IntegrationError) as caught:
        http.request("GET", "/x")

    assert not isinstance(caught.value, OutcomeUnknown)
    assert "connection failed (ConnectionError)" in caught.value.message


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        pass


@pytest.fixture
def https_peer(tmp_path):
    """An HTTPS peer on 127.0.0.1 with a self-signed certificate for "localhost"; its base URL
    and the certificate's path (a CA bundle that trusts it)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="https-peer", daemon=True).start()
    yield f"https://localhost:{server.server_address[1]}", cert
    server.shutdown()
    server.server_close()


def test_an_https_peer_the_ca_bundle_trusts_is_called(https_peer, monkeypatch):
    url, cert = https_peer
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))  # read when the client is made
    http = HttpClient("svc", url, connect_timeout=2, read_timeout=2)

    assert http.request_json("GET", "/rest/api/2/myself") == {"path": "/rest/api/2/myself"}
    assert http.request_json("GET", "/x", params={"a": "b c"}) == {"path": "/x?a=b+c"}


def test_an_https_peer_with_a_certificate_nobody_trusts_is_refused(https_peer, monkeypatch):
    url, _ = https_peer
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    http = HttpClient("svc", url, connect_timeout=2, read_timeout=2)

    with pytest.raises(IntegrationError) as caught:
        http.request("GET", "/rest/api/2/myself")

    assert not isinstance(caught.value, OutcomeUnknown)  # nothing was sent
    assert "connection failed (SSLError)" in caught.value.message


class _TunnelProxy(_ThreadedPeer):
    """A forward proxy for ``CONNECT``: records each CONNECT line it gets, answers it and relays
    the bytes both ways to the host named; ``mute`` reads the CONNECT and never answers it."""

    def __init__(self, mute: bool = False):
        self.mute = mute
        self.connects: list[str] = []
        self.listen("tunnel-proxy")

    def _serve(self, client: socket.socket) -> None:
        with client:
            client.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head:
                if not (chunk := client.recv(4096)):
                    return
                head += chunk
            line = head.partition(b"\r\n")[0].decode()
            self.connects.append(line)
            if self.mute:
                while client.recv(4096):  # until the client gives up and closes
                    pass
                return
            host, _, port = line.split()[1].rpartition(":")
            with socket.create_connection((host, int(port)), timeout=5) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                threading.Thread(target=_relay, args=(upstream, client), daemon=True).start()
                _relay(client, upstream)


def _relay(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@pytest.fixture
def tunnel_factory(monkeypatch):
    """A ``_TunnelProxy`` named by ``HTTPS_PROXY`` for the clients the test makes next."""
    proxies: list[_TunnelProxy] = []
    for name in ("NO_PROXY", "no_proxy", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)

    def start(**options) -> _TunnelProxy:
        proxies.append(_TunnelProxy(**options))
        monkeypatch.setenv("HTTPS_PROXY", proxies[-1].url)
        return proxies[-1]

    yield start
    for proxy in proxies:
        proxy.close()


def test_an_https_peer_is_called_through_a_proxy_s_tunnel_kept_alive(https_peer, tunnel_factory,
                                                                      monkeypatch):
    url, cert = https_peer
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    proxy = tunnel_factory()
    http = HttpClient("svc", url, connect_timeout=2, read_timeout=2)

    assert http.request_json("GET", "/rest/api/2/myself") == {"path": "/rest/api/2/myself"}
    assert http.request_json("GET", "/x", params={"a": "b"}) == {"path": "/x?a=b"}

    port = url.rpartition(":")[2]
    assert proxy.connects == [f"CONNECT localhost:{port} HTTP/1.0"]  # one tunnel, kept alive


def test_a_proxy_that_never_answers_connect_is_a_connection_failure(tunnel_factory):
    # Nothing but the CONNECT left: the request itself was never sent.
    proxy = tunnel_factory(mute=True)
    http = HttpClient("svc", "https://jira.invalid", connect_timeout=0.3, read_timeout=2)

    with pytest.raises(IntegrationError) as caught:
        http.request("PUT", "/rest/api/2/issue/X-1/assignee", json={"accountId": "a"},
                     expected=(204,))

    assert not isinstance(caught.value, OutcomeUnknown)
    assert "connection failed (ConnectTimeout)" in caught.value.message
    assert proxy.connects == ["CONNECT jira.invalid:443 HTTP/1.0"]


def test_a_tls_handshake_that_never_ends_is_a_connection_failure(listener):
    # The peer accepts the connection but never answers the TLS hello: nothing was sent.
    http = HttpClient("svc", listener.url.replace("http://", "https://"), connect_timeout=0.3,
                      read_timeout=2)

    with pytest.raises(IntegrationError) as caught:
        http.request("PUT", "/rest/api/2/issue/X-1/assignee", json={"accountId": "a"},
                     expected=(204,))

    assert not isinstance(caught.value, OutcomeUnknown)
    assert "connection failed (ConnectTimeout)" in caught.value.message


def test_an_answer_cut_short_by_a_silent_peer_is_a_read_timeout():
    # The head of the answer came and its body stops halfway: the request was sent and maybe
    # acted on, so the outcome is unknown, not a failed connection.
    done = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server:

        def answer_half() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"half\":")
                done.wait(5)

        threading.Thread(target=answer_half, name="half-answer", daemon=True).start()
        http = HttpClient("svc", f"http://127.0.0.1:{server.getsockname()[1]}",
                          connect_timeout=1, read_timeout=0.3)
        try:
            with pytest.raises(IntegrationTimeout):
                http.request("GET", "/x")
        finally:
            done.set()


def test_the_send_guard_runs_on_https_calls_too(https_peer, monkeypatch):
    url, cert = https_peer
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    http = HttpClient("svc", url, connect_timeout=2, read_timeout=2)
    checks: list[int] = []

    assert guarded(lambda: checks.append(1), lambda: http.request_json("GET", "/x")) == {
        "path": "/x"}
    assert checks == [1]

    def refuse() -> None:
        raise LeaseLost("the lease ran out")

    with pytest.raises(LeaseLost):
        guarded(refuse, lambda: http.request("GET", "/y"))


def test_a_request_whose_write_times_out_is_a_read_timeout():
    # Part of the request had left when its write timed out: the peer may act on what it got
    # once it reads, so the outcome is unknown, not a failed connection.
    with socket.create_server(("127.0.0.1", 0)) as server:  # never accepts, never reads
        http = HttpClient("svc", f"http://127.0.0.1:{server.getsockname()[1]}",
                          connect_timeout=0.3, read_timeout=0.3)

        with pytest.raises(IntegrationTimeout):
            http.request("POST", "/rest/api/2/issue", json={"big": "x" * 16_000_000},
                         expected=(201,))
