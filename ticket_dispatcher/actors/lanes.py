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
from collections.abc import Iterator
from datetime import datetime
from typing import Generic, TypeVar

from ticket_dispatcher.domain.catalog import RESERVED_SOURCES

NOTIFICATION, ORDINARY = "notification", "ordinary"
LANES = (NOTIFICATION, ORDINARY)

T = TypeVar("T")


def lane_of(source: str | None) -> str:
    """The lane of a trigger of ``source`` and of the executions it creates."""
    return NOTIFICATION if source in RESERVED_SOURCES else ORDINARY


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

    def __iter__(self) -> Iterator[T]:
        for lane in self._lanes.values():
            for item, _ in lane:
                yield item

    def push(self, item: T, lane: str, at: datetime) -> None:
        # lanes off: everything in one line, so the order is the order of arrival
        self._lanes[lane if self.share else ORDINARY].append((item, at))

    def pop(self) -> T:
        """The next item by the share; IndexError when there is none."""
        notification, ordinary = self._lanes[NOTIFICATION], self._lanes[ORDINARY]
        if notification and (not ordinary or self._streak < self.share):
            self._streak = self._streak + 1 if ordinary else 0
            return notification.popleft()[0]
        self._streak = 0
        return ordinary.popleft()[0]

    def remove(self, item: T) -> bool:
        """Take ``item`` out wherever it waits; whether it was there."""
        for lane in self._lanes.values():
            for entry in lane:
                if entry[0] == item:
                    lane.remove(entry)
                    return True
        return False

    def lengths(self) -> dict[str, int]:
        return {lane: len(items) for lane, items in self._lanes.items()}

    def oldest(self, lane: str | None = None) -> datetime | None:
        """When the oldest item of ``lane`` (of any lane: None) came."""
        heads = [items[0][1] for name, items in self._lanes.items()
                 if items and (lane is None or name == lane)]
        return min(heads) if heads else None
