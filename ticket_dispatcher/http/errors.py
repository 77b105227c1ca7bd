"""One error shape for every failure.

``{"code", "title", "description", "errors"}``; domain errors map to one status each, falcon's own
errors (404 route, 405, 415 …) are reshaped, and anything unexpected becomes a logged 500 with no
detail, never a stack trace. A database that cannot answer (``StoreUnavailable``, from any
handler or the request's connection) is a 503 with ``Retry-After``: the client may retry, and
nothing of the refused request was stored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import falcon

from ticket_dispatcher.errors import (
    Conflict,
    DispatcherError,
    InvalidInput,
    NotFound,
    PolicyInvalid,
    Problem,
    RuntimeUnavailable,
    StoreUnavailable,
)

log = logging.getLogger(__name__)

_STATUS_CODES = {
    400: "validation_failed",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    411: "length_required",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "policy_invalid",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
}

_DOMAIN_STATUS = (
    (InvalidInput, falcon.HTTP_400),
    (NotFound, falcon.HTTP_404),
    (Conflict, falcon.HTTP_409),
    (PolicyInvalid, falcon.HTTP_422),
    (StoreUnavailable, falcon.HTTP_503),
    (RuntimeUnavailable, falcon.HTTP_503),
)
# Seconds a client should wait before retrying while the database is unavailable: outages
# this short are the common ones (a lock held by a slow writer, a restarted connection).
RETRY_AFTER_SECONDS = "2"


class ApiError(falcon.HTTPError):
    """A falcon error that carries our list of problems."""

    def __init__(self, status: str, description: str, problems: Iterable[Problem] = (),
                 headers: dict[str, str] | None = None):
        super().__init__(status, title=status.split(" ", 1)[1], description=description,
                         headers=headers)
        self.problems = [p.to_json() for p in problems]


def _body(status_code: int, title: str, description: str | None, errors: list) -> dict:
    return {
        "code": _STATUS_CODES.get(status_code, "error"),
        "title": title,
        "description": description or "",
        "errors": errors,
    }


def serialize_error(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
    resp.content_type = falcon.MEDIA_JSON
    resp.media = _body(
        exc.status_code, _title(exc), exc.description, getattr(exc, "problems", [])
    )


def _title(exc: falcon.HTTPError) -> str:
    """The status's phrase, as every error of this API titles it: falcon's own errors (a route
    that does not exist, a method it does not take) default to the whole status line."""
    title = exc.title or ""
    code, _, phrase = title.partition(" ")
    return phrase if code == str(exc.status_code) and phrase else title


def handle_dispatcher_error(req: falcon.Request, resp: falcon.Response, exc: DispatcherError,
                            params: dict[str, Any]) -> None:
    for cls, status in _DOMAIN_STATUS:
        if isinstance(exc, cls):
            headers = ({"Retry-After": RETRY_AFTER_SECONDS}
                       if isinstance(exc, (StoreUnavailable, RuntimeUnavailable)) else None)
            raise ApiError(status, exc.message, exc.problems, headers=headers)
    raise ApiError(falcon.HTTP_400, exc.message, exc.problems)


def handle_unexpected(req: falcon.Request, resp: falcon.Response, exc: Exception,
                      params: dict[str, Any]) -> None:
    if isinstance(exc, falcon.HTTPError):  # falcon's own, already shaped by serialize_error
        raise exc
    log.exception("unhandled error in %s %s", req.method, req.path)
    raise ApiError(falcon.HTTP_500, "the server failed; the error has been logged")


def install(app: falcon.App) -> None:
    # Falcon consults handlers most-specific first, so order of registration does not matter.
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(DispatcherError, handle_dispatcher_error)
    app.set_error_serializer(serialize_error)
