"""The call policy of the API clients: what one call is tried again after, inside itself, how
a service's rate limit holds back the calls of its scope in the process, and how calls are
paced below a budget (docs/design.md, "Passing faults").

A call answered 429 (the service refused it: nothing was applied) is made again after the
``Retry-After`` it gave; one answered 503 too, when it only reads. A write answered 503 may
have been applied, so it goes back to its caller, which reads before it writes again. A wait
longer than the client waits in line, or past the last of its retries, ends the call instead.
Work above the call puts off its next try (domain/retries.py).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Protocol

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


# ``RateLimit-Reason`` values (Atlassian's "Rate limiting") that name a scope narrower than
# every call: one endpoint and method, or the writes to one issue. Any other reason (a quota,
# one this code does not know) or none holds every call.
BURST = "jira-burst-based"
PER_ISSUE_WRITE = "jira-per-issue-on-write"
# The reasons a metric names; any other is counted as "other", none as "none".
KNOWN_REASONS = frozenset({BURST, PER_ISSUE_WRITE, "jira-quota-global-based",
                           "jira-quota-tenant-based", "jira-user-based", "jira-tenant-based"})
NEAR_LIMIT_FOR = timedelta(minutes=1)  # how long X-RateLimit-NearLimit halves the budget
LEARNED_OVER = timedelta(minutes=1)  # the calls a budget is learned from, without one set
LEAST_LEARNED = 1.0  # calls a second: a budget learned from a quiet minute is no less
# A path segment that names an issue: a key (ABC-12), or a numeric id after "issue".
_ISSUE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*-[0-9]+")
_ISSUE_PARENTS = frozenset({"issue", "request"})
_ISSUE_PATH = re.compile(r"/(?:issue|request)/([^/?]+)")

# Whether the calls made in this context go first under a budget: a notification's, whose
# lane goes first (docs/design.md, "Lanes"). Set around a notification's work by the actors;
# the client pool carries it from the caller's thread to the worker that makes the call.
first_calls: ContextVar[bool] = ContextVar("first_calls", default=False)


@contextmanager
def calls_first(first: bool = True) -> Iterator[None]:
    """The calls made inside go first under a budget (``first``), or not."""
    token = first_calls.set(first)
    try:
        yield
    finally:
        first_calls.reset(token)


@dataclass(frozen=True)
class LimitScope:
    """What one rate limit holds: ``kind`` "all" (every call), "endpoint" (``key``: a method
    and a path with its issue segments replaced) or "issue" (``key``: the issue's writes);
    "budget" is what a metric names a call the budget held back."""

    kind: str
    key: str = ""

    def covers(self, method: str, path: str) -> bool:
        if self.kind == "endpoint":
            return endpoint_of(method, path) == self.key
        if self.kind == "issue":
            return method.upper() not in READS and issue_of(path) == self.key
        return True


EVERY_CALL = LimitScope("all")
BUDGET_SCOPE = LimitScope("budget")  # a call the budget of calls a second had no slot for


def issue_of(path: str) -> str | None:
    """The issue a path addresses (``/rest/api/2/issue/ABC-1/assignee``: ABC-1), if any."""
    found = _ISSUE_PATH.search(path)
    return found.group(1).upper() if found else None


def endpoint_of(method: str, path: str) -> str:
    """The method and path with each segment naming an issue replaced by ``{issue}``: one
    endpoint whatever the issue."""
    segments = path.split("?", 1)[0].split("/")
    named = ["{issue}" if _ISSUE_KEY.fullmatch(part)
             or (part.isdigit() and before in _ISSUE_PARENTS) else part
             for before, part in zip(["", *segments], segments, strict=False)]
    return f"{method.upper()} {'/'.join(named)}"


def scope_of(reason: str | None, method: str, path: str) -> LimitScope:
    """The scope a 429 with ``RateLimit-Reason`` ``reason`` holds, for a call to ``path``."""
    reason = (reason or "").strip().lower()
    issue = issue_of(path)
    if reason == PER_ISSUE_WRITE and issue is not None and method.upper() not in READS:
        return LimitScope("issue", issue)
    if reason == BURST:
        return LimitScope("endpoint", endpoint_of(method, path))
    return EVERY_CALL


def reason_label(reason: str | None) -> str:
    """A reason as a metric names it: a known one, "other" or "none"."""
    reason = (reason or "").strip().lower()
    if not reason:
        return "none"
    return reason if reason in KNOWN_REASONS else "other"


@dataclass(frozen=True)
class LimitHold:
    """A call held back: ``wait`` seconds more, by a limit of ``scope`` given for ``reason``."""

    wait: float
    scope: LimitScope
    reason: str


class SiteLimits(Protocol):
    """A service's limits as the processes serving one database share them (actors/cluster.py):
    ``hold`` tells the others that every call is held until a time, ``until`` says until when
    one of them was told so (it may answer from a cache of a second or so), and ``share`` is
    how many live processes a budget is divided among."""

    def until(self) -> datetime | None: ...

    def hold(self, until: datetime) -> None: ...

    def share(self) -> int: ...


class Alone:
    """The limits of a process that serves its database alone: nothing to share."""

    def until(self) -> datetime | None:
        return None

    def hold(self, until: datetime) -> None:
        pass

    def share(self) -> int:
        return 1


ALONE = Alone()


@dataclass(frozen=True)
class Slot:
    """A pacer's answer: go after ``wait`` seconds (``taken``: the slot is held for this
    call), or, not ``taken``, look again after ``wait``: the call comes after others."""

    wait: float
    taken: bool = True


class Pacer:
    """The budget of calls a second to a service, never exceeded in any sliding second and
    with no burst allowance. ``budget``: the configured calls a second, or None; ``share``:
    the replicas it is divided among (1 alone). ``near_limit`` halves it for
    ``NEAR_LIMIT_FOR``; with none set, it then takes half the calls a second made over the
    last ``LEARNED_OVER``.

    The lanes' order holds under a budget: a call made ``first`` (a notification's, see
    ``first_calls``) holds the first free slot, in the order such callers came, even a slot a
    while ahead; any other call takes a slot only when one is free now, so it never holds
    back a notification that comes after it, and looks again when the next may be."""

    def __init__(self, clock: Clock, budget: float | None = None,
                 share: Callable[[], int] = lambda: 1):
        self._clock = clock
        self._budget = budget
        self._share = share
        self._lock = threading.Lock()
        self._slots: list[datetime] = []  # the calls' times, made and held, in order
        self._halved: tuple[datetime, float | None] | None = None  # until, learned budget

    def budget(self) -> float | None:
        """The calls a second this replica may make now, or None: no limit."""
        budget = self._budget / max(1, self._share()) if self._budget else None
        halved = self._halved
        if halved is not None and self._clock.now() < halved[0]:
            return budget / 2 if budget is not None else halved[1]
        return budget

    def near_limit(self) -> None:
        """The service warned that little of its budget remains."""
        now = self._clock.now()
        with self._lock:
            if self._halved is not None and now < self._halved[0]:
                return  # halved already: once a minute, not once a warning
            start = bisect.bisect_right(self._slots, now - LEARNED_OVER)
            made = bisect.bisect_right(self._slots, now) - start
            learned = max(LEAST_LEARNED, made / LEARNED_OVER.total_seconds() / 2)
            self._halved = (now + NEAR_LIMIT_FOR, learned)

    def take(self, max_wait: float, *, first: bool = True) -> Slot | None:
        """A slot for one call, or None when the first free one is more than ``max_wait``
        away (nothing is held then). A slot is one of ``budget`` calls a second (rounded
        down), or with less than one a second, one call every ``1 / budget`` seconds."""
        budget = self.budget()
        now = self._clock.now()
        with self._lock:
            del self._slots[:bisect.bisect_right(self._slots, now - LEARNED_OVER)]
            at = now if budget is None else self._first_free(now, budget)
            wait = (at - now).total_seconds()
            if wait > max_wait:
                return None
            if wait > 0 and not first:
                return Slot(wait, taken=False)
            bisect.insort(self._slots, at)
        return Slot(wait)

    def _first_free(self, now: datetime, budget: float) -> datetime:
        """The first moment from ``now`` that a call fits the budget in every window of one
        slot's length around it; the slots held ahead (``first`` calls') count too."""
        calls, seconds = (int(budget), 1.0) if budget >= 1 else (1, 1 / budget)
        window = timedelta(seconds=seconds)
        slots = self._slots
        candidates = itertools.chain([now], (slot + window for slot in
                                             slots[bisect.bisect_right(slots, now - window):]))
        for at in candidates:
            around = (bisect.bisect_left(slots, at + window)
                      - bisect.bisect_right(slots, at - window))
            if at >= now and around < calls:
                return at
        return max(now, slots[-1] + window)  # (not reached: past the last slot all is free)


class LastHour:
    """Calls sent and seconds every call was held, by the minute, over the last hour."""

    def __init__(self, clock: Clock):
        self._clock = clock
        self._lock = threading.Lock()
        self._minutes: deque[list] = deque()  # [minute, calls, held seconds]

    def add(self, calls: int = 0, held: float = 0.0) -> None:
        minute = self._clock.now().replace(second=0, microsecond=0)
        with self._lock:
            if not self._minutes or self._minutes[-1][0] != minute:
                self._minutes.append([minute, 0, 0.0])
            self._minutes[-1][1] += calls
            self._minutes[-1][2] += held
            while self._minutes[0][0] <= minute - timedelta(hours=1):
                self._minutes.popleft()

    def totals(self) -> tuple[int, float]:
        """(calls, held seconds) within the last hour."""
        since = self._clock.now() - timedelta(hours=1)
        with self._lock:
            kept = [m for m in self._minutes if m[0] > since]
        return sum(m[1] for m in kept), sum(m[2] for m in kept)


class RateGate:
    """A service's rate limits, shared by every client of it in the process: once a call was
    answered 429 with ``Retry-After``, the calls of the scope its ``RateLimit-Reason`` names
    (``scope_of``) wait until that time has passed instead of spending more of a limit the
    service shares with every other tool that calls it; calls outside it go on. ``pacer``
    spaces the calls out below a budget; ``site`` shares a hold of every call with the other
    replicas (``SiteLimits``). ``on_limited`` is told the seconds each 429 adds to the time
    every call is held back (a metric); ``on_held`` the scope kind and reason of each call
    held: answered 429, waited, or refused unsent."""

    def __init__(self, clock: Clock, on_limited: Callable[[float], None] | None = None, *,
                 pacer: Pacer | None = None, site: SiteLimits = ALONE,
                 on_held: Callable[[str, str], None] | None = None):
        self._clock = clock
        self._on_limited = on_limited
        self._on_held = on_held
        self.pacer = pacer
        self._site = site
        self._lock = threading.Lock()
        self._holds: dict[LimitScope, tuple[datetime, str]] = {}
        self.last_hour = LastHour(clock)  # what the console overview shows

    def limit(self, seconds: float, *, method: str = "", path: str = "",
              reason: str | None = None) -> None:
        """The service asked to wait ``seconds`` from now, for the scope ``reason`` names."""
        scope = scope_of(reason, method, path)
        now: datetime = self._clock.now()
        until = now + timedelta(seconds=seconds)
        with self._lock:
            self._holds = {s: h for s, h in self._holds.items() if h[0] > now}
            held = self._holds.get(scope)
            start = max(now, held[0]) if held is not None else now
            added = (until - start).total_seconds()
            if added > 0:
                self._holds[scope] = (until, reason_label(reason))
        if self._on_held is not None:  # the call answered 429 was held by its limit too
            self._on_held(scope.kind, reason_label(reason))
        if added > 0 and scope == EVERY_CALL:
            self.last_hour.add(held=added)
            self._site.hold(until)
            if self._on_limited is not None:
                self._on_limited(added)

    def hold_of(self, method: str = "", path: str = "") -> LimitHold | None:
        """The longest hold on a call of ``method`` to ``path``; None when it may go now."""
        now = self._clock.now()
        with self._lock:
            holds = [(until, scope, reason) for scope, (until, reason) in self._holds.items()
                     if until > now and scope.covers(method, path)]
        elsewhere = self._site.until()
        if elsewhere is not None and elsewhere > now:
            holds.append((elsewhere, EVERY_CALL, "replica"))
        if not holds:
            return None
        until, scope, reason = max(holds, key=lambda hold: hold[0])
        return LimitHold((until - now).total_seconds(), scope, reason)

    def remaining(self, method: str = "", path: str = "") -> float:
        """Seconds until a call of ``method`` to ``path`` may go; 0 when it may now."""
        hold = self.hold_of(method, path)
        return hold.wait if hold is not None else 0.0

    def held(self, hold: LimitHold) -> None:
        """A call was held back by ``hold`` (waited, or refused unsent): counted."""
        if self._on_held is not None:
            self._on_held(hold.scope.kind, hold.reason)


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
    """The call was not sent: the service's rate limit holds for ``wait`` seconds more, or,
    ``budget``, the budget of calls a second has no slot for it sooner."""

    wait: float
    budget: bool = False


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
            repeatable: bool, name: str, method: str = "", path: str = "",
            ) -> Answered | HeldBack:
        """``send`` until it answers an ``expected`` status or the policy stops trying:
        again after a 429, or when the call is ``repeatable`` (it only reads) after a 503,
        each with an acceptable ``Retry-After``. While a rate limit holds the call's scope
        (``method`` and ``path``), the call waits it out first when the wait is short, and is
        held back unsent when it is not; so it is when the budget's next free slot is further
        than the call waits. ``name`` stands for the call in the log."""
        retries = 0
        asked = False  # this call's own 429 closed the gate: its wait is that retry's
        counted = False
        paced = 0.0  # seconds waited for the budget's slots
        while True:
            hold = self._gate.hold_of(method, path) if self._gate is not None else None
            if hold is not None:
                if not counted and self._gate is not None:
                    self._gate.held(hold)
                    counted = True
                if hold.wait > self.max_retry_wait or (retries >= self.max_retries
                                                       and not asked):
                    return HeldBack(hold.wait)
                retries += 0 if asked else 1
                asked = False
                self._sleep(hold.wait)
                continue
            asked = False
            if self._gate is not None and self._gate.pacer is not None:
                slot = self._gate.pacer.take(self.max_retry_wait - paced,
                                             first=first_calls.get())
                if slot is None:  # the budget is spent for longer than the call waits
                    self._gate.held(LimitHold(self.max_retry_wait, BUDGET_SCOPE, "budget"))
                    return HeldBack(self.max_retry_wait, budget=True)
                if slot.wait > 0:
                    self._sleep(slot.wait)
                    paced += slot.wait
                    if not slot.taken or self._gate.hold_of(method, path) is not None:
                        continue  # its turn is still to come, or a hold came meanwhile
            if self._gate is not None:
                self._gate.last_hour.add(calls=1)
            response = send()
            if response.headers.get("X-RateLimit-NearLimit", "").strip().lower() == "true" \
                    and self._gate is not None and self._gate.pacer is not None:
                self._gate.pacer.near_limit()
            if response.status_code in expected:
                return Answered(response)
            wait = retry_after(response.headers.get("Retry-After"), self._clock.now()) \
                if response.status_code in RETRY_STATUSES else None
            if response.status_code == 429 and wait is not None and self._gate is not None:
                self._gate.limit(wait, method=method, path=path,
                                 reason=response.headers.get("RateLimit-Reason"))
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
