"""Health, readiness, options and the OpenAPI document."""

from __future__ import annotations

import re

from falcon import inspect as falcon_inspect
from falcon import testing

from tests.fakes import RecordingAction, notification_stand_ins
from tests.http.conftest import Api
from ticket_dispatcher.actors.runtime import Runtime
from ticket_dispatcher.domain import catalog
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.openapi import document


def test_healthz(api):
    assert api.get("/healthz").json == {"status": "ok"}


def test_readyz_needs_database_and_finished_recovery(api):
    ready = api.get("/readyz")
    services, store = api.services, api.services.store
    # Built, but not started: its boot recovery has not run yet.
    services.runtime = Runtime(services.config, store, services.clock,
                               registry=services.registry,
                               ports=Ports(engineers=store.engineers, triggers=store.triggers,
                                           contexts=store.contexts))
    recovering = api.get("/readyz")

    assert ready.status_code == 200
    assert recovering.status_code == 503
    assert recovering.json["checks"] == {"database": True, "recovery": False, "running": True}


def test_options_come_from_the_validators_whitelist(api):
    options = api.get("/dispatch/options").json

    assert [f["name"] for f in options["fields"]] == list(catalog.FIELDS)
    assert options["operators"]["time"] == ["before", "after", "time_window", "exists"]
    assert options["action_types"] == [  # what can run
        "assign", "assign_l2", "triage", "send_assignment_notification",
        "mark_assignment_message_urgent", "page_assignment", "escalate_assignment_to_leader"]
    assert {r["source"] for r in options["reserved_sources"]} == set(catalog.RESERVED_SOURCES)


def test_options_and_the_document_list_every_assign_strategy(api):
    options = api.get("/dispatch/options").json
    assign = api.get("/openapi.json").json["components"]["schemas"]["Action"]["oneOf"][0]
    config = assign["properties"]["assign"]

    assert options["strategies"] == ["first", "round_robin", "balanced", "random"]
    assert config["properties"]["strategy"]["enum"] == options["strategies"]
    assert config["required"] == ["receiver", "strategy"]  # count_jql is optional
    assert "{account}" in config["properties"]["count_jql"]["description"]


def test_options_list_the_action_types_the_services_registry_runs(services):
    registry = product_registry()
    for action in [*notification_stand_ins(), RecordingAction()]:
        registry.register(action)
    services.registry = registry
    api = Api(testing.TestClient(create_app(services)), services)

    types = api.get("/dispatch/options").json["action_types"]

    assert types == [t.value for t in catalog.ActionType]  # catalog types only, in order


def test_every_route_and_method_is_documented(services):
    app = create_app(services)
    served = set()
    for route in falcon_inspect.inspect_routes(app):
        path = re.sub(r"\{(\w+):[^}]*\}", r"{\1}", route.path)
        for method in route.methods:
            if method.internal:  # falcon's own 405/OPTIONS responders
                continue
            served.add((path, method.method.lower()))
    documented = {(path, method) for path, ops in document()["paths"].items() for method in ops}

    assert served == documented


def test_openapi_is_served(api):
    doc = api.get("/openapi.json").json

    assert doc["openapi"].startswith("3.")
    assert "/api/v1/ticketmanager/dispatch/policies" in doc["paths"]
