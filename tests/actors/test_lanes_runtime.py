"""Lanes on the real runtime and database: a notification trigger posted behind a backlog of
ordinary ones is processed next, not last; with ``lanes.notification_share`` 0 it waits its
turn in one line, as before lanes."""

from __future__ import annotations

import threading

import pytest

from tests.fakes import FakeJira, issue
from tests.harness import Harness

BOUND = 10  # seconds: the longest a gated load waits before the test fails
BACKLOG = 20


class GatedJira(FakeJira):
    """The first load blocks until the test opens the gate: the one trigger actor is busy
    while the backlog forms behind it."""

    def __init__(self, *issues):
        super().__init__(*issues)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def load_issue(self, key):
        if not self.entered.is_set():
            self.entered.set()
            assert self.gate.wait(BOUND), "the test never opened the gate"
        return super().load_issue(key)


@pytest.fixture
def make(store):
    started = []

    def make(share: str) -> Harness:
        keys = [f"TCID-{n}" for n in range(BACKLOG + 2)]
        jira = GatedJira(*(issue(key=key) for key in keys))
        harness = Harness(store, jira=jira, TRIGGER_ACTORS="1", NOTIFICATIONS_ENABLED="true",
                          LANES_NOTIFICATION_SHARE=share, INTAKE_PRIORITY="0s").start()
        started.append(harness)
        return harness

    yield make
    for harness in started:
        harness.stop()


def backlog_then_notification(harness: Harness) -> tuple[list[str], dict]:
    """One ordinary trigger holds the only actor; 20 more and then a notification queue up;
    the order in which their issues are loaded once the actor is free, and the lanes as the
    admin view showed them while they waited."""
    runtime, jira = harness.runtime, harness.jira
    runtime.accept_trigger("jira_automation", "TCID-0")
    assert jira.entered.wait(BOUND)
    for n in range(1, BACKLOG + 1):
        runtime.accept_trigger("jira_automation", f"TCID-{n}")
    runtime.accept_trigger("jira_assignment_assignee", f"TCID-{BACKLOG + 1}")
    lanes = runtime.status()["trigger_actors"]["lanes"]
    jira.gate.set()
    harness.wait_idle()
    return list(jira.loads), {lane: shown["queued"] for lane, shown in lanes.items()}


def test_a_notification_behind_a_backlog_of_ordinary_triggers_is_processed_next(make):
    loads, waiting = backlog_then_notification(make("4"))

    assert waiting == {"notification": 1, "ordinary": BACKLOG}
    assert loads[:2] == ["TCID-0", f"TCID-{BACKLOG + 1}"]
    assert loads[2:] == [f"TCID-{n}" for n in range(1, BACKLOG + 1)]  # then in order


def test_with_the_lanes_off_it_waits_behind_the_whole_backlog(make):
    loads, waiting = backlog_then_notification(make("0"))

    assert waiting == {"notification": 0, "ordinary": BACKLOG + 1}  # one line
    assert loads == [f"TCID-{n}" for n in range(BACKLOG + 2)]


class GatedKeyJira(FakeJira):
    """Loads of ``held`` block until the test opens the gate."""

    def __init__(self, held: str, *issues):
        super().__init__(*issues)
        self.held = held
        self.gate = threading.Event()
        self.entered = threading.Event()

    def load_issue(self, key):
        if key == self.held:
            self.entered.set()
            assert self.gate.wait(BOUND), "the test never opened the gate"
        return super().load_issue(key)


def test_a_backlog_of_triggers_retrying_a_rate_limit_does_not_delay_a_notification(store):
    """Twenty triggers met Jira's 429 and wait for their next try; when it comes, the one
    trigger actor is busy and they queue up together with a notification trigger posted then:
    the notification is processed next, the retried ones after it."""
    keys = [f"TCID-{n}" for n in range(BACKLOG + 2)]
    jira = GatedKeyJira("TCID-0", *(issue(key=key) for key in keys))
    harness = Harness(store, jira=jira, TRIGGER_ACTORS="1", NOTIFICATIONS_ENABLED="true",
                      INTAKE_PRIORITY="0s", TRIGGER_POLL_INTERVAL="1s").start()
    try:
        runtime = harness.runtime
        retrying = [f"TCID-{n}" for n in range(1, BACKLOG + 1)]
        for key in retrying:
            jira.fail_next(key, times=1, status=429)
            runtime.accept_trigger("jira_automation", key)
        harness.wait_idle()
        assert len(jira.loads) == BACKLOG  # each refused once, back to pending
        runtime.accept_trigger("jira_automation", "TCID-0")
        assert jira.entered.wait(BOUND)

        harness.clock.advance(5)  # their next try comes: the poll queues them
        harness.wait_until(lambda: runtime.status()["trigger_actors"]["lanes"]["ordinary"][
            "queued"] == BACKLOG)
        runtime.accept_trigger("jira_assignment_assignee", f"TCID-{BACKLOG + 1}")
        jira.gate.set()
        harness.wait_idle()

        later = jira.loads[BACKLOG:]
        assert later[:2] == ["TCID-0", f"TCID-{BACKLOG + 1}"]
        assert sorted(later[2:]) == sorted(retrying)
        assert all(harness.store.triggers.get(n).status.value == "completed"
                   for n in range(1, BACKLOG + 3))
    finally:
        harness.stop()
