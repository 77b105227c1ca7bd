"""The API while the database is unavailable: 503 with ``Retry-After`` and the usual error body,
never a 500 and never a hang; nothing stored for a refused trigger; ``/readyz`` not ready and
``/healthz`` alive; everything back without a restart once the database is. Real faults:
another process holding SQLite's write lock, a relay cutting PostgreSQL away."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from falcon import testing

from tests.factories import jira_delivery
from tests.harness import Harness
from tests.http.conftest import API_KEYS, Api
from tests.relay import Relay, relayed_url, target_of
from tests.store.test_store_faults import SqliteWriteLock
from ticket_dispatcher.config import DatabaseConfig, load_config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.auth import PUBLIC
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.http.webhooks import signature
from ticket_dispatcher.store import Store, unit_of_work
from ticket_dispatcher.store.models import TriggerRow

BUSY = timedelta(milliseconds=300)
CONNECT = timedelta(seconds=1)
DATABASE = DatabaseConfig(busy_timeout=BUSY, connect_timeout=CONNECT)
SLACK = 1.5  # what a bounded wait may add to its timeout on a busy test machine
TRIGGER = {"source": "jira_automation", "input": {"issue_key": "TCID-1"}}
WEBHOOK_SECRET = "outage-webhook-secret-0123456789"


class Outage:
    """The API on a real runtime over ``store``, with the service's metrics following the
    store's health as service.py wires them."""

    def __init__(self, store: Store):
        self.store = store
        self.harness = Harness(store).start()
        config = load_config(None, environ={
            "TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
            "TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS": WEBHOOK_SECRET})
        self.services = Services(store=self.harness.store, config=config,
                                 clock=self.harness.clock, runtime=self.harness.runtime)
        self.store.health.subscribe(self.services.metrics)
        self.api = Api(testing.TestClient(create_app(self.services)), self.services)

    def metric(self, name: str, **labels: str) -> float | None:
        return self.services.metrics.registry.get_sample_value(
            f"ticket_manager_dispatch_{name}", labels)

    def deliver(self, body: bytes, identifier: str) -> testing.Result:
        """A Jira webhook delivery, signed as Jira signs it."""
        return self.api.as_role(None).post("/jira/webhooks", body=body, headers={
            "Content-Type": "application/json",
            "X-Hub-Signature": signature(WEBHOOK_SECRET, body),
            "X-Atlassian-Webhook-Identifier": identifier})

    def triggers_stored(self) -> int:
        with unit_of_work(self.store.db):
            return TriggerRow.select().count()

    def close(self) -> None:
        self.harness.wait_idle()
        self.harness.stop()
        self.store.close()


def assert_unavailable(result: testing.Result) -> None:
    assert result.status_code == 503
    assert result.headers["Retry-After"] == "2"
    assert result.json["code"] == "unavailable"
    assert result.json["title"] == "Service Unavailable"
    assert "retry" in result.json["description"]


@pytest.fixture
def sqlite_outage(tmp_path):
    store = Store.for_url(f"sqlite:///{tmp_path / 'td.db'}", database=DATABASE)
    store.migrate()
    outage = Outage(store)
    yield outage
    outage.close()


@pytest.fixture
def postgres_outage(postgres_url):
    with Relay(*target_of(postgres_url)) as relay:
        store = Store.for_url(relayed_url(postgres_url, relay), database=DATABASE)
        store.migrate()
        outage = Outage(store)
        outage.relay = relay
        yield outage
        relay.restore()
        outage.close()


# --- SQLite: another process holds the write lock ---------------------------------------------


def test_trigger_is_refused_with_503_within_busy_timeout_while_sqlite_is_locked(sqlite_outage):
    api = sqlite_outage.api
    with SqliteWriteLock(sqlite_outage.store.db.database):
        started = time.monotonic()
        refused = api.as_role("automation").post("/dispatch/triggers", json=TRIGGER)
        waited = time.monotonic() - started
        down = sqlite_outage.metric("database_up")

    assert_unavailable(refused)
    assert waited < BUSY.total_seconds() + SLACK
    assert sqlite_outage.triggers_stored() == 0
    assert sqlite_outage.metric("trigger_intake_total", source="jira_automation",
                                outcome="unavailable") == 1
    assert sqlite_outage.metric("store_errors_total", kind="locked") == 1
    assert down == 0
    accepted = api.as_role("automation").post("/dispatch/triggers", json=TRIGGER)
    assert accepted.status_code == 202
    assert sqlite_outage.triggers_stored() == 1  # a 202 means the row committed
    assert sqlite_outage.metric("database_up") == 1


def test_readiness_fails_while_sqlite_is_locked_and_liveness_answers(sqlite_outage):
    api = sqlite_outage.api
    with SqliteWriteLock(sqlite_outage.store.db.database):
        started = time.monotonic()
        readiness = api.get("/readyz")
        waited = time.monotonic() - started
        liveness = api.get("/healthz")

    assert readiness.status_code == 503
    assert readiness.json["checks"]["database"] is False
    assert waited < BUSY.total_seconds() + SLACK
    assert liveness.status_code == 200
    assert api.get("/readyz").status_code == 200


def test_a_write_endpoint_answers_503_while_sqlite_is_locked(sqlite_outage):
    api = sqlite_outage.api
    with SqliteWriteLock(sqlite_outage.store.db.database):
        refused = api.put("/engineers/a@x.com", json={"dispatch_enabled": True})

    assert_unavailable(refused)
    assert api.get("/engineers").json["total"] == 0
    assert api.put("/engineers/a@x.com", json={"dispatch_enabled": True}).status_code == 201


def test_a_jira_webhook_is_refused_with_503_while_sqlite_is_locked_and_its_retry_taken(
        sqlite_outage):
    body = json.dumps(jira_delivery(key="TCID-1")).encode()
    with SqliteWriteLock(sqlite_outage.store.db.database):
        refused = sqlite_outage.deliver(body, "delivery-during-outage")

    assert_unavailable(refused)
    assert sqlite_outage.triggers_stored() == 0
    assert sqlite_outage.metric("jira_webhooks_total", event="jira:issue_created",
                                outcome="unavailable") == 1
    retried = sqlite_outage.deliver(body, "delivery-during-outage")  # Jira retries a 503
    assert retried.status_code == 202
    assert sqlite_outage.triggers_stored() == 1


# --- PostgreSQL: the network to the server is cut ---------------------------------------------


@pytest.mark.postgres
def test_api_answers_503_while_postgres_is_cut_and_heals_after(postgres_outage):
    api, relay = postgres_outage.api, postgres_outage.relay
    assert api.get("/engineers").status_code == 200  # a pooled connection the cut will kill

    relay.cut()
    started = time.monotonic()
    listing = api.get("/engineers")
    trigger = api.as_role("automation").post("/dispatch/triggers", json=TRIGGER)
    delivery = postgres_outage.deliver(json.dumps(jira_delivery()).encode(), "cut-delivery")
    readiness = api.get("/readyz")
    liveness = api.get("/healthz")
    waited = time.monotonic() - started
    down = postgres_outage.metric("database_up")
    relay.restore()

    assert_unavailable(listing)
    assert_unavailable(trigger)
    assert_unavailable(delivery)
    assert readiness.status_code == 503 and readiness.json["checks"]["database"] is False
    assert liveness.status_code == 200
    assert waited < SLACK  # a cut connection fails at once
    assert down == 0
    assert postgres_outage.metric("store_errors_total", kind="connection") >= 4
    assert postgres_outage.metric("trigger_intake_total", source="jira_automation",
                                  outcome="unavailable") == 1
    assert api.get("/readyz").status_code == 200
    assert api.get("/engineers").status_code == 200
    assert postgres_outage.triggers_stored() == 0
    assert postgres_outage.metric("database_up") == 1


class CutMidRequest:
    """A handler that loses its connection between two repository calls."""

    roles = {"GET": PUBLIC}

    def __init__(self, store: Store, relay: Relay):
        self._store, self._relay = store, relay
        self.connection = None

    def on_get(self, req, resp) -> None:
        self.connection = self._store.db.connection()  # the request's, from the middleware
        self._store.engineers.page()
        self._relay.cut()
        resp.media = {"total": self._store.engineers.page()[1]}


@pytest.mark.postgres
def test_a_connection_lost_during_a_request_is_discarded_not_pooled(postgres_outage):
    store, relay = postgres_outage.store, postgres_outage.relay
    app = create_app(postgres_outage.services)
    resource = CutMidRequest(store, relay)
    app.add_route("/test/cut-mid-request", resource)

    result = testing.TestClient(app).simulate_get("/test/cut-mid-request")
    relay.restore()

    assert_unavailable(result)
    assert resource.connection.closed
    assert store.db._in_use == {}
    assert all(conn is not resource.connection for _, _, conn in store.db._connections)
    assert postgres_outage.api.get("/engineers").status_code == 200


@pytest.mark.postgres
def test_readiness_answers_within_connect_timeout_while_postgres_never_answers(postgres_outage):
    api, relay = postgres_outage.api, postgres_outage.relay
    relay.stall()

    started = time.monotonic()
    readiness = api.get("/readyz")
    waited = time.monotonic() - started
    relay.restore()

    assert readiness.status_code == 503 and readiness.json["checks"]["database"] is False
    assert waited < CONNECT.total_seconds() + SLACK
    assert api.get("/readyz").status_code == 200
