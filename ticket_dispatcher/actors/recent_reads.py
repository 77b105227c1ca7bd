"""One execution run's reads of its issue: a read the run made moments ago answers the next read
of the same issue, until the run writes to it (docs/design.md, "The freshness rule").

A notification's steps each look at the issue: the wake at a page's deadline reads it for the
wait's last look, and the next page's guard would read it again a few milliseconds later; the
escalation's guard and its slot read it back to back. Every one of those reads spends a call of
the Jira site's shared budget on the same answer. So the run keeps its last read of the issue
and gives it again while all of this holds, as a trigger's read is given to its execution's
first run:

- it is at most ``FRESH_READ`` old (from its answer);
- the run has not written to the issue since: a write of the assignee, a role, the labels or a
  triage clears it, whatever its outcome (an unknown one above all: the next read must see what
  Jira holds). A comment changes nothing a guard looks at, and keeps it;
- no other execution worked on the issue since the read began: in this process, none is at work
  on it beside this run and none stopped after the read began (``IssueActivity``); on replicas,
  the store shows none of theirs either (``Cluster.written_unseen``).

Anything else reads Jira. A search of many issues (the ACK watcher's) is not kept: it is another
actor's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ticket_dispatcher.actors.first_read import FRESH_READ, IssueActivity, IssueRead
from ticket_dispatcher.domain.model import Issue

# The Jira port's writes that change what a read of the issue answers.
FIELD_WRITES = frozenset({"assign", "set_l2_assignee", "assign_and_label", "edit_labels",
                          "apply_triage"})


@dataclass(frozen=True)
class _Kept:
    read: IssueRead
    answered_at: float  # monotonic


class RecentReads:
    """The Jira port of one execution run (every other method passes through)."""

    def __init__(self, jira: Any, activity: IssueActivity, *, monotonic: Callable[[], float],
                 now: Callable[[], datetime], unseen: Callable[[IssueRead], bool]):
        self._jira = jira
        self._activity = activity
        self._monotonic = monotonic
        self._now = now
        self._unseen = unseen  # another replica's execution may have written since the read
        self._kept: _Kept | None = None

    def load_issue(self, key: str) -> Issue:
        kept = self._kept
        if kept is not None and kept.read.issue.key == key and self._still_fresh(kept):
            return kept.read.issue
        self._kept = None
        began, since = self._activity.mark(), self._now()
        issue: Issue = self._jira.load_issue(key)
        self._kept = _Kept(IssueRead(issue, 0, self._activity.answered(began), since),
                           self._monotonic())
        return issue

    def keep(self, read: IssueRead) -> None:
        """Start from ``read``: the trigger's, which the run's first step took as its issue."""
        self._kept = _Kept(read, read.began.at)

    def forget(self) -> None:
        """The next read asks Jira."""
        self._kept = None

    def __getattr__(self, name: str) -> Any:
        if name in FIELD_WRITES:
            self._kept = None
        return getattr(self._jira, name)

    def _still_fresh(self, kept: _Kept) -> bool:
        if self._monotonic() - kept.answered_at > FRESH_READ.total_seconds():
            return False
        return (self._activity.unchanged_since(kept.read.issue.key, kept.read.began)
                and not self._unseen(kept.read))
