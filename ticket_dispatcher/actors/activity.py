"""Counts work in flight through the actor system, so "wait until settled" is one bounded call.

Every unit of work (a trigger to process, an execution run) calls ``begin`` before it is told to
an actor and ``end`` when its handler has finished with it. The harness and shutdown wait on the
count reaching zero instead of sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Activity:
    def __init__(self):
        self._count = 0
        self._cond = threading.Condition()

    def begin(self) -> None:
        with self._cond:
            self._count += 1

    def end(self) -> None:
        with self._cond:
            self._count = max(self._count - 1, 0)
            self._cond.notify_all()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._count

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is in flight; False when ``timeout`` seconds pass first."""
        return self.wait_for(lambda: self._count == 0, timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate`` holds, re-checking it each time a unit of work ends."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout=timeout)
