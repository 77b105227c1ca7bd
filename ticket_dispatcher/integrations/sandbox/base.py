"""What every fake service resource shares: its own error shape, injected faults, fake auth.

A fake service must answer like the real one, so its errors bypass the project's error shape
(SPEC §10): they are raised as ``ServiceError`` carrying the service's own body, and
``mount_sandbox`` installs a handler that writes that body verbatim.
"""

from __future__ import annotations

from typing import Any, ClassVar

import falcon

from ticket_dispatcher.errors import InvalidInput
from ticket_dispatcher.integrations.sandbox.state import SandboxState
from ticket_dispatcher.safejson import parse_json

MAX_BODY_BYTES = 1024 * 1024


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
    """Base of the fake services' resources; subclasses set ``service`` and ``roles`` and
    override ``error`` and ``authenticate``. Decorate each concrete class with
    ``@falcon.before(guard)``."""

    service: ClassVar[str] = ""
    roles: ClassVar[dict] = {}
    uses_database: ClassVar[bool] = False  # in-memory fakes (http/middleware.py)

    def __init__(self, state: SandboxState):
        self.state = state

    def error(self, status: int, message: str,
              headers: dict[str, str] | None = None) -> ServiceError:
        raise NotImplementedError

    def authenticate(self, req: falcon.Request) -> None:
        """Raise the service's 401 when the fake credentials are missing."""

    def body(self, req: falcon.Request) -> Any:
        """The JSON body; anything unreadable is the service's own 400."""
        raw = req.bounded_stream.read(MAX_BODY_BYTES + 1)
        if not raw:
            raise self.error(400, "a JSON body is required")
        if len(raw) > MAX_BODY_BYTES:
            raise self.error(413, "the body is too large")
        try:
            return parse_json(raw)
        except InvalidInput:
            raise self.error(400, "the body is not valid JSON") from None


def guard(req: falcon.Request, resp: falcon.Response, resource: ServiceResource,
          params: dict) -> None:
    """Before every fake-service responder: apply an injected fault, then check auth.

    Faults come first so that even the Lark token endpoint can be made slow or failing.
    Latency really sleeps (the sandbox only), outside the state lock.
    """
    state = resource.state
    fault = state.take_fault(resource.service, req.path)
    state.record_request(resource.service, req.method, req.path,
                         fault.status if fault else None)
    if fault is not None:
        if fault.latency_ms:
            state.sleep(fault.latency_ms / 1000)
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
    token that must be present (SPEC §11); the sandbox accepts any token."""

    def error(self, status: int, message: str,
              headers: dict[str, str] | None = None) -> ServiceError:
        return ServiceError(status, {"error": message}, headers)

    def authenticate(self, req: falcon.Request) -> None:
        if not bearer_token(req):
            raise self.error(401, "send Authorization: Bearer <token>")
