"""The ACK watcher's schedule (actors/watch_schedule.py), without an actor: which waits are
due for a look, when a plain wait goes back to the pool, when the one timer fires, and how the
looks are paced. Built with a ManualClock; no thread starts."""

from __future__ import annotations

from datetime import timedelta

from tests.clocks import ManualClock
from ticket_dispatcher.actors.watch_schedule import (
    ADOPT_EVERY,
    BATCH,
    WINDOW,
    WatchedWait,
    WatchSchedule,
)

POLL = timedelta(seconds=30)
MS = timedelta(milliseconds=1)


def ids(taken) -> list[int]:
    return [execution_id for execution_id, _ in taken]


def test_a_wait_is_due_for_a_look_up_to_a_window_before_its_wake():
    clock, schedule = ManualClock(), WatchSchedule(0)
    wake = clock.now() + timedelta(seconds=10)
    schedule.keep(1, WatchedWait(wake))
    schedule.keep(2, WatchedWait(wake + WINDOW + MS))

    early = schedule.take_due(wake - WINDOW - MS)
    due = schedule.take_due(wake - WINDOW)

    assert (ids(early.looking), ids(due.looking)) == ([], [1])
    assert len(schedule) == 1  # 2 waits for its own look


def test_a_plain_wait_goes_back_at_its_wake_exactly():
    clock, schedule = ManualClock(), WatchSchedule(0)
    wake = clock.now() + timedelta(seconds=10)
    schedule.keep(1, WatchedWait(wake, plain=True))

    assert ids(schedule.take_due(wake - MS).plain) == []
    assert ids(schedule.take_due(wake).plain) == [1]


def test_a_wait_kept_again_comes_due_at_its_new_time_only():
    clock, schedule = ManualClock(), WatchSchedule(0)
    now = clock.now()
    schedule.keep(1, WatchedWait(now + timedelta(seconds=5)))
    schedule.keep(1, WatchedWait(now + timedelta(seconds=60)))

    assert ids(schedule.take_due(now + timedelta(seconds=10)).looking) == []
    assert ids(schedule.take_due(now + timedelta(seconds=60)).looking) == [1]


def test_a_forgotten_wait_never_comes_due():
    clock, schedule = ManualClock(), WatchSchedule(0)
    schedule.keep(1, WatchedWait(clock.now()))
    schedule.forget(1)

    assert ids(schedule.take_due(clock.now() + timedelta(hours=1)).looking) == []
    assert schedule.timer() is None


def test_one_timer_a_window_before_the_soonest_look_or_at_the_soonest_plain_wake():
    clock, schedule = ManualClock(), WatchSchedule(0)
    now = clock.now()
    schedule.keep(1, WatchedWait(now + timedelta(seconds=10)))
    assert schedule.timer() == now + timedelta(seconds=10) - WINDOW
    schedule.keep(2, WatchedWait(now + timedelta(seconds=20)))
    assert schedule.timer() is None  # the armed one fires sooner
    schedule.keep(3, WatchedWait(now + timedelta(seconds=5), plain=True))
    assert schedule.timer() == now + timedelta(seconds=5)


def test_looks_come_in_batches_a_window_apart():
    clock, schedule = ManualClock(), WatchSchedule(0)
    now = clock.now()
    schedule.fired()
    schedule.take_due(now)
    schedule.keep(1, WatchedWait(now + MS))

    assert schedule.timer() == now + WINDOW  # not sooner than a window after the last look


def test_without_pacing_a_wait_is_looked_at_again_after_its_poll():
    clock, schedule = ManualClock(), WatchSchedule(0)
    now = clock.now()
    deadline = now + timedelta(hours=1)

    looks = [schedule.next_look(POLL, deadline, now, watched=1000) for _ in range(3)]

    assert looks == [now + POLL] * 3


def test_paced_looks_take_turns_a_turn_apart():
    clock, schedule = ManualClock(), WatchSchedule(10)  # a turn every 100 ms
    now = clock.now()
    deadline = now + timedelta(hours=1)

    looks = [schedule.next_look(POLL, deadline, now, watched=3) for _ in range(3)]

    assert looks == [now + POLL, now + POLL + 100 * MS, now + POLL + 200 * MS]
    assert schedule.round_of(3) == 300 * MS


def test_paced_looks_come_no_later_than_a_round_of_the_waits_still_watched_past_their_poll():
    clock, schedule = ManualClock(), WatchSchedule(10)
    now = clock.now()
    deadline = now + timedelta(hours=1)
    for _ in range(100):  # turns taken by waits that have ended since
        schedule.next_look(POLL, deadline, now, watched=100)

    look = schedule.next_look(POLL, deadline, now, watched=2)

    assert look == now + POLL + 200 * MS


def test_a_wake_at_the_deadline_takes_no_turn():
    clock, schedule = ManualClock(), WatchSchedule(10)
    now = clock.now()

    at_deadline = schedule.next_look(POLL, now + POLL, now, watched=5)
    following = schedule.next_look(POLL, now + timedelta(hours=1), now, watched=5)

    assert at_deadline == following == now + POLL


def test_how_many_left_waits_are_adopted_follows_the_pace():
    assert WatchSchedule(10).adopt_limit() == round(2 * ADOPT_EVERY / (100 * MS))
    assert WatchSchedule(0).adopt_limit() == 5 * BATCH
