"""The page counter of a real ``serve`` process moves as soon as a page fails, while the
workflow is still parked in its ACK wait, and a restart does not count that page again
(docs/operations.md, "Metrics"; the alert is ``TicketDispatcherOncallPageFailed``).

The process runs against the fakes of tests/peer.py and tests/peer_notify.py; Oncall knows no
phone number for the engineer, so every page answers ``no_phone_number``. Attempt 1 waits 20 s
with a 1 s poll: the wait is still running when ``/metrics`` is read, so the terminal
notification families have nothing yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.peer import FakeJira
from tests.peer_notify import FakeCore, FakeLark, FakeOncall
from tests.process import (
    Dispatcher,
    Processes,
    assignee_notification_policy,
    notification_settings,
    wait_until,
)
from tests.test_notification_process import (
    ACCOUNT,
    EMAIL,
    KEY,
    LABEL,
    NAME,
    OPEN_ID,
    PENDING,
    PROJECT,
    SOURCE,
    page_of,
    polled,
    waiting_for_ack,
)

CALLS = "ticket_manager_dispatch_assignment_calls_total"
# Counted when a workflow ends; they must not have moved while it waits.
TERMINAL = ("ticket_manager_dispatch_assignment_action",
            "ticket_manager_dispatch_assignment_notification_events",
            "ticket_manager_dispatch_assignment_ack",
            "ticket_manager_dispatch_assignment_workflow_duration_seconds")


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_user(EMAIL, ACCOUNT, NAME)
        fake.add_issue(KEY, labels=[LABEL], assignee=ACCOUNT, priority="P0", status=PENDING)
        yield fake


@pytest.fixture
def peers() -> Iterator[tuple[FakeLark, FakeOncall, FakeCore]]:
    """Lark and Core know Alice; Oncall has no phone number for her."""
    with FakeLark() as lark, FakeOncall() as oncall, FakeCore() as core:
        lark.add_user(EMAIL, OPEN_ID)
        core.add_user(EMAIL, NAME, open_id=OPEN_ID)
        yield lark, oncall, core


@pytest.fixture
def dispatchers(db_url, jira, lark, oncall, core) -> Iterator[Callable[[], Dispatcher]]:
    settings = notification_settings(lark, oncall, core)
    started = Processes()
    yield lambda: started.start(db_url, jira, **settings)
    started.stop_all()


def calls(dispatcher: Dispatcher) -> dict[tuple[str, str, str, str], float]:
    """``assignment_calls_total`` by (call, result, role, attempt), and the terminal
    notification families' sample count under the key ``("terminal", ...)``."""
    text = requests.get(f"{dispatcher.url}/metrics", timeout=10).text
    found: dict[tuple[str, str, str, str], float] = {}
    terminal = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == CALLS:
                labels = sample.labels
                found[labels["call"], labels["result"], labels["role"],
                      labels["attempt"]] = sample.value
            elif family.name in TERMINAL:
                terminal += 1
    found["terminal", "", "", ""] = terminal
    return found


def moved(counts: dict) -> dict:
    return {key: value for key, value in counts.items() if value}


@pytest.mark.timeout(60)
def test_a_failed_page_moves_the_page_counter_while_the_workflow_still_waits(dispatchers, db_url,
                                                                             oncall):
    first = dispatchers().wait_serving()
    first.activate(assignee_notification_policy(
        "Assignment Notification - PAGE Assignee", PROJECT, urgent=["P0"], attempts=2,
        ack_timeout="20s", poll_interval="1s", pending=PENDING))
    first.post_trigger(KEY, source=SOURCE)

    execution, view = wait_until(lambda: waiting_for_ack(first, 1), 15,
                                 "page 1 fails and the execution parks in its ACK wait")

    page = page_of(execution, 1)["context"]["page"]
    assert (page["page_status"], page["call_error"]) == ("failed", "no_phone_number")
    assert execution["status"] == "executing" and view["attempt"] == 1
    assert [p.accepted for p in oncall.pages()] == [False]
    # the card, its App-urgent and the failed page, and nothing of the terminal families
    assert moved(calls(first)) == {("card", "succeeded", "assignee", ""): 1,
                                   ("urgent", "succeeded", "assignee", ""): 1,
                                   ("page", "failed", "assignee", "1"): 1}

    first.process.kill()  # SIGKILL: the new process must not count page 1 again
    assert first.wait_exit(timeout=10) == -9
    polls = page.get("polls", 0)
    second = dispatchers().wait_serving()
    resumed = wait_until(lambda: polled(second, polls + 2), 10,
                         "the restarted process polls the ACK wait twice")

    assert resumed["status"] == "executing"
    assert page_of(resumed, 2)["status"] == "pending"  # page 2 is not due yet
    assert moved(calls(second)) == {}
    assert len(oncall.pages()) == 1
    assert first.log_problems() == [] and second.log_problems() == []
