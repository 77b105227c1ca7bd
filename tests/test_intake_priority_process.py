"""A burst of trigger requests at a real ``ticket-dispatcher serve`` process, on each engine:
every request is answered 202 and every trigger is processed once the burst is over, whether
the trigger actors wait for the intake (``intake_priority``, the default) or not (``0``); the
time they waited is the metric ``trigger_intake_priority_seconds_total``
(docs/design.md, "Answer first, process next").

The fake Jira (tests/peer.py) knows the issue and no policy matches it, so each trigger ends
``completed`` after one issue read.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.peer import FakeJira, Route
from tests.process import Dispatcher, Processes, wait_until

BURST = 240  # trigger requests
POSTERS = 16  # sent at once, as Jira Automation rules firing together do
KEY = "BURST-1"
PREFIX = "ticket_manager_dispatch_"


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_issue(KEY)
        yield fake


@pytest.fixture
def processes() -> Iterator[Processes]:
    started = Processes()
    yield started
    started.stop_all()


def samples(dispatcher: Dispatcher) -> dict[tuple[str, tuple], float]:
    text = requests.get(f"{dispatcher.url}/metrics", timeout=10).text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def completed(dispatcher: Dispatcher) -> float:
    return samples(dispatcher).get(
        (PREFIX + "trigger_results_total", (("outcome", "completed"),)), 0)


def burst(dispatcher: Dispatcher) -> list[int]:
    """``BURST`` trigger requests from ``POSTERS`` senders at once; their status codes."""
    def post(_: int) -> int:
        return requests.post(f"{dispatcher.url}/api/v1/ticketmanager/dispatch/triggers",
                             json={"source": "jira_automation", "input": {"issue_key": KEY}},
                             timeout=30).status_code

    with ThreadPoolExecutor(POSTERS) as senders:
        return list(senders.map(post, range(BURST)))


@pytest.mark.parametrize("hold, waits", [("1s", True), ("0s", False)],
                         ids=["default-hold", "never-waits"])
def test_a_burst_is_answered_and_then_every_trigger_is_processed(db_url, jira, processes,
                                                                   hold, waits):
    dispatcher = processes.start(db_url, jira, INTAKE_PRIORITY=hold).wait_serving()

    assert burst(dispatcher) == [202] * BURST

    wait_until(lambda: completed(dispatcher) == BURST, 60, "every trigger is completed")
    metrics = samples(dispatcher)
    accepted = metrics[(PREFIX + "trigger_intake_total",
                        (("outcome", "accepted"), ("source", "jira_automation")))]
    held = metrics[(PREFIX + "trigger_intake_priority_seconds_total", ())]
    assert accepted == BURST
    assert len(jira.calls(Route.GET_ISSUE, KEY)) == BURST  # one issue read a trigger
    # Sixteen senders never leave the intake idle for long: with the hold on, trigger
    # actors found requests being accepted when they came to their next trigger.
    assert (held > 0) is waits
    assert dispatcher.log_problems() == []
