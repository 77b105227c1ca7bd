"""Liveness, readiness and the options whitelist."""

from __future__ import annotations

import falcon

from ticket_dispatcher.domain import catalog
from ticket_dispatcher.http.auth import PUBLIC, VIEWER


class Liveness:
    roles = {"GET": PUBLIC}

    def on_get(self, req, resp) -> None:
        resp.media = {"status": "ok"}


class Readiness:
    """Ready = the database answers and boot recovery has finished (SPEC §10)."""

    roles = {"GET": PUBLIC}

    def __init__(self, services):
        self._services = services

    def on_get(self, req, resp) -> None:
        checks = {
            "database": self._services.store.ping(),
            "recovery": self._services.recovery_done(),
        }
        ready = all(checks.values())
        resp.status = falcon.HTTP_200 if ready else falcon.HTTP_503
        resp.media = {"status": "ready" if ready else "not_ready", "checks": checks}


class Options:
    roles = {"GET": VIEWER}

    def on_get(self, req, resp) -> None:
        resp.media = catalog.options()
