"""The issue a trigger has just read, reused by the first run of the executions it creates.

A trigger reads the live issue to match policies, and its executions start milliseconds
later; reading it again would spend a second call of the Jira site's shared rate limit on the
same answer. So the first run of an execution its trigger has just created starts from the
trigger's read, under the freshness rule (docs/design.md, "The freshness rule"):

- the run starts within ``FRESH_READ`` of the read;
- no execution of the issue has worked in this process since the read began: none is at work
  on it when the run starts, and none stopped after the read began.

``IssueActivity`` keeps what the second condition needs: the issues this process's execution
actors are at work on, and when each issue's last one stopped. An actor counts as at work from
its claim, before its first call to a peer, until it stops, so every write this process makes
to an issue happens while an actor of that issue is counted. What it keeps is bounded: the
issues at work (at most one per running actor), and the stops of the last ``FRESH_READ``,
older ones being of no use to a read the rule still accepts.

Anything else reads the live issue, as every run did before: a restart, a resume, a retry, a
woken wait, a run queued behind a backlog for longer than ``FRESH_READ``, and in shared mode a
run another replica claimed, or one whose issue the store shows another execution may have
written since the read (``Cluster.written_unseen``, actors/cluster.py).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ticket_dispatcher.domain.model import Issue

# Longer than an execution waits for a slot in ordinary operation (it starts milliseconds
# after its trigger), short enough that a run held up behind a backlog reads the issue as it
# is now, as a woken one does: what waits reads the latest state.
FRESH_READ = timedelta(seconds=2)


@dataclass(frozen=True)
class ReadBegan:
    """The moment a read of an issue began, as ``IssueActivity`` counts it."""

    at: float  # the clock's monotonic seconds
    stops: int  # execution actors stopped in this process by then


@dataclass(frozen=True)
class IssueRead:
    """A trigger's read of its issue, for the first run of the executions it creates."""

    issue: Issue
    trigger_id: int
    began: ReadBegan
    # Wall-clock time from which the issue is known as it is: the read's start, or a webhook
    # snapshot's event. Replicas judge their peers' writes by it (actors/cluster.py).
    since: datetime | None = None


class IssueActivity:
    """Which issues this process's execution actors are at work on, and when the last actor
    of each stopped (thread-safe; one per runtime)."""

    def __init__(self, monotonic: Callable[[], float], fresh_for: timedelta = FRESH_READ):
        self._monotonic = monotonic
        self._fresh_for = fresh_for.total_seconds()
        self._lock = threading.Lock()
        self._at_work: Counter[str] = Counter()
        self._stops = 0
        self._last_stop: dict[str, int] = {}  # issue key -> the count of its last stop
        self._recent: deque[tuple[float, str, int]] = deque()  # (at, issue key, count)

    def mark(self) -> ReadBegan:
        """Taken just before a read of an issue begins."""
        with self._lock:
            return ReadBegan(self._monotonic(), self._stops)

    def answered(self, began: ReadBegan) -> ReadBegan:
        """The read ``began`` was answered now: its age counts from the answer, not from a
        wait before the call went (behind the service's rate limit); the stops it must not
        have missed stay those counted when it began."""
        return ReadBegan(self._monotonic(), began.stops)

    def begin(self, issue_key: str, read: IssueRead | None) -> Issue | None:
        """An execution actor starts work on ``issue_key`` (after its claim, before any call
        to a peer). The issue of ``read`` when its run may start from it under the freshness
        rule, else None (the run reads the live issue)."""
        with self._lock:
            now = self._monotonic()
            self._forget_before(now - self._fresh_for)
            fresh = (read is not None and read.issue.key == issue_key
                     and now - read.began.at <= self._fresh_for
                     and not self._at_work[issue_key]
                     and self._last_stop.get(issue_key, 0) <= read.began.stops)
            self._at_work[issue_key] += 1
        return read.issue if fresh and read is not None else None

    def unchanged_since(self, issue_key: str, began: ReadBegan) -> bool:
        """Whether no other execution actor of this process can have written to
        ``issue_key`` since the read ``began``: at most one (the reader's own) is at work on it,
        and none stopped since. A read older than ``FRESH_READ`` is not asked about."""
        with self._lock:
            return (self._at_work[issue_key] <= 1
                    and self._last_stop.get(issue_key, 0) <= began.stops)

    def end(self, issue_key: str) -> None:
        """The actor that began work on ``issue_key`` stopped: every call it made has ended."""
        with self._lock:
            now = self._monotonic()
            self._at_work[issue_key] -= 1
            if self._at_work[issue_key] <= 0:
                del self._at_work[issue_key]
            self._stops += 1
            self._last_stop[issue_key] = self._stops
            self._recent.append((now, issue_key, self._stops))
            self._forget_before(now - self._fresh_for)

    def _forget_before(self, oldest: float) -> None:
        """Drop the stops before ``oldest``: a read the rule accepts began after them, so
        they are counted in its ``stops`` already (under the lock)."""
        while self._recent and self._recent[0][0] < oldest:
            _, issue_key, count = self._recent.popleft()
            if self._last_stop.get(issue_key) == count:
                del self._last_stop[issue_key]

    def kept(self) -> tuple[int, int]:
        """The issues at work and the stops remembered (for the tests of the bound)."""
        with self._lock:
            return len(self._at_work), len(self._last_stop)
