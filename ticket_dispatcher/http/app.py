"""The Falcon app factory: routes, middleware and error handling. What the resources are handed
is ``services.py``'s; they import that, never this module, which imports them."""

from __future__ import annotations

import falcon

from ticket_dispatcher.http import API_BASE, errors
from ticket_dispatcher.http.admin import ActorStatus, ExecutionCancel
from ticket_dispatcher.http.audit import AuditTrail
from ticket_dispatcher.http.auth import ApiKeyAuth
from ticket_dispatcher.http.binding import MAX_ID, TextParameters
from ticket_dispatcher.http.contexts import ContextItem
from ticket_dispatcher.http.dispatch import (
    ExecutionCollection,
    ExecutionItem,
    ExecutionReplay,
    TriggerCollection,
    TriggerItem,
)
from ticket_dispatcher.http.engineers import (
    EngineerCollection,
    EngineerItem,
    TimeOffCollection,
    TimeOffItem,
)
from ticket_dispatcher.http.health import Liveness, MetricsExposition, Options, Readiness
from ticket_dispatcher.http.lark_callbacks import LarkCardActions
from ticket_dispatcher.http.maintenance import MaintenanceWindowCollection, MaintenanceWindowEnd
from ticket_dispatcher.http.middleware import DatabaseConnection, PrivateAnswers
from ticket_dispatcher.http.openapi import OpenApiDocument
from ticket_dispatcher.http.policies import (
    PolicyActivation,
    PolicyCollection,
    PolicyDeactivation,
    PolicyItem,
    PolicyReplacements,
    PolicyShadow,
    PolicyValidation,
)
from ticket_dispatcher.http.reports import BurdenReport
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.http.webhooks import JiraWebhooks


def create_app(services: Services, *, auth_enabled: bool = True,
               gates: list | tuple = ()) -> falcon.App:
    """The API. ``gates``: more authentication middleware (the console's), run after the API
    key check and before the request's parameters and database connection."""
    # Order matters: falcon runs process_resource in this order and stops at the first that
    # raises, so authentication refuses a request before its parameters are judged, and both
    # before it takes a database connection.
    keys = ApiKeyAuth(services.config.auth, enabled=auth_enabled, now=services.clock.now)
    app = falcon.App(
        middleware=[keys,
                    *gates,
                    TextParameters(),
                    DatabaseConnection(services.store),
                    PrivateAnswers()],
        cors_enable=False,
    )
    app.req_options.strip_url_path_trailing_slash = True
    errors.install(app)

    app.add_route("/healthz", Liveness())
    app.add_route("/readyz", Readiness(services))
    app.add_route("/metrics", MetricsExposition(services))
    app.add_route("/openapi.json", OpenApiDocument())

    api = API_BASE
    ID = f"int(min=1, max={MAX_ID})"  # an out-of-range id matches no route: 404
    app.add_route(f"{api}/dispatch/options", Options(services))
    app.add_route(f"{api}/dispatch/triggers", TriggerCollection(services))
    app.add_route(f"{api}/admin/actors", ActorStatus(services))
    app.add_route(f"{api}/admin/executions/{{execution_id:{ID}}}/cancel",
                  ExecutionCancel(services))
    app.add_route(f"{api}/dispatch/triggers/{{trigger_id:{ID}}}", TriggerItem(services))
    app.add_route(f"{api}/dispatch/executions", ExecutionCollection(services))
    app.add_route(f"{api}/dispatch/executions/{{execution_id:{ID}}}", ExecutionItem(services))
    app.add_route(f"{api}/dispatch/executions/{{execution_id:{ID}}}/replay",
                  ExecutionReplay(services))
    app.add_route(f"{api}/dispatch/policies", PolicyCollection(services))
    app.add_route(f"{api}/dispatch/policies/validate", PolicyValidation(services))
    app.add_route(f"{api}/dispatch/policies/{{policy_id:{ID}}}", PolicyItem(services))
    app.add_route(f"{api}/dispatch/policies/{{policy_id:{ID}}}/activate",
                  PolicyActivation(services))
    app.add_route(f"{api}/dispatch/policies/{{policy_id:{ID}}}/deactivate",
                  PolicyDeactivation(services))
    app.add_route(f"{api}/dispatch/policies/{{policy_id:{ID}}}/replacements",
                  PolicyReplacements(services))
    app.add_route(f"{api}/dispatch/policies/{{policy_id:{ID}}}/shadow", PolicyShadow(services))
    app.add_route(f"{api}/dispatch/contexts/{{issue_key}}", ContextItem(services))
    app.add_route(f"{api}/jira/webhooks", JiraWebhooks(services, keys))
    app.add_route(f"{api}/lark/card-actions", LarkCardActions(services, keys))
    app.add_route(f"{api}/audit", AuditTrail(services))
    app.add_route(f"{api}/reports/burden", BurdenReport(services))
    app.add_route(f"{api}/maintenance-windows", MaintenanceWindowCollection(services))
    app.add_route(f"{api}/maintenance-windows/{{window_id:{ID}}}/end",
                  MaintenanceWindowEnd(services))
    app.add_route(f"{api}/engineers", EngineerCollection(services))
    app.add_route(f"{api}/engineers/{{email}}", EngineerItem(services))
    app.add_route(f"{api}/engineers/{{email}}/time-off", TimeOffCollection(services))
    app.add_route(f"{api}/engineers/{{email}}/time-off/{{entry_id:{ID}}}",
                  TimeOffItem(services))
    return app
