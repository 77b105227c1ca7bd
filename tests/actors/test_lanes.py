"""The lanes of waiting work (actors/lanes.py): notifications before ordinary work, by the
share, each lane first in first out, and ordinary work always moving; and the gauges of their
lengths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ticket_dispatcher.actors.lanes import Lanes
from ticket_dispatcher.actors.slots import SlotQueue
from ticket_dispatcher.domain.matching import NOTIFICATION_LANE, ORDINARY_LANE, lane_of
from ticket_dispatcher.metrics import PREFIX, Metrics

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def drain(lanes) -> list:
    taken = []
    while lanes:
        taken.append(lanes.pop())
    return taken


def test_a_trigger_of_a_notification_source_takes_the_notification_lane():
    assert lane_of("jira_assignment_assignee") == NOTIFICATION_LANE
    assert lane_of("jira_assignment_l2_assignee") == NOTIFICATION_LANE
    assert lane_of("jira_automation") == ORDINARY_LANE
    assert lane_of(None) == ORDINARY_LANE  # not known: ordinary


def test_a_notification_behind_a_backlog_goes_next():
    lanes = Lanes(4)
    for n in range(1000):
        lanes.push(f"o{n}", ORDINARY_LANE, T0)
    lanes.push("p0", NOTIFICATION_LANE, T0 + timedelta(seconds=1))

    assert lanes.pop() == "p0"
    assert lanes.lengths() == {NOTIFICATION_LANE: 0, ORDINARY_LANE: 1000}


def test_ordinary_work_gets_one_turn_in_share_plus_one_under_a_stream_of_notifications():
    lanes = Lanes(4)
    for n in range(3):
        lanes.push(f"o{n}", ORDINARY_LANE, T0)
    for n in range(12):
        lanes.push(f"n{n}", NOTIFICATION_LANE, T0)

    taken = drain(lanes)

    assert taken[:5] == ["n0", "n1", "n2", "n3", "o0"]
    assert taken[5:10] == ["n4", "n5", "n6", "n7", "o1"]
    # each lane in its order of arrival
    assert [t for t in taken if t.startswith("o")] == ["o0", "o1", "o2"]
    assert [t for t in taken if t.startswith("n")] == [f"n{n}" for n in range(12)]


def test_a_share_of_zero_is_one_line_in_order_of_arrival():
    lanes = Lanes(0)
    lanes.push("o0", ORDINARY_LANE, T0)
    lanes.push("n0", NOTIFICATION_LANE, T0)
    lanes.push("o1", ORDINARY_LANE, T0)

    assert drain(lanes) == ["o0", "n0", "o1"]


def test_the_oldest_of_each_lane():
    lanes = Lanes(4)
    lanes.push("o0", ORDINARY_LANE, T0)
    lanes.push("n0", NOTIFICATION_LANE, T0 + timedelta(seconds=2))

    assert (lanes.oldest(ORDINARY_LANE), lanes.oldest(NOTIFICATION_LANE), lanes.oldest()) == (
        T0, T0 + timedelta(seconds=2), T0)
    assert lanes.views(T0 + timedelta(seconds=3)) == {
        NOTIFICATION_LANE: {"queued": 1, "oldest_queued_age_seconds": 1.0},
        ORDINARY_LANE: {"queued": 1, "oldest_queued_age_seconds": 3.0}}


def test_the_slot_queue_runs_a_notification_before_new_ordinary_work_and_still_takes_turns():
    queue = SlotQueue(share=4)
    for n in range(1, 4):
        queue.push(n, T0)  # ordinary executions
    queue.push(10, T0, wake=True)  # a parked wait that came due
    queue.push(20, T0, lane=NOTIFICATION_LANE)  # a P0's card

    order = [queue.pop() for _ in range(5)]

    assert order[0] == 20  # new work first, the notification's before the backlog's
    assert order[1] == 10  # then the wait's turn
    assert order[2:] == [1, 2, 3]
    lanes = queue.lanes(T0)
    assert lanes == {lane: {"queued": 0, "oldest_queued_age_seconds": None}
                     for lane in (NOTIFICATION_LANE, ORDINARY_LANE, "wake")}


def test_the_lane_gauges_follow_each_queue_while_unchanged_reports_set_nothing(monkeypatch):
    metrics = Metrics()
    sets: list[float] = []
    child = metrics.lane_queued.labels(queue="executions", lane=ORDINARY_LANE)
    monkeypatch.setattr(type(child), "set", lambda self, value: sets.append(value))

    for lengths in ({ORDINARY_LANE: 0}, {ORDINARY_LANE: 0}, {ORDINARY_LANE: 3},
                    {ORDINARY_LANE: 3}, {ORDINARY_LANE: 0}):
        metrics.lanes("executions", lengths)

    assert sets == [0, 3, 0]


def test_each_queue_s_lanes_are_their_own_series():
    metrics = Metrics()
    metrics.lanes("executions", {ORDINARY_LANE: 2, NOTIFICATION_LANE: 1})
    metrics.lanes("triggers", {ORDINARY_LANE: 2})
    metrics.lanes("triggers", {ORDINARY_LANE: 0})

    def queued(queue: str, lane: str) -> float | None:
        return metrics.registry.get_sample_value(f"{PREFIX}lane_queued",
                                                 {"queue": queue, "lane": lane})

    assert queued("executions", ORDINARY_LANE) == 2
    assert queued("executions", NOTIFICATION_LANE) == 1
    assert queued("triggers", ORDINARY_LANE) == 0
