from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from falcon import testing

from tests.clocks import ManualClock
from tests.sandbox.calls import CREATED, sandbox_app
from ticket_dispatcher.sandbox import Sandbox, service_urls
from ticket_dispatcher.sandbox.jira import SandboxIssue


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def sandbox(clock, sleeps) -> Sandbox:
    """A small world: alice (Lark, phone, leader dora), bob (Lark, no phone), dora (no leader),
    ivan (inactive, not on Lark); group l1; team sre (bob primary); issue TCID-1."""
    world = Sandbox(now=clock.now, sleep=sleeps.append)
    world.people.put_user("alice@example.com", display_name="Alice Wang", account_id="acc-alice",
                          open_id="ou_alice", has_phone=True, leader_email="dora@example.com")
    world.people.put_user("bob@example.com", display_name="Bob Li", account_id="acc-bob",
                          open_id="ou_bob", leader_email="dora@example.com")
    world.people.put_user("dora@example.com", display_name="Dora Zhao", account_id="acc-dora",
                          open_id="ou_dora", has_phone=True)
    world.people.put_user("ivan@example.com", display_name="Ivan Old", account_id="acc-ivan",
                          active=False)
    world.core.put_group("l1", ["alice@example.com", "bob@example.com", "ivan@example.com"])
    world.oncall.put_team("sre", ["bob@example.com", "alice@example.com"])
    world.jira.put_issue(SandboxIssue(
        key="TCID-1", project_key="TCID", summary="Login fails", environment="prod",
        priority="P1", status="Todo", severity="S1", labels=["auto-dispatch"],
        components=["API"], reporter="acc-dora", created_at=CREATED,
    ))
    return world


@pytest.fixture
def client(sandbox) -> testing.TestClient:
    return testing.TestClient(sandbox_app(sandbox))


@pytest.fixture
def served(sandbox):
    """The sandbox on a real local port, for the requests-based clients."""
    class QuietHandler(WSGIRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = make_server("127.0.0.1", 0, sandbox_app(sandbox), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield service_urls(f"http://127.0.0.1:{server.server_port}")
    server.shutdown()
    server.server_close()
