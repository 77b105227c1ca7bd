"""One database connection per HTTP request, returned with the response."""

from __future__ import annotations

import threading

import peewee
import pytest
from falcon import testing
from playhouse.pool import MaxConnectionsExceeded

from ticket_dispatcher.config import Config
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.auth import PUBLIC
from ticket_dispatcher.http.services import Services


class CheckoutCounter:
    """Counts pool check-outs (``PooledDatabase._connect`` runs once per ``connect``) and new
    physical connections (peewee sets SQLite pragmas once on each), per thread."""

    def __init__(self, db: peewee.Database, monkeypatch):
        self.checkouts: list[int] = []
        self.physical = 0
        checkout, pragmas = db._connect, getattr(db, "_set_pragmas", None)

        def counting_checkout():
            self.checkouts.append(threading.get_ident())
            return checkout()

        def counting_pragmas(conn):
            self.physical += 1
            pragmas(conn)

        monkeypatch.setattr(db, "_connect", counting_checkout)
        if pragmas is not None:
            monkeypatch.setattr(db, "_set_pragmas", counting_pragmas)


class TwoRepositoryCalls:
    """A resource whose handler makes two repository calls, each its own unit of work."""

    roles = {"GET": PUBLIC, "POST": PUBLIC}

    def __init__(self, store):
        self._store = store

    def on_get(self, req, resp) -> None:
        self._store.engineers.page()
        resp.media = {"total": self._store.engineers.page()[1]}

    def on_post(self, req, resp) -> None:
        self._store.engineers.page()
        raise RuntimeError("the handler failed after using the database")


@pytest.fixture
def client(services) -> testing.TestClient:
    app = create_app(services)
    app.add_route("/test/two-calls", TwoRepositoryCalls(services.store))
    return testing.TestClient(app)


@pytest.fixture
def counter(services, monkeypatch) -> CheckoutCounter:
    services.store.close()  # start from an empty pool: the fixtures' migration used one
    return CheckoutCounter(services.store.db, monkeypatch)


def test_a_request_takes_one_connection_for_all_its_units_of_work(client, counter, services):
    result = client.simulate_get("/test/two-calls")

    assert result.status_code == 200
    assert counter.checkouts == [threading.get_ident()]
    assert services.store.db.is_closed()  # returned before the response left


def test_on_each_engine_a_request_takes_one_connection_and_returns_it(store, clock, monkeypatch):
    services = Services(store=store, config=Config(), clock=clock)
    app = create_app(services, auth_enabled=False)
    app.add_route("/test/two-calls", TwoRepositoryCalls(store))
    store.close()
    counter = CheckoutCounter(store.db, monkeypatch)

    results = [testing.TestClient(app).simulate_get("/test/two-calls") for _ in range(3)]

    assert [result.json for result in results] == [{"total": 0}] * 3
    assert len(counter.checkouts) == 3
    assert store.db.is_closed()


def test_requests_reuse_the_pooled_connection(client, counter, api):
    for _ in range(20):
        assert client.simulate_get("/test/two-calls").status_code == 200
    assert api.get("/engineers").status_code == 200

    assert len(counter.checkouts) == 21
    assert counter.physical == 1


def test_the_connection_is_returned_when_the_handler_raises(client, counter, services):
    result = client.simulate_post("/test/two-calls")

    assert result.status_code == 500
    assert len(counter.checkouts) == 1
    assert services.store.db.is_closed()


def test_an_api_request_returns_its_connection(api, counter):
    assert api.put("/engineers/a@x.com", json={"dispatch_enabled": True}).status_code == 201
    assert api.get("/engineers/a@x.com").status_code == 200

    assert len(counter.checkouts) == 2
    assert api.services.store.db.is_closed()


@pytest.mark.parametrize("path", ["/healthz", "/openapi.json", "/dispatch/options"])
def test_endpoints_without_data_take_no_connection(api, counter, path):
    assert api.get(path).status_code == 200

    assert counter.checkouts == []


def test_healthz_answers_while_the_pool_is_exhausted(api, monkeypatch):
    def exhausted(reuse_if_open=False):
        raise MaxConnectionsExceeded("Exceeded maximum connections.")

    monkeypatch.setattr(api.services.store.db, "connect", exhausted)

    assert api.get("/healthz").status_code == 200
    refused = api.get("/engineers")
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "2"
    assert refused.json["code"] == "unavailable"
    assert api.services.store.db.is_closed()


def test_readiness_reports_an_unreachable_database_as_a_check(api, monkeypatch):
    def unreachable(reuse_if_open=False):
        raise peewee.OperationalError("connection refused")

    monkeypatch.setattr(api.services.store.db, "connect", unreachable)
    result = api.get("/readyz")

    assert result.status_code == 503
    assert result.json["checks"] == {"database": False, "recovery": True, "running": True}


def test_an_unauthenticated_request_takes_no_connection(api, counter):
    assert api.as_role(None).get("/engineers").status_code == 401
    assert api.get("/engineers", headers={"X-API-KEY": "not-a-key"}).status_code == 401
    assert api.as_role("automation").get("/engineers").status_code == 403

    assert counter.checkouts == []


def test_an_unrouted_request_takes_no_connection(api, counter):
    assert api.get("/no/such/route").status_code == 404

    assert counter.checkouts == []
