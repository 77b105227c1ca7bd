"""The one source of time (SPEC §3): ``SystemClock`` in production, ``ManualClock`` in tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    #: True when time moves only by ``advance``; the Scheduler then waits for a nudge from
    #: ``subscribe`` instead of a real-time timeout.
    manual: bool

    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        ...

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every jump of a manual clock (no-op for real time)."""
        ...


class SystemClock:
    manual = False

    def now(self) -> datetime:
        return datetime.now(UTC)

    def subscribe(self, listener: Callable[[], None]) -> None:
        pass


class ManualClock:
    """A clock that moves only when a test says so."""

    manual = True

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock needs an aware start time")
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0, **delta: float) -> datetime:
        """Move time forward; due timers fire (as tells) before this returns."""
        with self._lock:
            self._now += timedelta(seconds=seconds, **delta)
            now = self._now
        self._notify()
        return now

    def set(self, value: datetime) -> None:
        if value.tzinfo is None:
            raise ValueError("ManualClock needs aware times")
        with self._lock:
            self._now = value
        self._notify()

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()
