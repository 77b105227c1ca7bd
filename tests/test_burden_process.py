"""The burden report through a real process: ``ticket-dispatcher serve`` (tests/process.py)
assigns two issues round robin and pages the assignee of an urgent one, against the fakes of
Jira (tests/peer.py) and Lark, Oncall and Core (tests/peer_notify.py); then
``GET /reports/burden`` counts the assignments, the card, the App-urgent and the page in the
person's band, and times the ACK by the read as Lark reports it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.peer import FakeJira
from tests.process import (
    Dispatcher,
    Processes,
    assignee_notification_policy,
    notification_settings,
    round_robin_policy,
    wait_until,
)
from ticket_dispatcher.timeutil import format_time

PROJECT = "LOAD"
EMAIL, ACCOUNT, OPEN_ID, NAME = "alice@example.com", "acc-alice", "ou_alice", "Alice Example"
BOB, BOB_ACCOUNT = "bob@example.com", "acc-bob"
URGENT, ASSIGNED = f"{PROJECT}-1", [f"{PROJECT}-2", f"{PROJECT}-3"]
ALWAYS = {day: ["00:00-24:00"] for day in ("mon", "tue", "wed", "thu", "fri", "sat", "sun")}
READ_LATER_MS = 3_600_000  # the read Lark reports, an hour after the card was read here


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_user(EMAIL, ACCOUNT, NAME)
        fake.add_user(BOB, BOB_ACCOUNT, "Bob")
        fake.add_issue(URGENT, labels=["notify-assignee"], assignee=ACCOUNT, priority="P0",
                       status="Todo")
        for key in ASSIGNED:
            fake.add_issue(key)
        yield fake


@pytest.fixture
def person() -> tuple[str, str, str]:
    return EMAIL, NAME, OPEN_ID


@pytest.fixture
def dispatcher(db_url, jira, lark, oncall, core) -> Iterator[Dispatcher]:
    started = Processes()
    yield started.start(db_url, jira, **notification_settings(lark, oncall, core)).wait_serving()
    started.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_report_counts_what_the_process_did_and_times_the_ack_by_the_read(
        dispatcher, lark, oncall):
    # Alice works around the clock: every interruption of hers is in business hours.
    dispatcher.call("PUT", f"/engineers/{EMAIL}", (200, 201), json={
        "dispatch_enabled": True, "jira_account_id": ACCOUNT, "timezone": "Asia/Tokyo",
        "working_hours": ALWAYS})
    dispatcher.call("PUT", f"/engineers/{BOB}", (200, 201),
                    json={"dispatch_enabled": True, "jira_account_id": BOB_ACCOUNT})
    dispatcher.activate(round_robin_policy("Assign LOAD", "round robin", PROJECT,
                                            [EMAIL, BOB]))
    for key in ASSIGNED:
        dispatcher.post_trigger(key)
        dispatcher.wait_status(key, "succeeded")
    dispatcher.activate(assignee_notification_policy(
        "Notify LOAD", PROJECT, urgent=["P0"], attempts=1, ack_timeout="20s",
        poll_interval="1s"))
    dispatcher.post_trigger(URGENT, source="jira_assignment_assignee")
    wait_until(lambda: oncall.pages(), 15, "the assignee is paged")
    [card] = lark.messages()
    lark.mark_read(card.message_id, OPEN_ID, at_ms=int(time.time() * 1000) + READ_LATER_MS)
    dispatcher.wait_status(URGENT, "succeeded")

    report = dispatcher.call("GET", "/reports/burden")

    people = {person["email"]: person for person in report["people"]}
    alice, bob = people[EMAIL], people[BOB]
    assert (alice["assigned"], bob["assigned"]) == (1, 1)
    assert (alice["cards"], alice["urgent"], alice["pages"]) == (1, 1, 1)
    assert alice["interruptions"] == {"business": 2, "off": 0, "sleep": 0}
    ack = alice["ack_seconds"]["by_source"]["card_read"]["p50"]
    assert READ_LATER_MS / 1000 <= ack < READ_LATER_MS / 1000 + 30, alice["ack_seconds"]
    [rotation] = report["rotations"]
    assert rotation["rotation"] == f"users:{EMAIL},{BOB}"
    assert [(m["email"], m["assigned"], m["fair_share"]) for m in rotation["members"]] == [
        (EMAIL, 1, 1.0), (BOB, 1, 1.0)]
    assert rotation["cv"] == 0.0
    assert report["complete_from"] is not None
    # Whole months come from the tallies the database keeps, and count alike.
    this_month = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    months = dispatcher.call("GET", "/reports/burden", params={
        "from": format_time((this_month - timedelta(days=1)).replace(day=1)),
        "to": format_time((this_month + timedelta(days=32)).replace(day=1))})
    assert months["people"] == report["people"]
    assert [(m["email"], m["assigned"], m["fair_share"]) for m in
            months["rotations"][0]["members"]] == [(EMAIL, 1, 1.0), (BOB, 1, 1.0)]
    assert sum(week["pages"] for week in months["weekly_pages"]) == 1
    # Counted for Grafana by band and rotation (the urgent issue was assigned by hand: none),
    # no person named.
    metrics = requests.get(f"{dispatcher.url}/metrics", timeout=10).text
    assert ('ticket_manager_dispatch_interruptions_total{band="business",rotation="none"} 2.0'
            in metrics)
    assert EMAIL not in metrics
    assert dispatcher.log_problems() == []
