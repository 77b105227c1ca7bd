"""``page_assignment`` on the real runtime and database: the ACK wait is parked with its slot
freed, wakes at poll intervals, ends on an ACK, and three attempts without one are three
pages."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.actors.test_notification_card_runtime import ASSIGNEE, put
from tests.domain.test_notification_card import BOB
from tests.domain.test_notification_page import PENDING, POLL, TIMEOUT
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    Execution,
    ExecutionStatus,
    TriggerStatus,
)
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.call_policy import first_calls
from ticket_dispatcher.timeutil import format_time


@pytest.fixture
def world(urgent_world):
    return urgent_world


def start(h) -> tuple[int, Execution]:
    put(h, severity="S1", status=PENDING)
    trigger = h.post_trigger(source=ASSIGNEE)
    execution_id = trigger.execution_ids[0]
    return execution_id, h.execution(execution_id)


def page_context(ex: Execution, attempt: int = 1) -> dict:
    return ex.rule_executions[1].action_executions[attempt].context["page"]


def test_the_ack_wait_is_parked_with_its_slot_freed_and_wakes_at_each_poll(world):
    start_time = world.clock.now()
    execution_id, ex = start(world)

    assert ex.status is ExecutionStatus.EXECUTING and len(world.oncall.pages) == 1
    assert ex.wake_at == start_time + timedelta(seconds=POLL)
    status = world.runtime.status()
    assert (status["pool"]["busy"], status["pool"]["parked"]) == (0, 1)
    [parked] = status["parked_executions"]
    assert parked["execution_id"] == execution_id and parked["issue_key"] == ex.issue_key
    assert parked["wake_at"] == format_time(start_time + timedelta(seconds=POLL))
    assert parked["action"].endswith("1:page_assignment")
    assert (parked["attempt"], parked["deadline"]) == (1, page_context(ex)["deadline"])

    world.advance(POLL)
    ex = world.execution(execution_id)
    assert page_context(ex)["polls"] == 1
    assert ex.wake_at == start_time + timedelta(seconds=2 * POLL)
    assert world.runtime.status()["pool"]["busy"] == 0


def test_an_ack_mid_wait_ends_the_workflow_and_skips_the_other_pages(world):
    execution_id, _ = start(world)
    world.lark.readers[f"om_td-{execution_id}-0-0"] = ["ou_alice"]

    world.advance(POLL)

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED and ex.wake_at is None
    assert page_context(ex)["outcome"] == "ack"
    assert [a.status for a in ex.rule_executions[1].action_executions[1:]] == [
        ActionStatus.SUCCEEDED, ActionStatus.SKIPPED, ActionStatus.SKIPPED]
    comments = [text for _, _, text in world.jira.calls("add_internal_comment")]
    assert sum("acknowledged" in c for c in comments) == 1
    world.advance(3 * TIMEOUT)
    assert len(world.oncall.pages) == 1


def test_three_attempts_without_an_ack_are_three_pages_and_the_execution_succeeds(world):
    execution_id, _ = start(world)

    for _ in range(3 * TIMEOUT // POLL):
        world.advance(POLL)

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert [p[4] for p in world.oncall.pages] == [
        f"td-{execution_id}-1-{n}" for n in (1, 2, 3)]
    assert [page_context(ex, n)["outcome"] for n in (1, 2, 3)] == ["timeout"] * 3
    comments = [text for _, _, text in world.jira.calls("add_internal_comment")]
    assert sum("Urgent: yes" in c for c in comments) == 3


def test_a_restart_mid_wait_pages_no_more_and_keeps_the_deadline(world):
    execution_id, ex = start(world)
    deadline = page_context(ex)["deadline"]
    world.advance(POLL + 5)  # the process dies mid-wait and comes back late

    world.restart()
    world.wait_idle()

    ex = world.execution(execution_id)
    assert page_context(ex)["deadline"] == deadline and len(world.oncall.pages) == 1
    assert ex.wake_at == world.clock.now() + timedelta(seconds=POLL)  # polled on recovery
    world.advance(TIMEOUT - POLL - 5)  # exactly the original deadline
    ex = world.execution(execution_id)
    assert page_context(ex)["outcome"] == "timeout"
    assert len(world.oncall.pages) == 2


def test_a_status_ack_after_the_page_is_seen_at_the_next_poll(world):
    execution_id, _ = start(world)
    world.jira.put(replace(world.jira.issues["TCID-1"], status="In Progress"))

    world.advance(POLL)

    ex = world.execution(execution_id)
    assert (page_context(ex)["outcome"], page_context(ex)["reason"]) == ("ack", "status")
    assert ex.status is ExecutionStatus.SUCCEEDED


def test_each_poll_of_a_parked_wait_reads_the_issue_from_jira_once(world):
    start(world)
    before = len(world.jira.loads)

    world.advance(POLL)

    # the woken execution loads the live issue, and its guard uses that very answer
    assert len(world.jira.loads) - before == 1


# -- on the runtime: what is no ACK, what ends the workflow, what still pages ------------------


def _pages_by_attempt(ex: Execution) -> list[str]:
    return [a.status.value for a in ex.rule_executions[1].action_executions[1:]]


@pytest.mark.parametrize("read", ["someone else", "an older card"])
def test_a_read_that_is_not_the_targets_of_this_card_is_no_ack(world, read):
    execution_id, _ = start(world)
    if read == "someone else":
        world.lark.readers[f"om_td-{execution_id}-0-0"] = ["ou_bob"]
    else:
        world.lark.readers["om_td-1-0-0-an-older-card"] = ["ou_alice"]

    for _ in range(TIMEOUT // POLL):
        world.advance(POLL)

    ex = world.execution(execution_id)
    assert page_context(ex)["outcome"] == "timeout" and len(world.oncall.pages) == 2


@pytest.mark.parametrize(("change", "reason"), [
    ({"assignee": BOB}, "target changed"),
    ({"assignee": None}, "target changed"),
    ({"severity": "S3"}, "urgency downgraded"),
])
def test_an_invalidation_mid_wait_ends_the_workflow_without_an_ack_comment(world, change,
                                                                          reason):
    execution_id, _ = start(world)
    world.jira.put(replace(world.jira.issues["TCID-1"], **change))

    world.advance(POLL)

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert (page_context(ex)["outcome"], page_context(ex)["reason"]) == ("invalidated", reason)
    assert _pages_by_attempt(ex) == ["succeeded", "skipped", "skipped"]
    comments = [text for _, _, text in world.jira.calls("add_internal_comment")]
    assert not any("acknowledged" in c for c in comments)
    world.advance(3 * TIMEOUT)
    assert len(world.oncall.pages) == 1


def test_an_ack_already_there_when_the_urgent_rule_runs_means_no_page(world):
    put(world, severity="S1", status="In Progress")  # someone already works on it

    trigger = world.post_trigger(source=ASSIGNEE)

    ex = world.execution(trigger.execution_ids[0])
    assert ex.status is ExecutionStatus.SUCCEEDED and world.oncall.pages == []
    urgent = ex.rule_executions[1].action_executions[0].context["urgent"]
    assert (urgent["outcome"], urgent["reason"]) == ("ack", "status")


@pytest.mark.parametrize("failing", ["send_card", "urgent_app"])
def test_a_failed_card_or_urgent_still_goes_on_to_page(world, failing):
    world.lark.fail[failing] = [IntegrationError("lark down", service="lark")]

    execution_id, ex = start(world)

    assert len(world.oncall.pages) == 1 and ex.status is ExecutionStatus.EXECUTING
    assert page_context(ex)["page_status"] == "accepted"


def test_a_deferred_trigger_reads_the_latest_target_once_the_family_is_free(world):
    first_id, _ = start(world)  # alice's workflow waits in page 1
    put(world, assignee=BOB, severity="S1", status=PENDING)  # reassigned: the label is back
    deferred = world.post_trigger(source=ASSIGNEE)
    duplicate = world.post_trigger(source=ASSIGNEE)  # Automation fired twice
    assert deferred.status is TriggerStatus.PENDING
    assert duplicate.status is TriggerStatus.COMPLETED  # coalesced into the deferred one

    world.advance(POLL)  # alice's guard sees bob: her workflow ends
    assert page_context(world.execution(first_id))["reason"] == "target changed"
    world.advance(5)  # the deferred trigger's next try finds the family free

    [second_id] = world.trigger(deferred.id).execution_ids
    second = world.execution(second_id)
    card = second.rule_executions[0].action_executions[0].context["notification"]
    assert card["snapshot"]["target"]["account_id"] == BOB.account_id
    assert [send[0] for send in world.lark.sends] == ["ou_alice", "ou_bob"]


# -- Jira down while a wait runs: the phone channel is not held up by a failed read ------------


def test_jira_down_at_the_deadline_still_pages_the_next_attempt_at_the_deadline(world):
    """The interleaving: attempt 1 paged, Jira starts answering 503 mid-wait, the wait's
    deadline comes. The woken execution's issue load fails; the page goes on without it (the
    failed read is the guard's no verdict) instead of parking on the load's retry backoff,
    which used to move attempt 2 to 5, 15, 35 … s after the deadline."""
    execution_id, ex = start(world)
    issue_key = ex.issue_key
    world.advance(POLL)
    world.jira.fail_next(issue_key, times=1000)  # the watcher's searches fail as well

    world.advance(TIMEOUT - POLL)  # the deadline

    ex = world.execution(execution_id)
    assert page_context(ex, 1)["outcome"] == "timeout"
    assert len(world.oncall.pages) == 2 and ex.load_attempts == 0
    assert any("could not be read (jira answered 503" in warning
               for warning in page_context(ex, 2)["warnings"])
    assert world.oncall.pages[1][3] == issue_key


def test_a_jira_outage_longer_than_the_load_retries_still_pages_every_attempt(world):
    """Jira fails through the whole notification (90 s here; the load retries alone would
    give up after 155 s and fail the execution ``issue_load_failed`` with no further page):
    every attempt pages at its deadline, and the execution succeeds."""
    execution_id, ex = start(world)
    summary = world.jira.issues[ex.issue_key].summary
    world.jira.fail_next(ex.issue_key, times=1000)

    for _ in range(3 * TIMEOUT // POLL):
        world.advance(POLL)

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED and not ex.failure_code
    assert [page_context(ex, n)["outcome"] for n in (1, 2, 3)] == ["timeout"] * 3
    assert len(world.oncall.pages) == 3
    # each page's message still names the issue's summary, from the card's snapshot
    assert summary and all(f"{ex.issue_key} {summary} (attempt" in message
                           for _, _, message, *_ in world.oncall.pages)


def test_jira_refusing_the_issue_holds_the_page_on_the_load_retry(world):
    """A 403 (the issue out of reach) is an answer, not an outage: the page does not go on
    without the issue; the load is retried, as for any step."""
    execution_id, ex = start(world)
    world.advance(POLL)
    world.jira.fail_next(ex.issue_key, times=1000, status=403)

    world.advance(TIMEOUT - POLL)

    ex = world.execution(execution_id)
    assert len(world.oncall.pages) == 1 and ex.load_attempts >= 1
    assert page_context(ex, 1).get("outcome") is None


def test_a_notifications_jira_calls_are_made_to_go_first_under_a_budget(world, monkeypatch):
    first: list[bool] = []
    load, search = world.jira.load_issue, world.jira.load_issues

    def loading(key):
        first.append(first_calls.get())
        return load(key)

    def searching(keys):
        first.append(first_calls.get())
        return search(keys)

    monkeypatch.setattr(world.jira, "load_issue", loading)
    monkeypatch.setattr(world.jira, "load_issues", searching)
    start(world)  # the trigger's read and the workflow's steps up to the page's wait
    world.advance(POLL)  # a look during the wait

    assert len(first) >= 3 and all(first)
