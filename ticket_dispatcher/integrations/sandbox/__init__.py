"""The sandbox: Jira, Lark, Oncall and Core in memory, with the paths and JSON shapes of SPEC §11.

``serve --sandbox`` mounts it on the service's own Falcon app, points the clients at
``http://host:port/sandbox/{jira,lark,oncall,core}`` and loads ``ops/examples/`` into it, so a
newcomer can post a trigger and watch a dispatch without any credentials. ``/sandbox/_control``
shapes the fake world and shows what was sent (see ``control.py``).
"""

from __future__ import annotations

import falcon

from ticket_dispatcher.integrations.sandbox import control, core, jira, lark, oncall
from ticket_dispatcher.integrations.sandbox.base import ServiceError, handle_service_error
from ticket_dispatcher.integrations.sandbox.examples import (
    ExampleSummary,
    SeedSummary,
    load_examples,
    seed_store,
)
from ticket_dispatcher.integrations.sandbox.state import SandboxState

__all__ = [
    "ExampleSummary",
    "SandboxState",
    "SeedSummary",
    "load_examples",
    "mount_sandbox",
    "seed_store",
    "service_urls",
]

_SERVICE_ROUTES = {"jira": jira.routes, "lark": lark.routes, "oncall": oncall.routes,
                   "core": core.routes}


def mount_sandbox(app: falcon.App, state: SandboxState, prefix: str = "/sandbox") -> None:
    """Add the four fake services under ``{prefix}/{service}`` and the control API under
    ``{prefix}/_control``. Every resource declares PUBLIC roles for the API-key middleware;
    the fake services check their own fake credentials instead."""
    prefix = prefix.rstrip("/")
    # Fake-service errors keep the real service's shape, not the project's (SPEC §10).
    app.add_error_handler(ServiceError, handle_service_error)
    for service, routes in _SERVICE_ROUTES.items():
        for path, resource in routes(state):
            app.add_route(f"{prefix}/{service}{path}", resource)
    for path, resource in control.routes(state):
        app.add_route(f"{prefix}/_control{path}", resource)


def service_urls(base_url: str, prefix: str = "/sandbox") -> dict[str, str]:
    """The ``base_url`` of each client when the sandbox is mounted on ``base_url``."""
    root = base_url.rstrip("/") + "/" + prefix.strip("/")
    return {service: f"{root}/{service}" for service in _SERVICE_ROUTES}
