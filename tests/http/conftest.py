from __future__ import annotations

import pytest
from falcon import testing

from tests.clocks import ManualClock
from ticket_dispatcher.config import load_config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services

# At least 24 characters: shorter plain keys stop the start.
KEYS = {"operator": "op-secret-key-0123456789abcdef", "viewer": "view-secret-key-0123456789abcdef",
        "automation": "auto-secret-key-0123456789abcdef"}
API_KEYS = ",".join(f"{role}-key:{role}:{key}" for role, key in KEYS.items())
BASE = "/api/v1/ticketmanager"
# Routes outside the API base; everything else is relative to BASE.
ROOT_PATHS = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/api/", "/sandbox/")


class Api:
    """A test client that speaks to the real app as one role."""

    def __init__(self, client: testing.TestClient, services: Services):
        self.client = client
        self.services = services
        self.role = "operator"

    def _headers(self, headers: dict | None) -> dict:
        merged = {"X-API-KEY": KEYS[self.role]} if self.role else {}
        merged.update(headers or {})
        return merged

    def request(self, method: str, path: str, *, json=None, body=None, headers=None,
                params=None) -> testing.Result:
        url = path if path.startswith(ROOT_PATHS) else BASE + path
        return self.client.simulate_request(method, url, json=json, body=body, params=params,
                                            headers=self._headers(headers))

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def put(self, path, **kw):
        return self.request("PUT", path, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def as_role(self, role: str | None) -> Api:
        other = Api(self.client, self.services)
        other.role = role
        return other


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def services(sqlite_store, clock) -> Services:
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS})
    return Services(store=sqlite_store, config=config, clock=clock)


@pytest.fixture
def api(services) -> Api:
    return Api(testing.TestClient(create_app(services)), services)


@pytest.fixture
def live_api(harness) -> Api:
    """The API with the real actor runtime behind it (triggers, executions, admin)."""
    config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
                                        "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "1",
                                        "TICKET_DISPATCHER_HTTP_TRIGGER_BURST": "5"})
    services = Services(store=harness.store, config=config, clock=harness.clock,
                        runtime=harness.runtime)
    return Api(testing.TestClient(create_app(services)), services)
