"""The one source of time (SPEC §3): ``SystemClock`` in production, ``ManualClock`` in tests."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when a test says so."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock needs an aware start time")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0, **delta: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds, **delta)
            return self._now

    def set(self, value: datetime) -> None:
        if value.tzinfo is None:
            raise ValueError("ManualClock needs aware times")
        with self._lock:
            self._now = value
