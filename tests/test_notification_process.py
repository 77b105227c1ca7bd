"""Parked ACK waits through a real process: ``kill -9`` the served process during an ACK wait,
restart it on the same database: no page repeats, and the next poll keeps the original deadline
(docs/design.md, "Checkpoints and at-most-once").

A real ``ticket-dispatcher serve`` (tests/process.py) runs with the assignment notification on,
against the independent fakes of Jira (tests/peer.py) and Lark, Oncall and Core
(tests/peer_notify.py). The policy family is created and activated over the product's HTTP
API, the urgent issue lives in the fake Jira, and the reserved-source trigger is posted over
HTTP. The process is killed with SIGKILL (no shutdown code runs) either while the execution is
parked between two polls, or while a poll's read-users call is in flight; a new process on
the same database must resume the wait: the Oncall fake counts every page request (it does not
deduplicate), so a repeated page shows. Attempt 1 waits 20 s with a 1 s poll, so the ACK
given after the restart always lands inside its deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.peer import FakeJira
from tests.peer_notify import LarkRoute, OncallRoute
from tests.process import (
    Dispatcher,
    Processes,
    assignee_notification_policy,
    notification_settings,
    wait_until,
)
from ticket_dispatcher.store import Store
from ticket_dispatcher.timeutil import parse_rfc3339

PROJECT, KEY = "PAGE", "PAGE-1"
SOURCE, LABEL = "jira_assignment_assignee", "notify-assignee"  # the assignee role
EMAIL, ACCOUNT, OPEN_ID, NAME = "alice@example.com", "acc-alice", "ou_alice", "Alice Example"
PENDING = "Todo"  # ack_pending_statuses: still waiting for the first response
POLL, ACK_TIMEOUT = "1s", "20s"


def notification_policy() -> dict:
    """The priority-assignee family of ops/examples, for one project and two attempts."""
    return assignee_notification_policy(
        "Assignment Notification - PAGE Assignee", PROJECT, urgent=["P0", "P1"], attempts=2,
        ack_timeout=ACK_TIMEOUT, poll_interval=POLL, pending=PENDING)


# --- the world: four fakes and the processes --------------------------------------------------


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_user(EMAIL, ACCOUNT, NAME)
        fake.add_issue(KEY, labels=[LABEL], assignee=ACCOUNT, priority="P0", status=PENDING)
        yield fake


@pytest.fixture
def person() -> tuple[str, str, str]:
    """Who the notification peers know (the ``lark``, ``oncall`` and ``core`` fixtures of
    tests/conftest.py)."""
    return EMAIL, NAME, OPEN_ID


@pytest.fixture
def dispatchers(db_url, jira, lark, oncall, core) -> Iterator[Callable[[], Dispatcher]]:
    """``dispatchers()`` starts a serve process on the test's database (once per engine) with
    the notification on and every peer pointing at its fake; all are stopped at the end."""
    settings = notification_settings(lark, oncall, core)
    started = Processes()
    yield lambda: started.start(db_url, jira, **settings)
    started.stop_all()


# --- reading the execution ----------------------------------------------------------------------


def activate_policy(dispatcher: Dispatcher) -> None:
    dispatcher.activate(notification_policy())


def page_of(execution: dict, attempt: int) -> dict:
    """The ``page_assignment`` action execution of ``attempt``."""
    [action] = [a for rule in execution["rule_executions"] for a in rule["action_executions"]
                if a["type"] == "page_assignment"
                and a["action"]["page_assignment"]["attempt"] == attempt]
    return action


def parked_view(dispatcher: Dispatcher, execution_id: int) -> dict | None:
    """The execution's entry in GET /admin/actors ``parked_executions``, if parked now."""
    parked = dispatcher.call("GET", "/admin/actors")["parked_executions"]
    return next((view for view in parked if view["execution_id"] == execution_id), None)


def waiting_for_ack(dispatcher: Dispatcher, attempt: int) -> tuple[dict, dict] | None:
    """(execution, parked view) once the execution is parked in ``attempt``'s ACK wait."""
    execution = dispatcher.execution_of(KEY)
    view = execution and parked_view(dispatcher, execution["id"])
    if view and view["attempt"] == attempt and view["deadline"]:
        # Read again: the first read may predate the checkpoints saved before the park.
        return dispatcher.execution_of(KEY), view
    return None


def polled(dispatcher: Dispatcher, polls: int) -> dict | None:
    """The execution once attempt 1's wait has looked for its ACK ``polls`` times in all."""
    execution = dispatcher.execution_of(KEY)
    if execution and page_of(execution, 1)["context"]["page"].get("polls", 0) >= polls:
        return execution
    return None


def stored_execution(database_url: str, execution_id: int) -> dict:
    """The execution as the database has it, read while no server runs."""
    store = Store.for_url(database_url)
    try:
        return store.executions.get(execution_id).to_json()
    finally:
        store.close()


def comments(jira: FakeJira, text: str) -> list[str]:
    return [c.body for c in jira.comments(KEY) if text in c.body and not c.public]


# --- the test -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("kill_point", ["parked", "mid_poll"])
def test_sigkill_in_the_ack_wait_then_restart_pages_no_more_and_keeps_the_deadline(
        dispatchers, db_url, jira, lark, oncall, kill_point):
    first = dispatchers().wait_serving()
    activate_policy(first)
    first.post_trigger(KEY, source=SOURCE)
    execution, view = wait_until(lambda: waiting_for_ack(first, 1), 15,
                                 "page 1 is placed and the execution parks in its ACK wait")
    execution_id = execution["id"]
    deadline = page_of(execution, 1)["context"]["page"]["deadline"]
    assert view["deadline"] == deadline
    assert [page.dedup_key for page in oncall.pages()] == [f"td-{execution_id}-1-1"]
    if kill_point == "mid_poll":  # the next poll's read-users call never gets its answer
        gate = lark.hold(LarkRoute.READ_USERS)
        assert gate.wait_until_held(1, timeout=5), "no poll read the card's readers"

    first.process.kill()  # SIGKILL: no shutdown, no last checkpoint
    assert first.wait_exit(timeout=10) == -9
    assert first.log_problems() == []
    if kill_point == "mid_poll":
        gate.release()  # the held call is answered to nobody
    at_kill = stored_execution(db_url, execution_id)
    page_at_kill = page_of(at_kill, 1)["context"]["page"]
    assert at_kill["status"] == "executing"
    assert (page_at_kill["deadline"], page_at_kill["page_phase"]) == (deadline, "finished")
    polls_at_kill = page_at_kill.get("polls", 0)

    second = dispatchers().wait_serving()

    # Two polls of the resumed wait, so a restart that pages again has had its chance.
    resumed = wait_until(lambda: polled(second, polls_at_kill + 2), 10,
                         "the restarted process polls the ACK wait twice")
    page = page_of(resumed, 1)["context"]["page"]
    assert len(oncall.calls(OncallRoute.PAGE)) == 1, oncall.pages()
    assert (page["deadline"], page["page_status"]) == (deadline, "accepted")
    assert resumed["status"] == "executing"
    assert parse_rfc3339(resumed["wake_at"]) <= parse_rfc3339(deadline)
    assert page_of(resumed, 2)["status"] == "pending"
    view = wait_until(lambda: parked_view(second, execution_id), 5,
                      "the resumed execution parks again")
    assert (view["attempt"], view["deadline"]) == (1, deadline)
    assert parse_rfc3339(view["wake_at"]) <= parse_rfc3339(deadline)
    # The card and its App-urgent happened once, before the kill, and stay once.
    [card] = lark.messages()
    assert len(lark.calls(LarkRoute.SEND)) == 1
    assert (card.receive_id, card.urgent_for) == (OPEN_ID, [OPEN_ID])
    assert len(lark.calls(LarkRoute.URGENT_APP)) == 1
    assert len(comments(jira, "Urgent: no")) == 1
    assert len(comments(jira, "Urgent: yes\nAttempt: 1")) == 1

    lark.mark_read(card.message_id, OPEN_ID)  # the target reads the card: a read ACK

    done = second.wait_status(KEY, "succeeded", timeout=10)
    page = page_of(done, 1)["context"]["page"]
    assert (page["outcome"], page["reason"], page["deadline"]) == ("ack", "read", deadline)
    assert page_of(done, 2)["status"] == "skipped"
    assert len(comments(jira, "acknowledged")) == 1
    assert len(oncall.calls(OncallRoute.PAGE)) == 1  # no page 2
    assert len(jira.comments(KEY)) == 3
    assert second.log_problems() == []
