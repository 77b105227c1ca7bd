"""One database connection per HTTP request: connections have one owner.

``DatabaseConnection`` takes the request thread's connection from the pool once the request is
routed and authorised, and returns it when the response is ready, whether the handler succeeded
or raised. The repositories' own ``unit_of_work`` then reuses it, so a request costs one pool
check-out however many repository calls it makes.

Only routed resources take one (``process_resource`` is not called for an unrouted request),
and a resource that declares ``uses_database = False`` never does: ``/healthz`` must answer
while every connection is busy, and a resource that takes its connection later
(``Store.connection()``) declares it too. Register it after ``ApiKeyAuth``: falcon calls
``process_resource`` in registration order and stops at the first that raises, so a request
refused by authentication takes no connection. ``process_response`` runs for every middleware
(falcon's default ``independent_middleware``), in reverse order; it returns only what is open.

When no connection can be had (the pool stayed empty for its whole wait, the server refused or
is unreachable), the store raises ``StoreUnavailable``, which the error handlers answer with a
503 and ``Retry-After`` (``http/errors.py``); the store's health logs the outage, once.
A connection the driver found lost during the request is discarded, not pooled again.
"""

from __future__ import annotations

from typing import Any

import falcon

from ticket_dispatcher.store import Store


def uses_database(resource: object) -> bool:
    """Whether requests to ``resource`` take a connection (the default) or not."""
    return getattr(resource, "uses_database", True)


class DatabaseConnection:
    """Falcon middleware: the request's connection, opened late and always returned."""

    def __init__(self, store: Store):
        self._store = store

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         params: dict[str, Any]) -> None:
        if resource is None or not uses_database(resource):
            return
        self._store.checkout()

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         req_succeeded: bool) -> None:
        self._store.checkin()  # closes only what is open: a refused request took nothing


class PrivateAnswers:
    """Falcon middleware: an answer is never to be sniffed for another type than it says, nor
    kept by a cache, unless its resource said otherwise: API answers hold what an
    authenticated reader was shown. The console adds its own policy to its pages."""

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: object,
                         req_succeeded: bool) -> None:
        if resp.get_header("X-Content-Type-Options") is None:
            resp.set_header("X-Content-Type-Options", "nosniff")
        if resp.get_header("Cache-Control") is None:
            resp.set_header("Cache-Control", "no-store")
