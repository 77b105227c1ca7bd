"""The admin view's parked executions (``Runtime.status``): what each waits for, including a
retry of its issue load, and what memory still knows while the database cannot be read."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.actors.test_notification_card_runtime import ASSIGNEE, put
from tests.domain.test_notification_page import PENDING, POLL
from tests.fakes import GateAction, RecordingAction, issue
from tests.harness import rule
from ticket_dispatcher.actors.execution import load_backoff
from ticket_dispatcher.actors.pool import ExecutionPool
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.integrations.http import IntegrationRejected
from ticket_dispatcher.timeutil import format_time


@pytest.fixture
def world(urgent_world):
    return urgent_world


def parked_entry(harness, execution_id: int) -> dict:
    [entry] = [p for p in harness.runtime.status()["parked_executions"]
               if p["execution_id"] == execution_id]
    return entry


def test_an_execution_retrying_its_issue_load_shows_the_load_not_its_page(world):
    put(world, severity="S1", status=PENDING)
    execution_id = world.post_trigger(source=ASSIGNEE).execution_ids[0]
    in_page = parked_entry(world, execution_id)
    assert in_page["action"].endswith("1:page_assignment") and in_page["attempt"] == 1
    issue_key = in_page["issue_key"]
    # Jira refuses the issue (403: out of reach, not down), which a page does not go on
    # without. One refusal for the ACK watcher's batched read, which then wakes the execution
    # to read for itself, and two for the execution's own loads.
    world.jira.fail_next(issue_key, times=3, status=403)

    world.advance(POLL)  # the poll's read fails; the woken execution's load fails: a retry
    world.advance(load_backoff(1).total_seconds())  # the retry fails too
    retrying = parked_entry(world, execution_id)

    assert retrying == {
        "execution_id": execution_id, "issue_key": issue_key,
        "wake_at": format_time(world.clock.now() + load_backoff(2)),
        "action": "retrying the issue load", "attempt": 2, "deadline": None}
    assert world.execution(execution_id).load_attempts == 2
    assert world.runtime.status()["retries"] == {"database_waits": 0, "jira_retries": 1}

    world.advance(load_backoff(2).total_seconds())  # the load succeeds: back in its ACK wait
    back = parked_entry(world, execution_id)
    assert back["action"].endswith("1:page_assignment") and back["attempt"] == 1
    assert back["deadline"] == in_page["deadline"]


def test_while_the_database_cannot_be_read_parked_entries_keep_what_memory_has(
        make_harness, monkeypatch):
    harness = make_harness(RecordingAction("test_wait", park_for=60))
    harness.policy(rule("test_wait"))
    execution_id = harness.post_trigger().execution_ids[0]
    healthy = harness.runtime.status()

    def unreadable(execution_ids):
        raise StoreUnavailable("the database is locked", "locked")

    monkeypatch.setattr(harness.store.executions, "get_many", unreadable)
    status = harness.runtime.status()

    wake_at = format_time(harness.clock.now() + timedelta(seconds=60))
    assert status["parked_executions"] == [{
        "execution_id": execution_id, "wake_at": wake_at,
        "details": "unavailable: the database cannot be read"}]
    assert {k: v for k, v in status.items() if k != "parked_executions"} == {
        k: v for k, v in healthy.items() if k != "parked_executions"}
    assert "details" not in healthy["parked_executions"][0]


def test_with_nothing_parked_the_view_reads_nothing_from_the_database(make_harness,
                                                                     monkeypatch):
    harness = make_harness()

    def unreadable(execution_ids):
        raise AssertionError("no parked execution: nothing to read")

    monkeypatch.setattr(harness.store.executions, "get_many", unreadable)

    assert harness.runtime.status()["parked_executions"] == []


def test_a_running_execution_shows_where_it_is_and_tells_the_pool_only_its_end(
        make_harness, monkeypatch):
    """The admin view's running entry: the issue, the policy, and the rule and action the
    execution is inside, as its run last advanced; the run itself tells the pool nothing
    between its start and its end (no message a step)."""
    gate = GateAction()
    h = make_harness(RecordingAction("test_first"), gate)
    policy = h.policy(rule("test_first", "test_gate", name="triage"))
    h.jira.put(issue(key="TCID-7"))
    told = h.record_tells(monkeypatch, ExecutionPool)

    def reports() -> list[str]:  # what runs told the pool of themselves
        return [type(message).__name__ for message in told if hasattr(message, "run")]

    trigger = h.post_trigger("TCID-7", settle=False)
    gate.wait_entered(1)
    h.wait_until(lambda: h.trigger(trigger.id).execution_ids)
    [execution_id] = h.trigger(trigger.id).execution_ids

    [running] = h.runtime.status()["executions"]

    assert running["execution_id"] == execution_id
    assert (running["issue_key"], running["policy_id"]) == ("TCID-7", policy.id)
    assert (running["rule"], running["action"]) == ("triage", "1:test_gate")
    assert reports() == []
    gate.open()
    h.wait_idle()
    assert reports() == ["Finished"]
    assert h.runtime.status()["executions"] == []


def test_jira_retries_are_counted_apart_from_database_waits(make_harness, monkeypatch):
    harness = make_harness(RecordingAction())
    harness.policy(rule("test_noop"))
    harness.jira.fail_next("TCID-1", times=1, error=lambda: IntegrationRejected(
        "jira GET /rest/api/2/issue/TCID-1 failed: HTTP 503", status=503, service="jira"))

    harness.post_trigger()  # back to pending, due again in 5 s
    retrying = harness.runtime.status()
    harness.advance(5)
    done = harness.runtime.status()

    def unreadable():
        raise StoreUnavailable("the database is locked", "locked")

    monkeypatch.setattr(harness.store.triggers, "retrying_count", unreadable)
    outage = harness.runtime.status()

    assert retrying["retries"] == {"database_waits": 0, "jira_retries": 1}
    assert retrying["pool"]["database_waits"] == 0
    assert retrying["trigger_actors"]["database_waits"] == 0
    assert done["retries"] == {"database_waits": 0, "jira_retries": 0}
    assert outage["retries"] == {"database_waits": 0, "jira_retries": None}
