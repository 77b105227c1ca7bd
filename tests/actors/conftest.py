from __future__ import annotations

import pytest

from tests.actors.test_notification_card_runtime import ASSIGNEE, NotificationHarness
from tests.domain.test_notification_card import LABEL, SEND, SEVERITY
from tests.domain.test_notification_page import page
from tests.harness import Harness, rule


@pytest.fixture
def make_harness(store):
    """Build a started harness on the (SQLite or PostgreSQL) test store; stopped at teardown."""
    started: list[Harness] = []

    def make(*actions, **options) -> Harness:
        harness = Harness(store, *actions, **options).start()
        started.append(harness)
        return harness

    yield make
    for harness in started:
        harness.stop()


def urgent_harness(store, **config: str) -> NotificationHarness:
    """The notification harness, started, with a Severity assignee family: card, then for
    S1/S2 App-urgent and three pages."""
    harness = NotificationHarness(store, **config).start()
    harness.policy(rule(SEND, name="send", priority=10, on_success="continue"),
                   rule({"type": "mark_assignment_message_urgent"}, page(1), page(2), page(3),
                        name="urgent", priority=20, when=SEVERITY),
                   source_in=(ASSIGNEE,), labels=(LABEL,))
    return harness


@pytest.fixture
def urgent_world(store):
    harness = urgent_harness(store)
    yield harness
    harness.stop()
