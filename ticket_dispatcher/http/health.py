"""Liveness, readiness, the Prometheus exposition and the options whitelist."""

from __future__ import annotations

import falcon

from ticket_dispatcher.domain import catalog
from ticket_dispatcher.http.auth import PUBLIC, VIEWER
from ticket_dispatcher.http.services import Services


class Liveness:
    roles = {"GET": PUBLIC}
    uses_database = False  # answers while every connection is busy (http/middleware.py)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"status": "ok"}


class Readiness:
    """Ready = the database answers, boot recovery has finished and no shutdown has begun.

    ``store.ping()`` never hangs: it is bounded by the store's timeouts (connect_timeout on
    PostgreSQL, busy_timeout for a SQLite write lock, pool_wait for a free connection)."""

    roles = {"GET": PUBLIC}
    # ``ping`` takes its own connection and reports a failure as not ready, where the
    # middleware would answer a bare 503 without the checks.
    uses_database = False

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        checks = {
            "database": self._services.store.ping(),
            "recovery": self._services.recovery_done(),
            # false from SIGTERM on: a replica in shared mode drains before it stops
            "running": not self._services.draining(),
        }
        ready = all(checks.values())
        resp.status = falcon.HTTP_200 if ready else falcon.HTTP_503
        resp.media = {"status": "ready" if ready else "not_ready", "checks": checks}


class MetricsExposition:
    """``GET /metrics`` (docs/operations.md, "Metrics"): prometheus-client's text format.
    Public unless ``auth.metrics_public`` is false, then a viewer (or operator) key."""

    uses_database = False  # gauges are sampled by the backlog job, never at scrape time

    def __init__(self, services: Services) -> None:
        self._services = services
        self.roles = {"GET": PUBLIC if services.config.auth.metrics_public else VIEWER}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        body, content_type = self._services.metrics.exposition()
        resp.data = body
        resp.content_type = content_type


class Options:
    """The whitelist, with only the action types this build can run."""

    roles = {"GET": VIEWER}
    uses_database = False  # the catalog and the registry are code, not data

    def __init__(self, services: Services) -> None:
        self._services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = catalog.options(self._services.registry.types())
