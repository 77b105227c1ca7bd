"""Stopping actors under one deadline: their stop futures are awaited together within what
remains, never each with the whole timeout (shutdown, client pools)."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pykka


class Deadline:
    """One monotonic deadline shared by every step of a stop; ``None`` waits without end."""

    def __init__(self, seconds: float | None):
        self._at = None if seconds is None else time.monotonic() + seconds

    def remaining(self) -> float | None:
        return None if self._at is None else max(0.0, self._at - time.monotonic())


def await_stopped(futures: Iterable[pykka.Future], deadline: Deadline) -> bool:
    """Wait for actor stop futures within what remains of ``deadline`` (``pykka.get_all``
    would give each future the whole timeout); False when time ran out first."""
    try:
        for future in futures:
            future.get(timeout=deadline.remaining())
    except pykka.Timeout:
        return False
    return True
