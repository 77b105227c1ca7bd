"""Lanes: a notification goes before ordinary work, and ordinary work still moves.

After an outage Jira Automation replays what it could not send, thousands of ordinary triggers
at once, and a P0's notification posted behind them would wait for all of them: its card, its
pages, the ACK waits behind a backlog that only assigns. So the work that waits for a trigger
actor, and the new executions that wait for a slot, wait in lanes (docs/design.md, "Lanes"):

- ``notification``: the assignment-notification sources (``jira_assignment_assignee``,
  ``jira_assignment_l2_assignee``) and the executions of their families;
- ``ordinary``: everything else (``jira_automation`` and the others).

Each lane is first in, first out. While both hold work, ``lanes.notification_share``
notifications go for every ordinary one: a notification waits for at most one ordinary trigger
ahead of it, and the oldest ordinary one still gets one turn in ``share + 1``, whatever the
notifications do. ``0`` turns the lanes off: one line, first in, first out.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import Generic, TypedDict, TypeVar

from ticket_dispatcher.domain.matching import NOTIFICATION_LANE, ORDINARY_LANE

LANES = (NOTIFICATION_LANE, ORDINARY_LANE)

T = TypeVar("T")


class LaneView(TypedDict):
    """One lane as the admin view shows it."""

    queued: int
    oldest_queued_age_seconds: float | None


def lane_view(count: int, oldest: datetime | None, now: datetime) -> LaneView:
    """One lane as the admin view shows it: how many wait, and the oldest's age."""
    return {"queued": count, "oldest_queued_age_seconds": None if oldest is None
            else round((now - oldest).total_seconds(), 3)}


class Lanes(Generic[T]):
    """Items waiting in the two lanes, each with the time it came; ``pop`` takes by the share.
    Not thread-safe: its owner holds the lock (the trigger router) or is an actor (the pool)."""

    def __init__(self, share: int):
        self.share = share
        self._lanes: dict[str, deque[tuple[T, datetime]]] = {lane: deque() for lane in LANES}
        self._streak = 0  # notifications taken in a row while ordinary work waited

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())

    def __bool__(self) -> bool:
        return any(self._lanes.values())

    def push(self, item: T, lane: str, at: datetime) -> None:
        # lanes off: everything in one line, so the order is the order of arrival
        self._lanes[lane if self.share else ORDINARY_LANE].append((item, at))

    def pop(self) -> T:
        """The next item by the share; IndexError when there is none."""
        notification, ordinary = self._lanes[NOTIFICATION_LANE], self._lanes[ORDINARY_LANE]
        if notification and (not ordinary or self._streak < self.share):
            self._streak = self._streak + 1 if ordinary else 0
            return notification.popleft()[0]
        self._streak = 0
        return ordinary.popleft()[0]

    def lengths(self) -> dict[str, int]:
        return {lane: len(items) for lane, items in self._lanes.items()}

    def views(self, now: datetime) -> dict[str, LaneView]:
        """Every lane as the admin view shows it (``lane_view``)."""
        return {lane: lane_view(len(items), self.oldest(lane), now)
                for lane, items in self._lanes.items()}

    def oldest(self, lane: str | None = None) -> datetime | None:
        """When the oldest item of ``lane`` (of any lane: None) came."""
        heads = [items[0][1] for name, items in self._lanes.items()
                 if items and (lane is None or name == lane)]
        return min(heads) if heads else None
