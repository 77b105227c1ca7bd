"""The sandbox: Jira, Lark, Oncall and Core in memory, with the paths and JSON shapes the real
clients (``integrations/``) call.

Its own wing, wired only by the service: ``serve --sandbox`` mounts it on the service's Falcon
app, points the clients at ``http://host:port/sandbox/{jira,lark,oncall,core}`` and loads
``ops/examples/sandbox.json`` into it, so a newcomer can post a trigger and watch a dispatch
without any credentials. ``/sandbox/_control`` shapes the fake world and shows what was sent
(``control.py``).

| module | what |
| --- | --- |
| ``world.py`` | ``Sandbox``: the four states below over one directory, and the traffic |
| ``people.py`` | the directory of people the four services share |
| ``jira.py``, ``lark.py``, ``oncall.py``, ``core.py`` | each service's state and resources |
| ``jira_webhooks.py`` | the fake Jira's admin webhooks (``jira webhook register``) |
| ``traffic.py`` | injected faults and the request log |
| ``base.py`` | what the resources share: errors, fault guard, fake auth |
| ``control.py`` | the control API and its parsers |
| ``examples.py`` | loading ``sandbox.json`` |
"""

from __future__ import annotations

import falcon

from ticket_dispatcher.sandbox import control, core, jira, jira_webhooks, lark, oncall
from ticket_dispatcher.sandbox.base import ServiceError, handle_service_error
from ticket_dispatcher.sandbox.examples import ExampleSummary, load_examples
from ticket_dispatcher.sandbox.traffic import SERVICES
from ticket_dispatcher.sandbox.world import Sandbox

__all__ = ["LARK_VERIFICATION_TOKEN", "WEBHOOK_SECRET", "ExampleSummary", "Sandbox",
           "load_examples", "mount_sandbox", "service_urls"]

PREFIX = "/sandbox"
# What ``serve --sandbox`` signs Jira webhooks with when ``jira.webhook_secrets`` names none, so
# a newcomer can post a signed delivery (README, "Try it"). Public: the sandbox is local.
WEBHOOK_SECRET = "sandbox-webhook-secret"
# The verification token the sandbox's Lark signs its card callbacks with, when the service
# has none configured.
LARK_VERIFICATION_TOKEN = "sandbox-lark-verification-token"


def mount_sandbox(app: falcon.App, sandbox: Sandbox, prefix: str = PREFIX) -> None:
    """Add the four fake services under ``{prefix}/{service}`` and the control API under
    ``{prefix}/_control``. Every resource declares PUBLIC roles for the API-key middleware;
    the fake services check their own fake credentials instead."""
    prefix = prefix.rstrip("/")
    # Fake-service errors keep the real service's shape, not the project's.
    app.add_error_handler(ServiceError, handle_service_error)
    services = {
        "jira": [*jira.routes(sandbox.jira, sandbox.traffic),
                 *jira_webhooks.routes(sandbox.jira_webhooks, sandbox.traffic)],
        "lark": lark.routes(sandbox.lark, sandbox.traffic),
        "oncall": oncall.routes(sandbox.oncall, sandbox.traffic),
        "core": core.routes(sandbox.core, sandbox.traffic),
    }
    for service, routes in services.items():
        for path, resource in routes:
            app.add_route(f"{prefix}/{service}{path}", resource)
    for path, resource in control.routes(sandbox):
        app.add_route(f"{prefix}/_control{path}", resource)


def service_urls(base_url: str, prefix: str = PREFIX) -> dict[str, str]:
    """The ``base_url`` of each client when the sandbox is mounted on ``base_url``."""
    root = base_url.rstrip("/") + "/" + prefix.strip("/")
    return {service: f"{root}/{service}" for service in SERVICES}
