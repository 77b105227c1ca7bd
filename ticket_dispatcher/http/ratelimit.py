"""Token bucket per API key for ``POST /dispatch/triggers`` (SPEC §10)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import datetime


class TokenBuckets:
    def __init__(self, rate: float, burst: int, now: Callable[[], datetime]):
        self._rate = rate
        self._burst = burst
        self._now = now
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at seconds)
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._rate > 0

    def take(self, key: str) -> float:
        """0 when the request may pass, else the seconds until a token is free."""
        if not self.enabled:
            return 0.0
        at = self._now().timestamp()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self._burst), at))
            tokens = min(float(self._burst), tokens + (at - last) * self._rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, at)
                return 0.0
            self._buckets[key] = (tokens, at)
            return (1 - tokens) / self._rate


def retry_after_header(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
