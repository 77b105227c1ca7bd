"""The timers: one heap, driven by the clock (clock.py ``TimerClock``).

pykka has no timers. Parked executions and periodic jobs register a callback (always a cheap
``tell``) for a business time; the scheduler runs it when that time comes.

Each timer's wait is measured on the monotonic clock: at registration, ``when - now()`` becomes
a monotonic deadline. A later step of the wall clock (NTP, an operator) therefore neither delays
nor hastens a timer; what was due in five minutes fires five minutes later. Who fires the due
timers is the clock's choice (``TimerClock.drive``): the production clock runs ``run`` on a
thread of its own, which waits on a condition with a timeout; a test's manual clock calls
``fire_due`` itself each time it advances. A timer that is already due when it is registered
fires at once, in the registering thread, whichever clock drives.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ticket_dispatcher.clock import TimerClock

log = logging.getLogger(__name__)

_MICROSECOND = timedelta(microseconds=1)


@dataclass(order=True)
class _Timer:
    deadline: int  # microseconds on the clock's monotonic scale (whole: sums stay exact)
    sequence: int  # registration order breaks ties
    when: datetime = field(compare=False)  # the business time asked for (the admin view)
    callback: Callable[[], object] = field(compare=False)
    label: str = field(compare=False)


class Scheduler:
    def __init__(self, clock: TimerClock):
        self._clock = clock
        self._heap: list[_Timer] = []
        self._sequence = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False

    def start(self) -> None:
        self._clock.drive(self)

    def stop(self) -> None:
        """Drop every timer and let ``run`` end; never blocks (a callback only tells)."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()

    def call_at(self, when: datetime, callback: Callable[[], object], label: str) -> None:
        """Run ``callback`` (a cheap ``tell``; what it returns is dropped) at business time
        ``when``: after ``when - now()`` seconds of monotonic time, or at once when that is not
        positive."""
        with self._cond:
            if self._stopped:
                return
            wait = (when - self._clock.now()) // _MICROSECOND
            deadline = self._monotonic_micros() + wait
            timer = _Timer(deadline, next(self._sequence), when, callback, label)
            heapq.heappush(self._heap, timer)
            if self._heap[0] is timer:  # the earliest deadline changed: the waiter re-waits
                self._cond.notify_all()
        if wait <= 0:
            self.fire_due()

    def pending(self) -> tuple[int, datetime | None]:
        """How many timers wait, and the business time of the next one (for the admin view)."""
        with self._cond:
            return len(self._heap), (self._heap[0].when if self._heap else None)

    def fire_due(self) -> None:
        for timer in self._pop_due():
            try:
                timer.callback()
            except Exception:  # a timer must never take the scheduler down
                log.exception("timer %s failed", timer.label)

    def run(self) -> None:
        """Wait for the earliest deadline (or a new timer, or ``stop``), fire what is due, and
        again, until stopped."""
        while True:
            with self._cond:
                if self._stopped:
                    return
                timeout = self._seconds_to_next_locked()
                if timeout is None or timeout > 0:
                    self._cond.wait(timeout=timeout)
            self.fire_due()

    def _seconds_to_next_locked(self) -> float | None:
        if not self._heap:
            return None
        return max(0, self._heap[0].deadline - self._monotonic_micros()) / 1_000_000

    def _pop_due(self) -> list[_Timer]:
        due = []
        with self._cond:
            now = self._monotonic_micros()
            while self._heap and self._heap[0].deadline <= now:
                due.append(heapq.heappop(self._heap))
        return due

    def _monotonic_micros(self) -> int:
        return round(self._clock.monotonic() * 1_000_000)
