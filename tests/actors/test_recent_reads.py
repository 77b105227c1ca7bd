"""An execution run's reads of its issue: given again while fresh and while nothing can have
changed the issue, asked of Jira otherwise."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.fakes import FakeJira, issue
from ticket_dispatcher.actors.first_read import FRESH_READ, IssueActivity, IssueRead
from ticket_dispatcher.actors.recent_reads import RecentReads
from ticket_dispatcher.errors import OutcomeUnknown

KEY = "TCID-1"


class Ticking:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self) -> None:
        self.jira = FakeJira(issue(key=KEY))
        self.clock = Ticking()
        self.activity = IssueActivity(self.clock)
        self.activity.begin(KEY, None)  # this run is at work on its issue
        self.unseen = False
        self.reads = RecentReads(self.jira, self.activity, monotonic=self.clock,
                                 now=lambda: datetime(2026, 12, 7, tzinfo=UTC),
                                 unseen=lambda read: self.unseen)

    def read_twice(self) -> list[str]:
        self.reads.load_issue(KEY)
        self.reads.load_issue(KEY)
        return self.jira.loads


@pytest.fixture
def world() -> World:
    return World()


def test_a_read_of_moments_ago_answers_the_next_one(world):
    world.reads.load_issue(KEY)
    world.clock.now += FRESH_READ.total_seconds()

    assert world.reads.load_issue(KEY).key == KEY
    assert world.jira.loads == [KEY]
    world.clock.now += 0.001  # older than the freshness rule allows
    world.reads.load_issue(KEY)
    assert world.jira.loads == [KEY, KEY]


def test_a_comment_keeps_the_read_and_a_write_of_a_field_clears_it(world):
    world.reads.load_issue(KEY)
    world.reads.add_internal_comment(KEY, "Assignment notification sent")
    world.reads.load_issue(KEY)
    assert world.jira.loads == [KEY]

    world.reads.edit_labels(KEY, remove=["notify-assignee"])
    world.reads.load_issue(KEY)
    assert world.jira.loads == [KEY, KEY]


def test_a_write_whose_outcome_is_unknown_clears_the_read_too(world):
    world.reads.load_issue(KEY)

    def unknown(key, account_id):
        raise OutcomeUnknown("no answer", service="jira")

    world.jira.assign = unknown
    with pytest.raises(OutcomeUnknown):
        world.reads.assign(KEY, "acc-bob")
    world.reads.load_issue(KEY)

    assert world.jira.loads == [KEY, KEY]


def test_another_execution_at_work_or_stopped_since_the_read_means_a_new_read(world):
    world.reads.load_issue(KEY)
    world.activity.begin(KEY, None)  # another run of the issue, in this process
    world.reads.load_issue(KEY)
    assert world.jira.loads == [KEY, KEY]

    world.activity.end(KEY)  # it stopped after that read began
    world.reads.load_issue(KEY)
    assert world.jira.loads == [KEY, KEY, KEY]
    world.reads.load_issue(KEY)  # no one since
    assert world.jira.loads == [KEY, KEY, KEY]


def test_a_replicas_write_the_store_shows_or_a_forget_means_a_new_read(world):
    world.reads.load_issue(KEY)
    world.unseen = True
    assert world.read_twice() == [KEY, KEY, KEY]

    world.unseen = False
    world.reads.forget()
    world.reads.load_issue(KEY)
    assert world.jira.loads == [KEY, KEY, KEY, KEY]


def test_a_read_of_another_issue_is_not_given_for_this_one(world):
    world.jira.put(issue(key="TCID-2"))
    world.reads.load_issue(KEY)

    assert world.reads.load_issue("TCID-2").key == "TCID-2"
    assert world.jira.loads == [KEY, "TCID-2"]


def test_the_triggers_read_given_to_a_first_run_answers_its_next_read(world):
    began = world.activity.mark()
    world.reads.keep(IssueRead(issue(key=KEY), trigger_id=1, began=began))
    world.reads.load_issue(KEY)
    assert world.jira.loads == []

    world.clock.now += FRESH_READ.total_seconds() + 0.001
    world.reads.load_issue(KEY)
    assert world.jira.loads == [KEY]
