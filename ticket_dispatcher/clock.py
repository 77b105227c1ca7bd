"""The one source of time.

- ``Clock`` is business time: ``now()``, aware and in UTC. Everything the service stores or
  compares with a stored time reads it.
- ``TimerClock`` adds what the scheduler (actors/scheduler.py) needs to wait: a ``monotonic()``
  reading, which a wall-clock step (NTP, an operator) never moves, and ``drive(timers)``, which
  decides who fires the timers as they come due.

``SystemClock`` is the production clock: the real time, and a thread of the scheduler's own
that waits on the monotonic clock. Tests pass a manual clock instead (tests/clocks.py) that
moves only when a test says so and fires every due timer itself; the scheduler has one code
path for both.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        ...


class Timers(Protocol):
    """What a ``TimerClock`` drives: the scheduler's timers."""

    def run(self) -> None:
        """Fire each timer when the monotonic clock reaches it, until stopped (blocks)."""
        ...

    def fire_due(self) -> None:
        """Fire every timer that is due now, in the calling thread."""
        ...


class TimerClock(Clock, Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that only moves forward at the rate of real time; timer waits
        are measured on it, so a step of the wall clock neither delays nor hastens them."""
        ...

    def drive(self, timers: Timers) -> None:
        """Make ``timers`` fire as they come due; called once, when the scheduler starts."""
        ...


class SystemClock:
    """Real time; the timers run on a daemon thread of their own."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def drive(self, timers: Timers) -> None:
        # A daemon: a timer callback only tells, and shutdown must never wait for this thread.
        threading.Thread(target=timers.run, name="scheduler", daemon=True).start()
