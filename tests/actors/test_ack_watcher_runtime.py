"""The ACK watcher on the real runtime and both databases: a parked page wait is looked at in
batches without its execution, every look is saved as the wait's own poll would save it, and
the execution is woken only when the guard has something to say or the deadline comes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.actors.conftest import urgent_harness
from tests.actors.test_notification_card_runtime import ASSIGNEE, put
from tests.actors.test_notification_page_runtime import page_context
from tests.domain.test_notification_page import PENDING, POLL, TIMEOUT
from tests.factories import OPERATOR_AUTHOR
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.errors import IntegrationError

KEYS = ("TCID-1", "TCID-2", "TCID-3")


@pytest.fixture
def world(urgent_world):
    return urgent_world


def start_waits(world, keys=KEYS) -> list[int]:
    """One urgent notification parked in attempt 1's ACK wait per key, all at one time."""
    ids = []
    for key in keys:
        put(world, key=key, severity="S1", status=PENDING)
        ids.append(world.post_trigger(key, source=ASSIGNEE).execution_ids[0])
    return ids


def looks(world, result: str) -> float:
    return world.metrics.registry.get_sample_value(
        "ticket_manager_dispatch_ack_watch_looks_total", {"result": result}) or 0


def test_waits_due_together_are_read_in_one_search_and_their_executions_stay_parked(world):
    ids = start_waits(world)
    loads_before = list(world.jira.loads)

    world.advance(POLL)
    world.advance(POLL)

    assert world.jira.searches == [sorted(KEYS), sorted(KEYS)]
    assert world.jira.loads[len(loads_before):] == sorted(KEYS) * 2  # only the searches read
    assert looks(world, "parked") == 6
    for execution_id in ids:
        ex = world.execution(execution_id)
        assert ex.status is ExecutionStatus.EXECUTING
        assert page_context(ex)["polls"] == 2  # saved as the wait's own polls would be
        assert ex.wake_at == world.clock.now() + timedelta(seconds=POLL)
    status = world.runtime.status()
    assert (status["pool"]["busy"], status["pool"]["parked"]) == (0, 3)
    assert {p["wake_at"] for p in status["parked_executions"]} == {
        world.execution(ids[0]).to_json()["wake_at"]}


def test_a_read_ack_wakes_only_its_execution_which_writes_the_ack_comment_once(world):
    first, second, third = start_waits(world)
    world.lark.readers[f"om_td-{second}-0-0"] = ["ou_alice"]

    world.advance(POLL)

    assert world.execution(second).status is ExecutionStatus.SUCCEEDED
    assert page_context(world.execution(second))["outcome"] == "ack"
    assert [world.execution(i).status for i in (first, third)] == [ExecutionStatus.EXECUTING] * 2
    comments = [text for key, _, text in world.jira.calls("add_internal_comment")
                if "acknowledged" in text]
    assert len(comments) == 1
    assert looks(world, "woken") == 1 and looks(world, "parked") == 2


def test_a_failed_search_hands_every_wait_back_to_its_execution(world):
    ids = start_waits(world)
    world.jira.fail_next("TCID-2")  # the search names it: Jira answers the whole search 503

    world.advance(POLL)

    assert looks(world, "woken") == 3
    for execution_id in ids:  # each looked for itself, read its issue and parked again
        ex = world.execution(execution_id)
        # two looks saved: the watcher's (saved before it reads), then the execution's own
        assert ex.status is ExecutionStatus.EXECUTING and page_context(ex)["polls"] == 2
        assert ex.wake_at == world.clock.now() + timedelta(seconds=POLL)
    world.advance(POLL)  # the next look is the watcher's again
    assert looks(world, "parked") == 3


def test_a_failed_read_list_wakes_its_execution_to_record_the_warning(world):
    [execution_id] = start_waits(world, KEYS[:1])
    world.lark.fail["read_user_ids"] = [IntegrationError("lark answered 500", status=500)] * 2

    world.advance(POLL)

    page = page_context(world.execution(execution_id))
    assert page["polls"] == 2  # the watcher's look, then the execution's
    assert any("read users could not be read" in warning for warning in page["warnings"])


def test_the_deadline_is_the_executions_own_and_the_next_attempt_pages(world):
    [execution_id] = start_waits(world, KEYS[:1])

    world.advance(TIMEOUT)

    ex = world.execution(execution_id)
    assert page_context(ex, 1)["outcome"] == "timeout"
    assert len(world.oncall.pages) == 2
    assert looks(world, "deadline") >= 1


def test_a_wait_cancelled_while_watched_is_dropped_at_its_next_look(world):
    [execution_id] = start_waits(world, KEYS[:1])

    assert world.runtime.cancel(execution_id, "operator",
                                by=OPERATOR_AUTHOR) in ("applied", "signalled")
    world.wait_idle()
    world.advance(POLL)

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.FAILED
    assert "polls" not in page_context(ex) or page_context(ex)["polls"] is None
    assert world.jira.searches == []  # nothing left to read for
    assert looks(world, "gone") == 1


def test_after_a_restart_the_watcher_looks_at_the_recovered_waits_without_their_executions(
        world):
    ids = start_waits(world)
    world.restart()
    loads_before, reads_before = list(world.jira.loads), len(world.lark.reads)

    world.advance(POLL)

    assert world.jira.searches == [sorted(KEYS)]  # one search, no execution's own load
    assert world.jira.loads[len(loads_before):] == sorted(KEYS)
    assert len(world.lark.reads) - reads_before == 3  # each card's readers, once
    assert looks(world, "parked") == 3
    for execution_id in ids:
        assert page_context(world.execution(execution_id))["polls"] == 1
    assert world.runtime.status()["ack_watch"]["watched"] == 3


@pytest.fixture
def paced(store):
    """The urgent world with the watcher paced to one look every 4 s: three waits (a round
    of 12 s) need more than their 10 s poll."""
    harness = urgent_harness(store, ACK_WATCH_LOOKS_PER_SECOND="0.25")
    yield harness
    harness.stop()


def test_more_waits_than_the_pace_allows_take_turns_and_keep_their_deadline(paced):
    ids = start_waits(paced)
    start = paced.clock.now()

    paced.advance(POLL)  # the first looks are at the wake_at each execution parked with

    assert paced.jira.searches == [sorted(KEYS)]
    turns = [paced.execution(execution_id).wake_at - start for execution_id in ids]
    assert turns == [timedelta(seconds=s) for s in (2 * POLL, 2 * POLL + 4, 2 * POLL + 8)]
    view = paced.runtime.status()["ack_watch"]
    assert view == {"watched": 3, "round_seconds": 12.0, "looks_per_second": 0.25}
    assert paced.metrics.registry.get_sample_value(
        "ticket_manager_dispatch_ack_watch_round_seconds") == 12.0

    paced.advance(POLL)  # only the first wait's turn has come
    assert paced.jira.searches[1:] == [[KEYS[0]]]
    paced.advance(4)
    assert paced.jira.searches[1:] == [[KEYS[0]], [KEYS[1]]]
    assert looks(paced, "parked") == 5

    paced.advance(TIMEOUT - 2 * POLL - 4)  # the deadline is not paced: the next attempt pages
    assert [page_context(paced.execution(i), 1)["outcome"] for i in ids] == ["timeout"] * 3
    assert len(paced.oncall.pages) == 6


def test_in_shared_mode_a_wait_its_replica_left_is_looked_at_by_another_without_a_slot(
        db_url, store):
    if not db_url.startswith("postgres"):
        pytest.skip("replicas share a PostgreSQL database")
    shared = {"CLUSTER_MODE": "shared", "DATABASE_URL": db_url}
    first = urgent_harness(store, **shared)
    try:
        [execution_id] = start_waits(first, KEYS[:1])
    finally:
        first.stop()  # the replica is gone; its wait stays parked, held by nobody
    second = urgent_harness(store, clock=first.clock, **shared)
    try:
        put(second, key=KEYS[0], severity="S1", status=PENDING)

        second.advance(POLL)  # due now: the next round of adoption takes it

        assert second.jira.searches == [[KEYS[0]]]
        assert second.jira.loads == [KEYS[0]]  # the search's: its execution never ran
        ex = second.execution(execution_id)
        assert ex.status is ExecutionStatus.EXECUTING and page_context(ex)["polls"] == 1
        assert ex.wake_at == second.clock.now() + timedelta(seconds=POLL)
        status = second.runtime.status()
        assert status["ack_watch"]["watched"] == 1 and status["pool"]["parked"] == 1

        second.lark.readers[f"om_td-{execution_id}-0-0"] = ["ou_alice"]
        second.advance(POLL)  # its next look finds the ACK and wakes it here

        assert second.execution(execution_id).status is ExecutionStatus.SUCCEEDED
        assert page_context(second.execution(execution_id))["outcome"] == "ack"
    finally:
        second.stop()
