"""A Jira webhook delivery is taken once, with its trigger, on both engines: a repeat writes
nothing, two takers at once make one trigger, and old identifiers are forgotten."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from ticket_dispatcher.store import unit_of_work, write_lock
from ticket_dispatcher.store.deliveries import FORGET_EVERY, RETENTION
from ticket_dispatcher.store.models import TriggerRow

NOW = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
INPUT = {"webhook_delivery": "d-1"}


def take(store, identifier: str, now: datetime = NOW):
    with write_lock(store.db):
        made = store.triggers.create_for_delivery(
            store.deliveries, identifier, "TCID-1", [("jira_issue_created", INPUT)], now=now)
    return made[0] if made else None


def triggers_stored(store) -> int:
    with unit_of_work(store.db):
        return TriggerRow.select().count()


def test_a_delivery_is_taken_once_with_its_trigger(store):
    first = take(store, "d-1")
    again = take(store, "d-1")

    assert first is not None and again is None
    assert triggers_stored(store) == 1
    stored = store.triggers.get(first.id)
    assert stored.source == "jira_issue_created"
    assert stored.to_json()["input"] == {"webhook_delivery": "d-1", "issue_key": "TCID-1"}


def test_two_takers_of_the_same_delivery_at_once_make_one_trigger(store):
    barrier = threading.Barrier(2)
    results = []

    def taker():
        barrier.wait(5)
        results.append(take(store, "d-together"))

    threads = [threading.Thread(target=taker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert sorted(result is None for result in results) == [False, True]
    assert triggers_stored(store) == 1


def test_identifiers_older_than_the_retention_are_forgotten(store):
    take(store, "old", NOW - RETENTION - timedelta(hours=1))
    take(store, "recent", NOW - timedelta(hours=1))

    assert store.deliveries.forget_before(NOW - RETENTION) == 1
    assert not store.deliveries.known("old") and store.deliveries.known("recent")


def test_taking_deliveries_forgets_the_old_ones_now_and_then(store):
    take(store, "old", NOW - RETENTION - timedelta(days=1))
    for _ in range(FORGET_EVERY - 2):
        store.deliveries.taken(NOW)  # as if that many more were taken
    assert store.deliveries.known("old")

    take(store, "the-next-one")

    assert not store.deliveries.known("old")
