"""The transport under every API client: a request goes from a prepared URL to the peer's
socket and its whole answer comes back, or the failure says how far it got.

One ``requests`` session per client, built for its one base URL (proxies and CA bundle read from
the environment once), with requests' transport adapter sending through urllib3's public pool
API: connect and read timeouts on every call, no redirect followed, no cookie jar, urllib3's own
retries off, the answer read whole and decoded before the call returns. Each write of a request
to its socket runs the caller's ``send_guard`` first. A failure is the requests exception
requests' own adapter raises for it, and one that may have reached the peer (``AnswerLost``, a
read timeout) stays apart from one that did not (a refused connection, a connect timeout).
What a call is tried again after is the call policy's (``call_policy.py``); what its failure
means to the caller, the client's (``http.py``).
"""

from __future__ import annotations

import io
import os
import ssl
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from json import dumps as json_dumps
from typing import Any, cast
from urllib.parse import urlencode

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers, requote_uri
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, Timeout
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, ReadTimeoutError

# The caller's last word before a request leaves: ``actors/client_pool.py`` sets it to the
# caller's guard around a pooled call (an execution's lease check). Every write of a request to
# its socket, a token fetch or a retry after ``Retry-After`` included, runs it first; raising
# stops the request, and the connection is dropped. None: no check.
send_guard: ContextVar[Callable[[], None] | None] = ContextVar("send_guard", default=None)


class _GuardedSends:
    """A connection that runs the caller's ``send_guard`` right before each write to its socket:
    once the connection is open and the request is formatted, with nothing left to do but write
    it. A process paused before that line sends nothing once its lease has run out meanwhile;
    after the head of a request has left, a refused body leaves the peer a request cut short,
    which it does not act on.

    It also keeps what a timeout means exact, where urllib3 alone would blur it: a socket
    timeout while the connection opens (a TLS handshake, a proxy's answer to ``CONNECT``) is a
    connect timeout, since no byte of the request has left (urllib3 calls it a read timeout);
    one while a request is written is a read timeout, since part of it may have reached the
    peer (urllib3 calls it a broken connection)."""

    def connect(self) -> None:
        try:
            super().connect()  # type: ignore[misc]  # a mixin: the connection class is next
        except (TimeoutError, ReadTimeoutError) as exc:  # the latter: writing ``CONNECT``
            raise ConnectTimeoutError(self, f"the connection did not open in time ({exc})") \
                from None

    def send(self, data: Any) -> None:
        guard = send_guard.get()
        if guard is not None:
            if self.sock is None:  # type: ignore[attr-defined]  # the connection class's own
                self.connect()  # opened first, not after the check
            guard()
        try:
            super().send(data)  # type: ignore[misc]  # a mixin: the connection class is next
        except TimeoutError:
            raise ReadTimeoutError(None, None,  # type: ignore[arg-type]  # no pool at hand
                                   "the request's write timed out") from None


class _GuardedHTTPConnection(_GuardedSends, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedSends, HTTPSConnection):
    pass


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


# The pool manager's public table of pool classes, direct and through a proxy.
_GUARDED_POOLS = {"http": _GuardedHTTPPool, "https": _GuardedHTTPSPool}


class _Adapter(HTTPAdapter):
    """requests' transport adapter, on urllib3's public pool API.

    requests finds the connection pool of a request's origin (proxy, TLS settings, the pool
    manager's lookup), once per origin: a client calls one base URL with settings fixed when it
    starts. The request then goes through that pool's ``urlopen``, as ``HTTPAdapter.send`` sends
    it, but with no retry or redirect of urllib3's own and the answer read whole, and decoded
    (gzip, deflate), inside ``urlopen``: a failure while reading it is then the same failure as
    while waiting for it. What that keeps:

    - every write to a socket runs the caller's ``send_guard`` first (``_GuardedSends``);
    - no cookie jar: every call names its own credentials and no peer's session cookie is ever
      sent back;
    - the connect timeout bounds opening the connection (and a proxy's tunnel), the read timeout
      every wait for the answer;
    - a failure is the requests exception ``HTTPAdapter.send`` raises for it, so callers tell a
      connect timeout (nothing sent) from a read timeout (maybe acted on);
    - the body is read whole before ``send`` returns and the connection goes back to the pool;
      a connection that failed, or a refusal by the guard, is closed instead of reused.
    """

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _GUARDED_POOLS
        self._pools: dict[tuple, Any] = {}

    def get_connection_with_tls_context(self, request: requests.PreparedRequest, verify: Any,
                                        proxies: Any = None, cert: Any = None) -> Any:
        scheme, _, rest = str(request.url).partition("://")
        key = (scheme, rest.partition("/")[0], verify, cert)
        pool = self._pools.get(key)
        if pool is None:
            pool = super().get_connection_with_tls_context(request, verify, proxies, cert)
            self.cert_verify(pool, str(request.url), verify, cert)
            self._pools[key] = pool
        return pool

    def close(self) -> None:
        self._pools.clear()
        super().close()

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _GUARDED_POOLS
        return manager

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: Any = None, verify: Any = True, cert: Any = None,
             proxies: Any = None) -> requests.Response:
        connect_timeout, read_timeout = timeout
        pool = self.get_connection_with_tls_context(request, verify, proxies, cert)
        try:
            answer = pool.urlopen(
                request.method, self.request_url(request, proxies),  # the whole URL to a proxy
                body=request.body, headers=request.headers, retries=False, redirect=False,
                assert_same_host=False, preload_content=True, decode_content=True,
                timeout=Timeout(connect=connect_timeout, read=read_timeout))
        except Exception as exc:
            failure = _transport_failure(exc)
            if failure is None:
                raise  # not the transport's (a send guard's refusal): as it was raised
            raise failure(exc, request=request) from None
        response = requests.Response()
        response.status_code = answer.status
        response.headers = CaseInsensitiveDict(answer.headers)  # repeated fields joined by ", "
        response.encoding = get_encoding_from_headers(response.headers)
        response.reason = answer.reason
        response.raw = io.BytesIO(answer.data)
        response.url = str(request.url)
        response.request = request
        response.connection = self
        return response


class AnswerLost(requests.ConnectionError):
    """The connection broke once it was open, while the request was written or its answer
    read: the request may have reached the peer (a refused or unresolvable connection is a
    plain ``requests.ConnectionError``: nothing was sent)."""


def _transport_failure(exc: Exception) -> type[requests.RequestException] | None:
    """The requests exception ``HTTPAdapter.send`` raises for urllib3's ``exc`` (with retries
    off urllib3 raises the failure itself, not a ``MaxRetryError``), ``AnswerLost`` for a
    connection broken once open; None when ``exc`` is not a failure of the transport."""
    if isinstance(exc, urllib3.exceptions.ProxyError):  # before the proxy answered
        return requests.exceptions.ProxyError
    if isinstance(exc, ssl.SSLError | urllib3.exceptions.SSLError):
        return requests.exceptions.SSLError
    if isinstance(exc, urllib3.exceptions.NewConnectionError):  # refused, unresolvable…
        return requests.ConnectionError
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return requests.ConnectTimeout
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return requests.ReadTimeout
    if isinstance(exc, urllib3.exceptions.DecodeError):
        return requests.exceptions.ContentDecodingError
    if isinstance(exc, OSError | urllib3.exceptions.HTTPError):  # a broken connection…
        return AnswerLost
    return None


def _session_for(base_url: str) -> requests.Session:
    """A session that reads the proxy and CA-bundle environment once, for its one base URL.

    With ``trust_env`` requests reads them again on every call (environment scans, a netrc
    lookup, proxy bypass rules): CPU spent on every call, in the thread holding the interpreter
    lock, for an answer that does not change while the process runs. The variables mean the
    same (``HTTPS_PROXY``, ``NO_PROXY``, ``REQUESTS_CA_BUNDLE``…); a change takes effect at the
    next start. No netrc: every call names its own authentication. The headers are requests'
    defaults: its ``Accept-Encoding`` names the content codings urllib3 undoes (gzip and
    deflate; brotli and zstd too when their modules are installed).
    """
    session = requests.Session()
    session.trust_env = False
    for scheme in ("http://", "https://"):
        session.mount(scheme, _Adapter())
    session.proxies.update(requests.utils.get_environ_proxies(base_url))
    bundle = ca_bundle()
    if bundle:
        session.verify = bundle
    return session


def ca_bundle() -> str | None:
    """The CA bundle the environment names, as requests reads it (``REQUESTS_CA_BUNDLE``, else
    ``CURL_CA_BUNDLE``); None: the system's."""
    return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or None


class Sender:
    """Sends a request straight through the session's transport adapter (its keep-alive pool,
    proxies and CA bundle), without ``Session.request``'s per-call merging of settings, cookie jar
    and redirect handling, and without ``PreparedRequest.prepare``'s parsing of a URL this client
    built itself (``prepare_url``) and its empty cookie jar: work done again for every call to the
    same few URLs (bench/README.md, the diary's "the HTTP transport"). The base URL is prepared
    once, by requests; each call appends its path (quoted by ``segment``) and its query, and the
    whole is requoted as ``prepare_url`` would. An API answers where it is asked; a redirect is an
    unexpected status like any other, so credentials never follow one to another host. The body is
    read before the call returns, so the connection goes back to the pool and a read timeout raises
    here."""

    def __init__(self, base_url: str):
        self.session = _session_for(base_url)
        self._adapter = self.session.get_adapter(base_url)
        # cast: the session's headers are requests' defaults (User-Agent, Accept,
        # Accept-Encoding…), all text; types-requests allows bytes in any session's.
        self._headers = cast("dict[str, str]", dict(self.session.headers))
        verify = self.session.verify
        assert verify is not None, "requests' default, True, or the CA bundle _session_for set"
        self._verify = verify
        base = requests.PreparedRequest()
        base.prepare_url(base_url + "/", None)  # validated and normalized (IDNA, case)
        assert base.url is not None, "prepare_url sets the URL or raises"
        self._base = base.url.removesuffix("/")

    def send(self, method: str, path: str, *, params: Any, json: Any, auth: AuthBase,
             timeout: tuple[float, float]) -> requests.Response:
        prepared = requests.PreparedRequest()
        prepared.method = method
        query = _query(params)
        prepared.url = requote_uri(f"{self._base}{path}?{query}" if query else self._base + path)
        prepared.headers = CaseInsensitiveDict(self._headers)
        if json is not None:
            try:
                prepared.body = json_dumps(json, allow_nan=False).encode()
            except ValueError as exc:  # as requests has it: no NaN or infinity in JSON
                raise requests.exceptions.InvalidJSONError(exc, request=prepared) from None
            prepared.headers["Content-Type"] = "application/json"
        prepared.prepare_content_length(prepared.body)
        auth(prepared)
        response = self._adapter.send(prepared, timeout=timeout, verify=self._verify,
                                      proxies=self.session.proxies)
        response.content  # noqa: B018 - read the whole body now (``stream=False``)
        return response


def _query(params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> str:
    """``params`` as a query string, as requests encodes them: a list or tuple value repeats
    its key, and a None value is left out."""
    if not params:
        return ""
    items = params.items() if isinstance(params, Mapping) else params
    return urlencode([(key, value) for key, values in items
                      for value in (values if isinstance(values, list | tuple) else (values,))
                      if value is not None])
