"""The freshness rule of a trigger's read: an ordinary dispatch reads its issue once, and any
run that might see a changed issue reads it again (on SQLite and PostgreSQL)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.actors.test_assign_runtime import ENGINEERS, staff
from tests.fakes import issue
from tests.harness import assign, rule
from ticket_dispatcher.actors.first_read import FRESH_READ, IssueActivity, IssueRead
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.integrations.call_policy import first_calls


class Ticking:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read_of(activity: IssueActivity, key: str = "TCID-1") -> IssueRead:
    return IssueRead(issue(key=key), trigger_id=1, began=activity.mark())


def test_a_read_is_reused_only_while_fresh_and_only_for_its_own_issue():
    clock = Ticking()
    activity = IssueActivity(clock)

    read = read_of(activity)
    assert activity.begin("TCID-1", read) is read.issue
    activity.end("TCID-1")

    stale = read_of(activity, "TCID-3")
    clock.now += FRESH_READ.total_seconds() + 0.001
    assert activity.begin("TCID-3", stale) is None  # too old: the run reads the live issue
    assert activity.begin("TCID-4", read_of(activity, "TCID-5")) is None  # another issue's


def test_a_read_is_not_reused_when_an_execution_of_its_issue_worked_since_it_began():
    clock = Ticking()
    activity = IssueActivity(clock)

    activity.begin("TCID-1", None)  # an execution at work on the issue
    during = read_of(activity)
    assert activity.begin("TCID-1", during) is None  # one is at work: it may write
    activity.end("TCID-1")
    activity.end("TCID-1")

    before_stop = read_of(activity)
    activity.begin("TCID-1", None)
    activity.end("TCID-1")  # stopped after the read began: it may have written
    assert activity.begin("TCID-1", before_stop) is None
    activity.end("TCID-1")

    after_stop = read_of(activity)  # began after every stop: it saw their writes
    assert activity.begin("TCID-1", after_stop) is after_stop.issue


def test_what_it_keeps_is_bounded_by_the_running_actors_and_the_fresh_window():
    clock = Ticking()
    activity = IssueActivity(clock)
    for n in range(1000):
        activity.begin(f"TCID-{n}", None)
        activity.end(f"TCID-{n}")
        clock.now += 0.01
    assert activity.kept()[0] == 0
    assert activity.kept()[1] <= FRESH_READ.total_seconds() / 0.01 + 1

    clock.now += FRESH_READ.total_seconds() + 1
    activity.begin("TCID-x", None)
    assert activity.kept() == (1, 0)


def test_an_ordinary_dispatch_reads_its_issue_once(make_harness):
    h = make_harness()
    staff(h)
    h.policy(rule(assign(*ENGINEERS)))

    trigger = h.post_trigger("TCID-1")

    [execution] = [h.execution(i) for i in h.trigger(trigger.id).execution_ids]
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert h.jira.loads == ["TCID-1"]  # the trigger's read served its execution's first run
    assert len(h.jira.assignments()) == 1
    assert h.jira.calls("edit_labels") == []  # the label went in the one edit


def test_a_second_dispatch_of_the_same_issue_reads_it_again(make_harness):
    """The second trigger's read began after the first execution had stopped, so it saw
    that execution's writes and a person's edit since: its execution starts from it."""
    h = make_harness()
    staff(h)
    h.policy(rule(assign(*ENGINEERS)))

    h.post_trigger("TCID-1")
    h.jira.put(replace(h.jira.issues["TCID-1"], summary="changed by a person"))
    second = h.post_trigger("TCID-1")

    [execution] = [h.execution(i) for i in h.trigger(second.id).execution_ids]
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert h.jira.loads == ["TCID-1", "TCID-1"]  # once per trigger


def test_shared_mode_reuses_the_read_unless_the_store_shows_another_execution_since(
        db_url, make_harness):
    """Another replica's executions are seen through the store: the first run reuses its
    trigger's read only when no other execution of the issue was saved since the read (a
    clock margin earlier) or is still running."""
    if not db_url.startswith("postgres"):
        pytest.skip("replicas share a PostgreSQL database")
    h = make_harness(cluster_mode="shared", database_url=db_url)
    staff(h)
    h.policy(rule(assign(*ENGINEERS)))

    first = h.post_trigger("TCID-1")
    assert h.jira.loads == ["TCID-1"]  # the trigger's read only
    h.post_trigger("TCID-1")  # at the same moment: the first execution was saved since
    assert h.jira.loads == ["TCID-1"] * 3
    h.clock.advance(5)
    h.post_trigger("TCID-1")
    assert h.jira.loads == ["TCID-1"] * 4

    [execution] = [h.execution(i) for i in h.trigger(first.id).execution_ids]
    assert execution.status is ExecutionStatus.SUCCEEDED


def test_an_ordinary_dispatchs_jira_calls_do_not_go_first_under_a_budget(make_harness,
                                                                       monkeypatch):
    h = make_harness()
    staff(h)
    h.policy(rule(assign(*ENGINEERS)))
    first: list[bool] = []
    load = h.jira.load_issue

    def loading(key):
        first.append(first_calls.get())
        return load(key)

    monkeypatch.setattr(h.jira, "load_issue", loading)
    h.post_trigger("TCID-1")

    assert first == [False]
