"""The base of every API client: one ``HttpClient`` per client instance (each client actor
owns one) calls its service through the transport (``transport.py``) under the call policy
(``call_policy.py``), and turns every failure into an ``IntegrationError`` whose message is
safe to log: service, method, path, HTTP status and the service's own error text (truncated
and redacted), never a header, token or request body. What the failure means to the caller is
``errors.fault_of``'s to say (docs/design.md, "Passing faults").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

import requests
from requests.auth import AuthBase, HTTPBasicAuth

from ticket_dispatcher.clock import Clock, SystemClock
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown
from ticket_dispatcher.integrations.call_policy import READS, CallPolicy, HeldBack, RateGate
from ticket_dispatcher.integrations.transport import AnswerLost, Sender
from ticket_dispatcher.logging import Redactor

log = logging.getLogger(__name__)

DETAIL_LIMIT = 200  # characters of a service's error text kept in a message


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


class HttpClient:
    """One client's calls to its service at ``base_url``: each ends in an answer of an expected
    status or in an ``IntegrationError``."""

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
        """``max_retry_wait``, ``max_retries`` and ``gate``: the call policy (``CallPolicy``);
        ``gate`` is shared by the clients of one service in the process, so that a 429 one of
        them was answered holds back the calls of its scope in all (``RateGate``)."""
        self.service = service
        self.base_url = base_url.rstrip("/")
        self.timeout = (connect_timeout, read_timeout)
        self.last_latency_ms: float | None = None
        self._auth = _as_auth(auth)
        self._secrets = {s for s in secrets if s}
        self._sender = Sender(self.base_url)
        self._policy = CallPolicy(max_retry_wait=max_retry_wait, max_retries=max_retries,
                                  sleep=sleep, clock=clock or SystemClock(), gate=gate)

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
        """One call, tried again inside itself as the call policy says (``CallPolicy.run``:
        after a 429, or when it is ``repeatable`` after a 503, each with an acceptable
        ``Retry-After``); any other outcome than an ``expected`` status raises an
        ``IntegrationError``. ``repeatable``: the call only reads (by default, a ``READS``
        method), so a 503 that may have come after the service acted costs nothing to repeat.
        A call the service's rate limit held back is refused unsent (``held_unsent``), with
        the wait in ``retry_after``."""
        expected = tuple(expected)
        tried = self._policy.run(
            lambda: self._send(method, path, params, json, authenticate), expected=expected,
            repeatable=method in READS if repeatable is None else repeatable,
            name=f"{self.service} {method} {path}", method=method, path=path)
        if isinstance(tried, HeldBack):
            raise self.held_unsent(method, path, tried.wait, budget=tried.budget)
        if tried.response.status_code in expected:
            return tried.response
        raise self.rejected(method, path, tried.response, retry_after=tried.retry_after)

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

    # --- errors -----------------------------------------------------------------------------

    def rejected(self, method: str, path: str, response: requests.Response, *,
                 retry_after: float | None = None) -> IntegrationRejected:
        """The error for an unexpected HTTP status, with the service's own error text."""
        code, detail = _service_error(response)
        return self.failure(method, path, response.status_code, detail, code,
                            retry_after=retry_after)

    def held_unsent(self, method: str, path: str, wait: float, *,
                    budget: bool = False) -> IntegrationRejected:
        """The call was not sent: the service's rate limit holds for ``wait`` seconds more, or
        (``budget``) the budget of calls a second has no slot for it within ``wait``. A 429 of
        its own (``errors.fault_of``: held by a limit), though no request left."""
        why = (f"the budget of calls a second has no slot within {wait:.0f} s" if budget else
               f"{wait:.0f} s left of the wait the service asked for")
        return IntegrationRejected(
            f"{self.service} {method} {path} not sent: HTTP 429 rate limit, {why}", status=429,
            service=self.service, retry_after=wait)

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
