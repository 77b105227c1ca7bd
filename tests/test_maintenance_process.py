"""Maintenance windows through a real ``ticket-dispatcher serve`` process, on both engines,
against the fake Jira of tests/peer.py over real HTTP: a ``hold`` window keeps a trigger of its
project pending, carrying the window's id; ending the window early runs it on the live issue;
a trigger of another project is not held."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests import process
from tests.peer import FakeJira
from tests.process import wait_until

PROJECT, OTHER = "MNT", "FREE"
SQUAD = {"alice@example.com": "acc-alice"}


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        for email, account_id in SQUAD.items():
            fake.add_user(email, account_id)
        fake.add_issue(f"{PROJECT}-1")
        fake.add_issue(f"{OTHER}-1")
        yield fake


def test_a_hold_window_holds_a_trigger_until_it_is_ended_early(processes, db_url, jira):
    server = processes.start(db_url, jira).wait_serving()
    for email, account_id in SQUAD.items():
        server.call("PUT", f"/engineers/{email}", (201,),
                    json={"dispatch_enabled": True, "jira_account_id": account_id})
    for project in (PROJECT, OTHER):
        server.activate(process.round_robin_policy(
            f"Assign {project}", "round robin", project, SQUAD))
    end = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    window = server.call("POST", "/maintenance-windows", (201,), json={
        "scope": {"projects": [PROJECT]}, "reason": "migration", "end": end, "effect": "hold"})
    assert window["state"] == "current"

    held = server.post_trigger(f"{PROJECT}-1")
    free = server.post_trigger(f"{OTHER}-1")

    server.wait_status(f"{OTHER}-1", "succeeded")

    def held_trigger() -> dict | None:
        trigger = server.call("GET", f"/dispatch/triggers/{held['id']}")
        return trigger if trigger["maintenance_window_id"] is not None else None

    trigger = wait_until(held_trigger, 15, "the trigger to be held")
    assert trigger["status"] == "pending"
    assert trigger["maintenance_window_id"] == window["id"]
    assert server.execution_of(f"{PROJECT}-1") is None
    assert jira.assignee(f"{PROJECT}-1") is None
    assert server.call("GET", f"/dispatch/triggers/{free['id']}")["maintenance_window_id"] is None

    ended = server.call("POST", f"/maintenance-windows/{window['id']}/end")

    assert ended["state"] == "ended"
    server.wait_status(f"{PROJECT}-1", "succeeded")
    assert jira.assignee(f"{PROJECT}-1") == "acc-alice"
    assert server.call("GET", f"/dispatch/triggers/{held['id']}")["status"] == "completed"
    assert server.call("GET", "/maintenance-windows", params={"state": "current"}) == {
        "windows": []}
    assert server.log_problems() == []
