"""The operator console: server-rendered pages at ``/console/`` over the same store, runtime and
roles as the API (docs/console.md).

``Console`` (web.py) holds the templates and sessions; ``ConsoleGate`` is its middleware, which
``create_app`` places before the request's database connection; ``mount`` adds the routes and
the error pages. Each page module owns its resources and templates.
"""

from __future__ import annotations

import falcon

from ticket_dispatcher.console import (
    audit,
    burden,
    engineer_settings,
    engineers,
    executions,
    maintenance,
    overview,
    parked,
    policies,
    shadows,
    signin,
    triggers,
)
from ticket_dispatcher.console.web import BASE, Console, ConsoleGate, StaticFile, serialize_error
from ticket_dispatcher.http.binding import MAX_ID

__all__ = ["Console", "ConsoleGate", "mount"]

ID = f"int(min=1, max={MAX_ID})"


def mount(app: falcon.App, console: Console) -> None:
    """Add the console's routes to ``app`` (built with ``ConsoleGate(console)`` among its
    middleware) and answer errors on console paths as HTML pages."""
    app.set_error_serializer(serialize_error(console))
    routes = [
        ("", overview.Overview(console)),
        ("/sign-in", signin.SignIn(console)),
        ("/sign-out", signin.SignOut(console)),
        ("/static/{name}", StaticFile(console)),
        ("/triggers", triggers.TriggerList(console)),
        (f"/triggers/{{trigger_id:{ID}}}/replay", triggers.TriggerReplay(console)),
        ("/audit", audit.AuditPage(console)),
        ("/reports/burden", burden.BurdenPage(console)),
    ]
    for module in (executions, parked, engineers, engineer_settings, policies, shadows,
                   maintenance):
        routes += module.routes(console, ID)
    for path, resource in routes:
        app.add_route(BASE + path, resource)
