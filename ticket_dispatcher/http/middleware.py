"""One database connection per HTTP request (issue 7, part 3: connections have one owner).

``DatabaseConnection`` takes the request thread's connection from the pool once the request is
routed and authorised, and returns it when the response is ready, whether the handler succeeded
or raised. The repositories' own ``unit_of_work`` then reuses it, so a request costs one pool
check-out however many repository calls it makes.

Only routed resources take one (``process_resource`` is not called for an unrouted request),
and a resource that declares ``uses_database = False`` never does: ``/healthz`` must answer
while every connection is busy. Register it after ``ApiKeyAuth``: falcon calls
``process_resource`` in registration order and stops at the first that raises, so a request
refused by authentication takes no connection. ``process_response`` runs for every middleware
(falcon's default ``independent_middleware``), in reverse order; it closes only what is open.
"""

from __future__ import annotations

import logging

import falcon
import peewee
from playhouse.pool import MaxConnectionsExceeded

from ticket_dispatcher.http.errors import ApiError

log = logging.getLogger(__name__)

# Seconds a client should wait before retrying when no connection could be had.
RETRY_AFTER_SECONDS = "1"


def uses_database(resource: object) -> bool:
    """Whether requests to ``resource`` take a connection (the default) or not."""
    return getattr(resource, "uses_database", True)


class DatabaseConnection:
    """Falcon middleware: the request's connection, opened late and always returned."""

    def __init__(self, db: peewee.Database):
        self._db = db

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource,
                         params) -> None:
        if resource is None or not uses_database(resource):
            return
        try:
            self._db.connect(reuse_if_open=True)
        except (MaxConnectionsExceeded, peewee.OperationalError) as exc:
            # The pool stayed empty for its whole wait, or the server refused: a retryable
            # 503, not a logged 500 (the exception text may name the host; only its type).
            log.warning("no database connection for %s %s: %s", req.method, req.path,
                        type(exc).__name__)
            raise ApiError(falcon.HTTP_503, "the database is not available; retry later",
                           headers={"Retry-After": RETRY_AFTER_SECONDS}) from None

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource,
                         req_succeeded: bool) -> None:
        if not self._db.is_closed():
            self._db.close()  # a pooled database returns the connection to its pool
