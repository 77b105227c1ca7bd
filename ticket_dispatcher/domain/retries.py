"""Passing faults: when work that a service failed for a moment is tried again, and when it
has tried long enough (docs/design.md, "Passing faults").

A passing fault (``errors.fault_of``: nothing sent, no answer, a 429, a 5xx) puts the work off
instead of failing it: a trigger goes back to ``pending``, an execution parks. It is tried
again after a backoff (5 s, doubling, at most 5 min apart), never sooner than the
``Retry-After`` the service gave, and for at most the retry budget (config key
``transient_retry_budget``) counted from the first failure in a row. The last try is made at
the budget's end, so a fault that ended within the budget never fails the work.
"""

from __future__ import annotations

from datetime import datetime, timedelta

BACKOFF_START = timedelta(seconds=5)
BACKOFF_MAX = timedelta(minutes=5)


def backoff(attempt: int) -> timedelta:
    """The wait before try ``attempt + 1``: 5 s after the first failure, doubling to 5 min."""
    return min(BACKOFF_START * (2 ** min(max(attempt - 1, 0), 16)), BACKOFF_MAX)


def next_try(retry_after: float | None, attempt: int, since: datetime, now: datetime,
             budget: timedelta) -> datetime | None:
    """When to try again after ``attempt`` failures in a row, the first at ``since``, the
    last asking to wait ``retry_after`` seconds; None when the budget is spent and the work
    fails now."""
    end = since + budget
    if now >= end:
        return None
    wait = backoff(attempt)
    if retry_after is not None:
        wait = max(wait, timedelta(seconds=retry_after))
    return min(now + wait, end)


def spent(reason: str, attempts: int, since: datetime, now: datetime,
          budget: timedelta) -> str:
    """The failure reason of work whose retry budget ran out."""
    minutes = (now - since).total_seconds() / 60
    return (f"{reason} (a passing fault that did not pass: tried {attempts} times over "
            f"{minutes:.0f} min, past the retry budget of {_duration(budget)})")


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
