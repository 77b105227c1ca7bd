"""Health, readiness, options and the OpenAPI document."""

from __future__ import annotations

import re

from falcon import inspect as falcon_inspect

from ticket_dispatcher.domain import catalog
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.openapi import document


def test_healthz(api):
    assert api.get("/healthz").json == {"status": "ok"}


def test_readyz_needs_database_and_finished_recovery(api):
    ready = api.get("/readyz")
    api.services.recovered = lambda: False
    recovering = api.get("/readyz")

    assert ready.status_code == 200
    assert recovering.status_code == 503
    assert recovering.json["checks"] == {"database": True, "recovery": False}


def test_options_come_from_the_validators_whitelist(api):
    options = api.get("/dispatch/options").json

    assert [f["name"] for f in options["fields"]] == list(catalog.FIELDS)
    assert options["operators"]["time"] == ["before", "after", "time_window", "exists"]
    assert "page_assignment" in options["action_types"]
    assert {r["source"] for r in options["reserved_sources"]} == set(catalog.RESERVED_SOURCES)


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
