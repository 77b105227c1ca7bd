"""The tests' clock: time moves only when a test says so.

``ManualClock`` is a ``TimerClock`` (ticket_dispatcher/clock.py). It starts no thread: the
scheduler it drives fires its due timers in the test's own thread, inside ``advance``. So when
``advance`` returns, every timer due by then has run its callback (each only ``tell``s, and
the message is counted in flight), and a following ``wait_idle`` waits for its work.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from ticket_dispatcher.clock import Timers


class ManualClock:
    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock needs an aware start time")
        self._monotonic = timedelta(0)  # kept exact: a float sum of seconds drifts
        self._lock = threading.Lock()
        self._driven: list[Timers] = []

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic.total_seconds()

    def drive(self, timers: Timers) -> None:
        with self._lock:
            self._driven.append(timers)

    def advance(self, seconds: float = 0, **delta: float) -> datetime:
        """Let time pass (wall and monotonic alike); every due timer fires before this
        returns."""
        step = timedelta(seconds=seconds, **delta)
        if step < timedelta(0):
            raise ValueError("time only moves forward; step_wall_clock moves the wall clock")
        with self._lock:
            self._now += step
            self._monotonic += step
            now, driven = self._now, list(self._driven)
        for timers in driven:  # a stopped scheduler has none left
            timers.fire_due()
        return now

    def step_wall_clock(self, seconds: float = 0, **delta: float) -> datetime:
        """Step the wall clock (as NTP or an operator may), backwards too; no time passes, so
        the monotonic clock stays and no timer fires."""
        with self._lock:
            self._now += timedelta(seconds=seconds, **delta)
            return self._now
