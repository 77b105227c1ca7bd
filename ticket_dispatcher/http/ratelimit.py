"""Token buckets: per API key for ``POST /dispatch/triggers`` (``http.trigger_rate``), and per
client address for failed authentication (http/auth.py)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import datetime


class TokenBuckets:
    """One bucket per key. ``max_keys`` bounds the memory when keys come from clients (their
    addresses): beyond it the least recently used bucket is forgotten, which can only make that
    key's next request more lenient, never refuse a request it should not."""

    def __init__(self, rate: float, burst: int, now: Callable[[], datetime],
                 max_keys: int | None = None):
        self._rate = rate
        self._burst = burst
        self._now = now
        self._max_keys = max_keys
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
            tokens, last = self._buckets.pop(key, (float(self._burst), at))
            tokens = min(float(self._burst), tokens + (at - last) * self._rate)
            if self._max_keys is not None and len(self._buckets) >= self._max_keys:
                del self._buckets[next(iter(self._buckets))]  # the least recently used
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, at)
                return 0.0
            self._buckets[key] = (tokens, at)  # re-inserted last: most recently used
            return (1 - tokens) / self._rate

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after_header(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
