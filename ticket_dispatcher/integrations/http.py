"""The one HTTP session helper every integration client uses.

One ``requests`` connection pool per instance (each client actor owns one), connect/read
timeouts on every call, no redirects followed, bounded ``Retry-After`` handling for 429 and
503, and one way to turn a failure into an ``IntegrationError`` whose message is safe to log:
service, method, path, HTTP status and the service's own error text (truncated and redacted) —
never a header, token or request body.
"""

from __future__ import annotations

import io
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from json import dumps as json_dumps
from typing import Any, cast
from urllib.parse import quote, urlencode

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase, HTTPBasicAuth
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers, requote_uri
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, Timeout
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, ReadTimeoutError

from ticket_dispatcher.clock import Clock, SystemClock
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown
from ticket_dispatcher.logging import Redactor

log = logging.getLogger(__name__)

DETAIL_LIMIT = 200  # characters of a service's error text kept in a message
RETRY_STATUSES = frozenset({429, 503})  # these honour Retry-After
# The longest wait a Retry-After is taken for: a longer one (a misconfigured proxy, a date in a
# far year) is shortened to it, and the call is tried again then, rather than holding every
# call of the process back until a restart.
MAX_RETRY_AFTER = 600.0
# Methods that only read: repeated after a 503 within the call. A write answered 503 may have
# been applied, so it goes back to its caller, which reads before it writes again.
READS = frozenset({"GET", "HEAD", "OPTIONS"})
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")  # Retry-After's delta-seconds


class IntegrationTimeout(OutcomeUnknown):
    """The request was sent but its answer did not come within the read timeout (``status`` is
    None). Whether the remote side acted is unknown: an Oncall page records ``unknown``,
    ``assign`` re-reads the issue (docs/design.md, "Checkpoints and at-most-once"). A *connect*
    timeout is no such thing: the request never reached the peer, so it is a plain
    ``IntegrationError``."""

    timeout = True


class IntegrationLost(OutcomeUnknown):
    """The connection broke after the request was written (reset, closed before the answer):
    as with a read timeout, the remote side may have acted (``status`` is None)."""

    timeout = False


class IntegrationRejected(IntegrationError):
    """The service answered, but not with success: ``status`` is its HTTP status, ``code`` its
    own error code when it gave one (Lark ``code``), ``detail`` its safe, truncated error text."""

    timeout = False

    def __init__(self, message: str, status: int | None = None, service: str = "",
                 code: Any = None, detail: str = "", *, retry_after: float | None = None):
        super().__init__(message, status=status, service=service, retry_after=retry_after)
        self.code = code
        self.detail = detail


class RateGate:
    """A service's rate limit, shared by every client of it in the process: once one call was
    answered 429 with ``Retry-After``, every call waits until that time has passed instead of
    spending more of a limit the service shares with every other tool that calls it.
    ``on_limited`` is told the seconds each 429 adds to the time held back (a metric)."""

    def __init__(self, clock: Clock, on_limited: Callable[[float], None] | None = None):
        self._clock = clock
        self._on_limited = on_limited
        self._lock = threading.Lock()
        self._until: datetime | None = None

    def limit(self, seconds: float) -> None:
        """The service asked to wait ``seconds`` from now."""
        now: datetime = self._clock.now()
        until = now + timedelta(seconds=seconds)
        with self._lock:
            start = max(now, self._until) if self._until is not None else now
            added = (until - start).total_seconds()
            if added > 0:
                self._until = until
        if added > 0 and self._on_limited is not None:
            self._on_limited(added)

    def remaining(self) -> float:
        """Seconds until calls may go again; 0 when they may now."""
        with self._lock:
            until = self._until
        if until is None:
            return 0.0
        return max(0.0, (until - self._clock.now()).total_seconds())


def segment(value: str) -> str:
    """A URL path segment: issue keys, team and group names, emails (``@`` is a legal pchar)."""
    return quote(str(value), safe="@")


class BearerAuth(AuthBase):
    """``Authorization: Bearer <token>`` (Oncall, Core); its repr never shows the token."""

    def __init__(self, token: str):
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:
        return "BearerAuth(***)"


class _HeaderAuth(AuthBase):
    """Headers from a callable, computed per request (Lark's tenant token changes)."""

    def __init__(self, headers: Callable[[], Mapping[str, str]]):
        self._headers = headers

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers.update(self._headers())
        return request


class _NoAuth(AuthBase):
    """An explicit "no credentials": the request goes as it is."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        return request


Auth = AuthBase | tuple[str, str] | Callable[[], Mapping[str, str]] | None


def _as_auth(auth: Auth) -> AuthBase:
    if auth is None:
        return _NoAuth()
    if isinstance(auth, tuple):
        return HTTPBasicAuth(*auth)
    if isinstance(auth, AuthBase):
        return auth
    return _HeaderAuth(auth)


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
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    return session


class _Sender:
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


class HttpClient:
    def __init__(
        self,
        service: str,
        base_url: str,
        *,
        auth: Auth = None,
        connect_timeout: float = 3,
        read_timeout: float = 10,
        max_retry_wait: float = 10,
        max_retries: int = 2,
        sleep: Callable[[float], None] = time.sleep,
        clock: Clock | None = None,
        secrets: Iterable[str] = (),
        gate: RateGate | None = None,
    ):
        """``gate``: shared by the clients of one service in the process, so that a 429 one
        of them was answered holds back the calls of all (``RateGate``)."""
        self.service = service
        self.base_url = base_url.rstrip("/")
        self.timeout = (connect_timeout, read_timeout)
        self.max_retry_wait = max_retry_wait
        self.max_retries = max_retries
        self.last_latency_ms: float | None = None
        self._auth = _as_auth(auth)
        self._sleep = sleep
        self._clock = clock or SystemClock()
        self._secrets = {s for s in secrets if s}
        self._sender = _Sender(self.base_url)
        self._gate = gate

    def add_secret(self, value: str) -> None:
        """Mask ``value`` in every later error message (e.g. a freshly fetched token)."""
        if value:
            self._secrets.add(value)

    def close(self) -> None:
        self._sender.session.close()

    # --- calls ------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        expected: Iterable[int] = (200,),
        authenticate: bool = True,
        repeatable: bool | None = None,
    ) -> requests.Response:
        """One call, retried only on 429 (the service refused it) or, when it is
        ``repeatable``, on 503, each with an acceptable ``Retry-After``; any other outcome than
        an ``expected`` status raises an ``IntegrationError``. ``repeatable``: the call only
        reads (by default, a ``READS`` method), so a 503 that may have come after the service
        acted costs nothing to repeat. While the service's rate limit holds (``RateGate``),
        the call waits it out first when the wait is short, and is refused unsent when it is
        not, with the wait in ``retry_after``."""
        expected = tuple(expected)
        repeatable = method in READS if repeatable is None else repeatable
        retries = 0
        asked = False  # this call's own 429 closed the gate: its wait is that retry's
        while True:
            held = self._gate.remaining() if self._gate is not None else 0.0
            if held > 0:
                if held > self.max_retry_wait or (retries >= self.max_retries and not asked):
                    raise self.rate_limited(method, path, held)
                retries += 0 if asked else 1
                asked = False
                self._sleep(held)
                continue
            asked = False
            response = self._send(method, path, params, json, authenticate)
            if response.status_code in expected:
                return response
            wait = self._retry_wait(response) if response.status_code in RETRY_STATUSES else None
            if response.status_code == 429 and wait is not None and self._gate is not None:
                self._gate.limit(wait)
            if (wait is None or wait > self.max_retry_wait or retries >= self.max_retries
                    or (response.status_code != 429 and not repeatable)):
                raise self.rejected(method, path, response, retry_after=wait)
            retries += 1
            log.info("%s %s %s: HTTP %s, retry %d after %.1f s", self.service, method, path,
                     response.status_code, retries, wait)
            if response.status_code != 429 or self._gate is None:
                self._sleep(wait)
            else:
                asked = True  # the gate's wait, at the top of the loop

    def request_json(self, method: str, path: str, **kwargs: Any) -> Any:
        """``request`` and the answer's JSON; a body that is not JSON is an error."""
        response = self.request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise IntegrationRejected(
                f"{self.service} {method} {path}: the answer is not JSON "
                f"(HTTP {response.status_code})",
                status=response.status_code, service=self.service) from None

    def _send(self, method: str, path: str, params: Any, json: Any,
              authenticate: bool) -> requests.Response:
        started = time.monotonic()
        status: int | None = None
        try:
            response = self._sender.send(
                method, path, params=params, json=json, timeout=self.timeout,
                auth=self._auth if authenticate else _NoAuth())
            status = response.status_code
            return response
        except requests.ConnectTimeout:
            # Before ``Timeout``: ConnectTimeout is both a ConnectionError and a Timeout, and the
            # request never left, so nothing can have happened at the peer.
            raise IntegrationError(
                f"{self.service} {method} {path}: connection failed (ConnectTimeout)",
                service=self.service) from None
        except requests.Timeout:  # a read timeout: sent, and maybe acted on
            raise IntegrationTimeout(
                f"{self.service} {method} {path}: no answer within the read timeout; the "
                f"outcome is unknown", service=self.service) from None
        except AnswerLost:  # sent, or partly: maybe acted on
            raise IntegrationLost(
                f"{self.service} {method} {path}: the connection broke before the answer "
                f"came; the outcome is unknown", service=self.service) from None
        except requests.exceptions.ContentDecodingError:  # answered: it was received
            raise IntegrationLost(
                f"{self.service} {method} {path}: the answer could not be decoded "
                f"(ContentDecodingError); the outcome is unknown", service=self.service) \
                from None
        except requests.RequestException as exc:
            # The class name only: requests' own text can carry the full URL.
            raise IntegrationError(
                f"{self.service} {method} {path}: connection failed ({type(exc).__name__})",
                service=self.service) from None
        finally:
            self.last_latency_ms = round((time.monotonic() - started) * 1000, 1)
            # Never headers or bodies: they may hold tokens or phone numbers.
            log.debug("%s %s %s -> %s in %s ms", self.service, method, path, status,
                      self.last_latency_ms)

    def _retry_wait(self, response: requests.Response) -> float | None:
        """Seconds to wait from ``Retry-After``, at most ``MAX_RETRY_AFTER``; None when it is
        missing or neither seconds (digits, a fraction allowed) nor an HTTP date."""
        value = (response.headers.get("Retry-After") or "").strip()
        if not value:
            return None
        if _SECONDS.fullmatch(value):
            return min(float(value), MAX_RETRY_AFTER)  # a run of digits past a float: inf
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        now: datetime = self._clock.now()
        return min(max(0.0, (when - now).total_seconds()), MAX_RETRY_AFTER)

    # --- errors -----------------------------------------------------------------------------

    def rejected(self, method: str, path: str, response: requests.Response, *,
                 retry_after: float | None = None) -> IntegrationRejected:
        """The error for an unexpected HTTP status, with the service's own error text."""
        code, detail = _service_error(response)
        return self.failure(method, path, response.status_code, detail, code,
                            retry_after=retry_after)

    def rate_limited(self, method: str, path: str, wait: float) -> IntegrationRejected:
        """The call was not sent: the service's rate limit holds for ``wait`` seconds more."""
        return IntegrationRejected(
            f"{self.service} {method} {path} not sent: HTTP 429 rate limit, {wait:.0f} s "
            f"left of the wait the service asked for", status=429, service=self.service,
            retry_after=wait)

    def failure(self, method: str, path: str, status: int | None, detail: str = "",
                code: Any = None, *, retry_after: float | None = None) -> IntegrationRejected:
        """An ``IntegrationRejected`` with a safe message (also used for Lark envelopes)."""
        detail = self.safe(detail)
        text = f"{self.service} {method} {path} failed: HTTP {status}"
        if code is not None:
            text += f", code {code}"
        if detail:
            text += f": {detail}"
        return IntegrationRejected(text, status=status, service=self.service, code=code,
                                   detail=detail, retry_after=retry_after)

    def safe(self, text: str) -> str:
        """Secrets, credentials and phone numbers masked, then truncated: cut first, a secret
        or a number across the cut would survive in part, past any later redaction."""
        text = Redactor(self._secrets).text(" ".join(str(text).split()))
        if len(text) > DETAIL_LIMIT:
            text = text[:DETAIL_LIMIT] + "…"
        return text


def _service_error(response: requests.Response) -> tuple[Any, str]:
    """``(code, text)`` from the services' JSON error shapes; a non-JSON body gives no text,
    since an HTML error page may echo anything."""
    try:
        body = response.json()
    except ValueError:
        return None, ""
    if isinstance(body, list):
        return None, "; ".join(str(item) for item in body)
    if not isinstance(body, dict):
        return None, ""
    code = body.get("code")
    parts: list[str] = []
    messages = body.get("errorMessages")  # Jira
    if isinstance(messages, list):
        parts.extend(str(m) for m in messages)
    errors = body.get("errors")  # Jira: {field: message}
    if isinstance(errors, dict):
        parts.extend(f"{field}: {message}" for field, message in errors.items())
    for key in ("msg", "message", "error", "call_error", "detail", "title"):  # Lark, others
        if isinstance(body.get(key), str) and body[key]:
            parts.append(body[key])
            break
    return code, "; ".join(parts)


class BearerServiceClient:
    """The shape shared by the internal services (Oncall, Core): Bearer auth with a static
    token, one ``HttpClient``, and lists of people keyed by email in their answers."""

    SERVICE = ""

    def __init__(self, base_url: str, token: str, *, connect_timeout: float = 3,
                 read_timeout: float = 10, sleep: Callable[[float], None] = time.sleep,
                 clock: Clock | None = None):
        self.http = HttpClient(
            self.SERVICE, base_url, auth=BearerAuth(token), connect_timeout=connect_timeout,
            read_timeout=read_timeout, sleep=sleep, clock=clock, secrets=(token,))

    def close(self) -> None:
        self.http.close()

    def people(self, path: str, key: str) -> list[dict]:
        """The objects of list ``key`` in the answer to ``GET path`` that carry an email."""
        body = self.http.request_json("GET", path)
        raw = body.get(key) if isinstance(body, dict) else None
        if not isinstance(raw, list):
            raise IntegrationError(f"{self.SERVICE} GET {path}: the answer has no {key} list",
                                   status=200, service=self.SERVICE)
        return [item for item in raw
                if isinstance(item, dict) and isinstance(item.get("email"), str)
                and item["email"].strip()]
