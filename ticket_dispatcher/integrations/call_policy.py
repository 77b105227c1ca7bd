"""The call policy of the API clients: what one call is tried again after, inside itself, and
how a service's rate limit holds back every call of the process (docs/design.md, "Passing
faults").

A call answered 429 (the service refused it: nothing was applied) is made again after the
``Retry-After`` it gave; one answered 503 too, when it only reads. A write answered 503 may
have been applied, so it goes back to its caller, which reads before it writes again. A wait
longer than the client waits in line, or past the last of its retries, ends the call instead.
Work above the call puts off its next try (domain/retries.py).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import requests

from ticket_dispatcher.clock import Clock

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 503})  # these honour Retry-After
# The longest wait a Retry-After is taken for: a longer one (a misconfigured proxy, a date in a
# far year) is shortened to it, and the call is tried again then, rather than holding every
# call of the process back until a restart.
MAX_RETRY_AFTER = 600.0
# Methods that only read: repeated after a 503 within the call. A write answered 503 may have
# been applied, so it goes back to its caller, which reads before it writes again.
READS = frozenset({"GET", "HEAD", "OPTIONS"})
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")  # Retry-After's delta-seconds


class RateGate:
    """A service's rate limit, shared by every client of it in the process: once one call was
    answered 429 with ``Retry-After``, every call waits until that time has passed instead of
    spending more of a limit the service shares with every other tool that calls it.
    ``on_limited`` is told the seconds each 429 adds to the time held back (a metric)."""

    def __init__(self, clock: Clock, on_limited: Callable[[float], None] | None = None):
        self._clock = clock
        self._on_limited = on_limited
        self._lock = threading.Lock()
        self._until: datetime | None = None

    def limit(self, seconds: float) -> None:
        """The service asked to wait ``seconds`` from now."""
        now: datetime = self._clock.now()
        until = now + timedelta(seconds=seconds)
        with self._lock:
            start = max(now, self._until) if self._until is not None else now
            added = (until - start).total_seconds()
            if added > 0:
                self._until = until
        if added > 0 and self._on_limited is not None:
            self._on_limited(added)

    def remaining(self) -> float:
        """Seconds until calls may go again; 0 when they may now."""
        with self._lock:
            until = self._until
        if until is None:
            return 0.0
        return max(0.0, (until - self._clock.now()).total_seconds())


def retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` ``value``, at most ``MAX_RETRY_AFTER``; None when
    it is missing or neither seconds (digits, a fraction allowed) nor an HTTP date."""
    value = (value or "").strip()
    if not value:
        return None
    if _SECONDS.fullmatch(value):
        return min(float(value), MAX_RETRY_AFTER)  # a run of digits past a float: inf
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, (when - now).total_seconds()), MAX_RETRY_AFTER)


@dataclass(frozen=True)
class Answered:
    """The call's last answer once the policy stopped trying, and the seconds its
    ``Retry-After`` asked to wait, when it said."""

    response: requests.Response
    retry_after: float | None = None


@dataclass(frozen=True)
class HeldBack:
    """The call was not sent: the service's rate limit holds for ``wait`` seconds more."""

    wait: float


class CallPolicy:
    """One client's retries inside a call: at most ``max_retries`` more tries, none after a
    wait longer than ``max_retry_wait`` seconds; ``gate``: the service's rate limit, shared by
    its clients in the process (``RateGate``)."""

    def __init__(self, *, max_retry_wait: float, max_retries: int,
                 sleep: Callable[[float], None], clock: Clock, gate: RateGate | None):
        self.max_retry_wait = max_retry_wait
        self.max_retries = max_retries
        self._sleep = sleep
        self._clock = clock
        self._gate = gate

    def run(self, send: Callable[[], requests.Response], *, expected: tuple[int, ...],
            repeatable: bool, name: str) -> Answered | HeldBack:
        """``send`` until it answers an ``expected`` status or the policy stops trying:
        again after a 429, or when the call is ``repeatable`` (it only reads) after a 503,
        each with an acceptable ``Retry-After``. While the rate limit holds, the call waits it
        out first when the wait is short, and is held back unsent when it is not. ``name``
        stands for the call in the log."""
        retries = 0
        asked = False  # this call's own 429 closed the gate: its wait is that retry's
        while True:
            held = self._gate.remaining() if self._gate is not None else 0.0
            if held > 0:
                if held > self.max_retry_wait or (retries >= self.max_retries and not asked):
                    return HeldBack(held)
                retries += 0 if asked else 1
                asked = False
                self._sleep(held)
                continue
            asked = False
            response = send()
            if response.status_code in expected:
                return Answered(response)
            wait = retry_after(response.headers.get("Retry-After"), self._clock.now()) \
                if response.status_code in RETRY_STATUSES else None
            if response.status_code == 429 and wait is not None and self._gate is not None:
                self._gate.limit(wait)
            if (wait is None or wait > self.max_retry_wait or retries >= self.max_retries
                    or (response.status_code != 429 and not repeatable)):
                return Answered(response, wait)
            retries += 1
            log.info("%s: HTTP %s, retry %d after %.1f s", name, response.status_code, retries,
                     wait)
            if response.status_code != 429 or self._gate is None:
                self._sleep(wait)
            else:
                asked = True  # the gate's wait, at the top of the loop
