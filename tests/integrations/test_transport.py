"""The transport under the clients: proxies, no cookies, the send guard, kept-alive
connections, compressed answers, what each timeout and broken connection means, TLS."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import ssl
import subprocess
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.peer import Answering, serving
from ticket_dispatcher.errors import IntegrationError, LeaseLost, OutcomeUnknown
from ticket_dispatcher.integrations.http import HttpClient, IntegrationTimeout
from ticket_dispatcher.integrations.transport import send_guard


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
