"""What every sandbox resource shares: reading a body, the fake services' own error shape,
injected faults, fake auth, and the marker that keeps them out of the API keys' way.

A fake service must answer like the real one, so its errors bypass the project's error shape
(``http/errors.py``): they are raised as ``ServiceError`` carrying the service's own body, and
``mount_sandbox`` installs a handler that writes that body verbatim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import falcon

from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.safejson import parse_json
from ticket_dispatcher.sandbox.traffic import Traffic

MAX_BODY_BYTES = 1024 * 1024

# No API key: the API-key middleware (http/auth.py) lets a method through whose declared role
# set is empty, as it does for /healthz. Every sandbox resource declares this for each method;
# the fake services check their own fake credentials instead (``guard``). Spelled here rather
# than imported so that the sandbox does not depend on the API's authentication.
PUBLIC: frozenset = frozenset()


def read_json_body(req: falcon.Request, refuse: Callable[[int, str], Exception]) -> Any:
    """The JSON body of at most ``MAX_BODY_BYTES``; ``refuse(status, message)`` builds the
    error for an empty (400), too large (413) or unreadable (400) one."""
    raw = req.bounded_stream.read(MAX_BODY_BYTES + 1)
    if not raw:
        raise refuse(400, "a JSON body is required")
    if len(raw) > MAX_BODY_BYTES:
        raise refuse(413, "the body is too large")
    try:
        return parse_json(raw)
    except InvalidInput:
        raise refuse(400, "the body is not valid JSON") from None


class ServiceError(Exception):
    """An answer in a fake service's own error shape."""

    def __init__(self, status: int, body: dict, headers: dict[str, str] | None = None):
        super().__init__(f"{status}")
        self.status = status
        self.body = body
        self.headers = dict(headers or {})


def handle_service_error(req: falcon.Request, resp: falcon.Response, exc: ServiceError,
                         params: dict) -> None:
    resp.status = falcon.code_to_http_status(exc.status)
    resp.media = exc.body
    for name, value in exc.headers.items():
        resp.set_header(name, value)


class ServiceResource:
    """Base of the fake services' resources: ``state`` is the service's own state; subclasses
    set ``service`` and ``roles`` and override ``error`` and ``authenticate``. Decorate each
    concrete class with ``@falcon.before(guard)``."""

    service: ClassVar[str] = ""
    roles: ClassVar[dict] = {}
    uses_database: ClassVar[bool] = False  # in-memory fakes (http/middleware.py)

    def __init__(self, state: Any, traffic: Traffic):
        self.state = state
        self.traffic = traffic

    def error(self, status: int, message: str,
              headers: dict[str, str] | None = None) -> ServiceError:
        raise NotImplementedError

    def authenticate(self, req: falcon.Request) -> None:
        """Raise the service's 401 when the fake credentials are missing."""

    def body(self, req: falcon.Request) -> Any:
        """The JSON body; anything unreadable is the service's own 400 (or 413)."""
        return read_json_body(req, self.error)


def guard(req: falcon.Request, resp: falcon.Response, resource: object,
          params: dict[str, Any]) -> None:
    """Before every fake-service responder: apply an injected fault, then check auth.

    Faults come first so that even the Lark token endpoint can be made slow or failing.
    Latency really sleeps (the sandbox only), outside any state lock.
    """
    if not isinstance(resource, ServiceResource):  # falcon types a hook's resource as object
        raise TypeError(f"guard decorates ServiceResource subclasses, not {resource!r}")
    traffic = resource.traffic
    fault = traffic.take_fault(resource.service, req.path)
    traffic.record_request(resource.service, req.method, req.path,
                           fault.status if fault else None)
    if fault is not None:
        if fault.latency_ms:
            traffic.sleep(fault.latency_ms / 1000)
        if fault.status is not None:
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
            raise resource.error(fault.status, f"injected fault: HTTP {fault.status}", headers)
    resource.authenticate(req)


def bearer_token(req: falcon.Request) -> str:
    """The token of an ``Authorization: Bearer …`` header, or ""."""
    scheme, _, token = (req.get_header("Authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class InternalServiceResource(ServiceResource):
    """Oncall and Core: our own internal services, ``{"error": message}`` errors and a Bearer
    token that must be present; the sandbox accepts any token."""

    def error(self, status: int, message: str,
              headers: dict[str, str] | None = None) -> ServiceError:
        return ServiceError(status, {"error": message}, headers)

    def authenticate(self, req: falcon.Request) -> None:
        if not bearer_token(req):
            raise self.error(401, "send Authorization: Bearer <token>")
