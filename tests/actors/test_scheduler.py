"""The scheduler's timers wait on the monotonic clock: a step of the wall clock neither delays
nor hastens them. Driven by the tests' manual clock, and once by the real clock and thread.

No test sleeps: the real-clock tests wait on an Event, bounded, for a timer 50 ms away.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

from tests.clocks import ManualClock
from ticket_dispatcher.actors.scheduler import Scheduler
from ticket_dispatcher.clock import SystemClock

WAIT = 5  # seconds: the bound on waiting for a timer that is due in 50 ms


class Fired:
    """Records the timers that fired, by label."""

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.events: dict[str, threading.Event] = {}

    def timer(self, label: str):
        event = self.events.setdefault(label, threading.Event())

        def callback() -> None:
            self.labels.append(label)
            event.set()

        return callback


def started(clock) -> Scheduler:
    scheduler = Scheduler(clock)
    scheduler.start()
    return scheduler


def test_a_timer_fires_when_its_time_comes_and_not_before():
    clock, fired = ManualClock(), Fired()
    scheduler = started(clock)
    scheduler.call_at(clock.now() + timedelta(seconds=10), fired.timer("wake"), "wake")

    clock.advance(9.999)
    before = list(fired.labels)
    clock.advance(0.001)

    assert before == [] and fired.labels == ["wake"]
    assert scheduler.pending() == (0, None)


def test_due_timers_fire_in_deadline_order_before_advance_returns():
    clock, fired = ManualClock(), Fired()
    scheduler = started(clock)
    for label, seconds in (("late", 30), ("early", 10), ("middle", 20), ("later", 31)):
        scheduler.call_at(clock.now() + timedelta(seconds=seconds), fired.timer(label), label)

    clock.advance(30)

    assert fired.labels == ["early", "middle", "late"]
    assert scheduler.pending() == (1, clock.now() + timedelta(seconds=1))


def test_a_timer_already_due_fires_at_once_in_the_registering_thread():
    clock = ManualClock()
    scheduler = Scheduler(clock)  # not even started: nothing else could fire it
    threads = []

    scheduler.call_at(clock.now() - timedelta(minutes=5),
                      lambda: threads.append(threading.current_thread()), "overdue")

    assert threads == [threading.current_thread()]


def test_a_wall_clock_step_back_does_not_delay_a_timer():
    clock, fired = ManualClock(), Fired()
    scheduler = started(clock)
    scheduler.call_at(clock.now() + timedelta(seconds=10), fired.timer("wake"), "wake")

    clock.step_wall_clock(hours=-1)  # NTP corrects the clock an hour back
    clock.advance(10)

    assert fired.labels == ["wake"]


def test_a_wall_clock_step_forward_does_not_hasten_a_timer():
    clock, fired = ManualClock(), Fired()
    scheduler = started(clock)
    scheduler.call_at(clock.now() + timedelta(seconds=10), fired.timer("wake"), "wake")

    clock.step_wall_clock(hours=1)
    clock.advance(9)
    early = list(fired.labels)
    clock.advance(1)

    assert early == [] and fired.labels == ["wake"]


def test_a_stopped_scheduler_drops_its_timers_and_takes_no_more():
    clock, fired = ManualClock(), Fired()
    scheduler = started(clock)
    scheduler.call_at(clock.now() + timedelta(seconds=1), fired.timer("dropped"), "dropped")

    scheduler.stop()
    scheduler.call_at(clock.now() - timedelta(seconds=1), fired.timer("late"), "late")
    clock.advance(5)

    assert fired.labels == [] and scheduler.pending() == (0, None)


class SteppedClock(SystemClock):
    """The real clock, whose wall time a test can step; monotonic time is the real one."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return super().now() + self.offset


def test_the_real_clock_fires_on_monotonic_time_when_the_wall_clock_steps_back():
    clock, fired = SteppedClock(), Fired()
    scheduler = started(clock)
    try:
        registered = time.monotonic()
        scheduler.call_at(clock.now() + timedelta(milliseconds=50), fired.timer("wake"), "wake")
        clock.offset = timedelta(hours=-1)

        assert fired.events["wake"].wait(WAIT)  # an hour late if it waited on wall time
        assert time.monotonic() - registered >= 0.05
    finally:
        scheduler.stop()


def test_the_real_clock_does_not_fire_early_when_the_wall_clock_steps_forward():
    clock, fired = SteppedClock(), Fired()
    scheduler = started(clock)
    try:
        scheduler.call_at(clock.now() + timedelta(hours=1), fired.timer("hour"), "hour")
        scheduler.call_at(clock.now() + timedelta(milliseconds=50), fired.timer("soon"), "soon")
        clock.offset = timedelta(hours=2)

        assert fired.events["soon"].wait(WAIT)
        # Wall time says the hour has passed; on the monotonic clock it has not.
        assert fired.labels == ["soon"]
        assert scheduler.pending()[0] == 1
    finally:
        scheduler.stop()


def test_stop_ends_the_timer_thread():
    scheduler = Scheduler(SystemClock())
    thread = threading.Thread(target=scheduler.run)
    thread.start()
    scheduler.call_at(SystemClock().now() + timedelta(hours=1), lambda: None, "hour")

    scheduler.stop()
    thread.join(WAIT)

    assert not thread.is_alive()
