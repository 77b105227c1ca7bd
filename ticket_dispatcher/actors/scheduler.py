"""The timer wheel: one heap, one thread, driven by the Clock (SPEC §3).

pykka has no timers. Parked executions and periodic jobs register a callback (always a cheap
``tell``) at an absolute time; the scheduler thread runs it when the clock reaches it. With a
``ManualClock`` nothing fires until a test advances time, and then everything due fires before
``advance`` returns.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from datetime import datetime

from ticket_dispatcher.clock import Clock

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, clock: Clock):
        self._clock = clock
        self._heap: list[tuple[datetime, int, Callable[[], None], str]] = []
        self._sequence = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None
        clock.subscribe(self.fire_due)

    def start(self) -> None:
        if self._clock.manual:
            return  # ManualClock.advance fires due timers itself; no thread needed
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Drop every timer and let the thread end; never blocks (a callback only tells)."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()

    def call_at(self, when: datetime, callback: Callable[[], None], label: str = "") -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (when, next(self._sequence), callback, label))
            self._cond.notify_all()
        if self._clock.manual and when <= self._clock.now():
            self.fire_due()  # no thread watches a manual clock; a due timer fires now

    def pending(self) -> tuple[int, datetime | None]:
        """How many timers wait, and when the next one is due (for the admin view)."""
        with self._cond:
            return len(self._heap), (self._heap[0][0] if self._heap else None)

    def fire_due(self) -> None:
        for callback, label in self._pop_due():
            try:
                callback()
            except Exception:  # a timer must never take the wheel down
                log.exception("timer %s failed", label)

    def _pop_due(self) -> list[tuple[Callable[[], None], str]]:
        now = self._clock.now()
        due = []
        with self._cond:
            while self._heap and self._heap[0][0] <= now:
                _, _, callback, label = heapq.heappop(self._heap)
                due.append((callback, label))
        return due

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                timeout = None
                if self._heap:
                    timeout = max(0.0, (self._heap[0][0] - self._clock.now()).total_seconds())
                if timeout is None or timeout > 0:
                    self._cond.wait(timeout=timeout)
            self.fire_due()
