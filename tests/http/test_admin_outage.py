"""``GET /admin/actors`` during a database outage: 200 from memory (supervisor, scheduler, pool,
running executions, trigger actors, clients, leases), the parked executions' database details
marked unavailable; never a 500 or a 503. A real fault on PostgreSQL (a relay cuts the server
away); on both engines, a store whose read raises ``StoreUnavailable``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from falcon import testing

from tests.fakes import RecordingAction
from tests.harness import Harness, rule
from tests.http.conftest import API_KEYS, Api
from tests.relay import Relay, relayed_url, target_of
from ticket_dispatcher.config import DatabaseConfig, load_config
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.store import Store

DATABASE = DatabaseConfig(busy_timeout=timedelta(milliseconds=300),
                          connect_timeout=timedelta(seconds=1))
UNAVAILABLE = "unavailable: the database cannot be read"
MEMORY_PARTS = {"supervisor", "scheduler", "leases", "pool", "executions", "trigger_actors",
                "clients"}


class ParkedWorld:
    """The API on a real runtime with one execution parked for 60 s."""

    def __init__(self, store: Store):
        self.harness = Harness(store, RecordingAction("test_wait", park_for=60)).start()
        self.harness.policy(rule("test_wait"))
        self.execution_id = self.harness.post_trigger().execution_ids[0]
        config = load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS})
        services = Services(store=self.harness.store, config=config, clock=self.harness.clock,
                            runtime=self.harness.runtime)
        self.api = Api(testing.TestClient(create_app(services)), services).as_role("viewer")

    def close(self) -> None:
        self.harness.wait_idle()
        self.harness.stop()


@pytest.fixture
def world(store):
    world = ParkedWorld(store)
    yield world
    world.close()


@pytest.fixture
def cut_world(postgres_url):
    with Relay(*target_of(postgres_url)) as relay:
        store = Store.for_url(relayed_url(postgres_url, relay), database=DATABASE)
        store.migrate()
        world = ParkedWorld(store)
        world.relay = relay
        yield world
        relay.restore()
        world.close()
        store.close()


def assert_from_memory(result: testing.Result, execution_id: int) -> None:
    assert result.status_code == 200, result.json
    status = result.json
    assert MEMORY_PARTS <= set(status)
    assert status["supervisor"]["alive"] is True and status["pool"]["parked"] == 1
    assert set(status["clients"]) == {"jira", "lark", "oncall", "core"}
    [parked] = status["parked_executions"]
    assert parked == {"execution_id": execution_id, "wake_at": parked["wake_at"],
                      "details": UNAVAILABLE}
    assert parked["wake_at"] == status["pool"]["next_wake_at"]


def test_admin_view_answers_from_memory_when_the_store_cannot_be_read(world, monkeypatch):
    healthy = world.api.get("/admin/actors")

    def unreadable(execution_ids):
        raise StoreUnavailable("the database is locked", "locked")

    monkeypatch.setattr(world.harness.store.executions, "get_many", unreadable)
    outage = world.api.get("/admin/actors")
    monkeypatch.undo()
    after = world.api.get("/admin/actors")

    assert_from_memory(outage, world.execution_id)
    [parked] = healthy.json["parked_executions"]
    assert set(parked) == {"execution_id", "wake_at", "issue_key", "action", "attempt",
                           "deadline"}
    assert parked["issue_key"] == "TCID-1" and parked["action"] == "rule: 0:test_wait"
    assert after.json["parked_executions"] == healthy.json["parked_executions"]


@pytest.mark.postgres
def test_admin_view_answers_while_postgres_is_cut_away(cut_world):
    api, relay = cut_world.api, cut_world.relay
    assert api.get("/admin/actors").json["parked_executions"][0]["issue_key"] == "TCID-1"

    relay.cut()
    during = api.get("/admin/actors")
    listing = api.get("/dispatch/executions")  # a database read: the outage is real
    relay.restore()

    assert_from_memory(during, cut_world.execution_id)
    assert listing.status_code == 503
    assert api.get("/admin/actors").json["parked_executions"][0]["issue_key"] == "TCID-1"
