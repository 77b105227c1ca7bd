"""WatchSchedule: which parked page waits the ACK watcher looks at, and when.

The ACK watcher (actors/watcher.py) is the actor around it: it reads the waits' executions,
issues and cards, and tells the pool what to run; this plain object decides which waits are
due for a look, when each is looked at again at the paced rate, and when the watcher's one
timer fires. A test builds it with a clock and nothing else.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime, timedelta

WINDOW = timedelta(milliseconds=250)  # a look may come this early, so looks share batches
BATCH = 100  # waits per Jira search (its key list) and per saved batch of looks
# Shared mode: how often the watcher takes the due waits nobody looked at. Each replica's own
# are looked at before they are due, so a due one is another's that is gone or behind.
ADOPT_EVERY = timedelta(seconds=1)


@dataclass(slots=True)
class WatchedWait:
    """A watched wait between two looks: its ``wake_at`` as stored, and whether it is only to
    be handed back to the pool then (``plain``: no look; its execution runs at its time)."""

    wake_at: datetime
    plain: bool = False
    adopted: bool = False  # taken from the store (shared mode), not handed in by the pool


@dataclass(frozen=True)
class DueWaits:
    """What a look takes: the plain waits whose wake has come (handed back as they are), and
    the waits to look at (due within ``WINDOW``)."""

    plain: list[tuple[int, WatchedWait]]
    looking: list[tuple[int, WatchedWait]]


class WatchSchedule:
    """The watched waits and their next looks, paced at ``looks_per_second`` (0: no pacing).

    Each saved look parks its wait until the next free turn of one schedule whose turns are
    ``1 / looks_per_second`` apart, and never sooner than its poll; the turns never run more
    than one round of the waits watched past a wait's poll. A wait's deadline takes no turn.
    """

    def __init__(self, looks_per_second: float) -> None:
        self._waits: dict[int, WatchedWait] = {}
        self._looks: dict[int, datetime] = {}  # each wait's next look (its wake_at, mostly)
        # (next look, execution id) of the waits to look at, and of the plain ones (their
        # wake); both with stale entries, which ``_looks`` tells apart
        self._due: list[tuple[datetime, int]] = []
        self._wakes: list[tuple[datetime, int]] = []
        self._look_at: datetime | None = None  # when the armed timer fires
        self._looked_at: datetime | None = None  # the last look
        self.turn = (timedelta(seconds=1 / looks_per_second) if looks_per_second
                     else None)  # None: no pacing
        self._next_turn: datetime | None = None  # the schedule's next free turn

    def __len__(self) -> int:
        return len(self._waits)

    # -- the pace ---------------------------------------------------------------------------

    def round_of(self, watched: int) -> timedelta:
        """How long one look at each of ``watched`` waits takes at the paced rate."""
        return self.turn * watched if self.turn is not None else timedelta(0)

    def next_look(self, poll: timedelta, deadline: datetime, now: datetime,
                  watched: int) -> datetime:
        """When to look at a wait again after a look at ``now``: its ``poll`` later, or the
        schedule's next free turn when that is later (but never more than a round of the
        ``watched`` waits past its poll, so the turns of waits that ended are given back).
        The turn is taken, unless the look falls at the wait's ``deadline`` or after."""
        soonest = now + poll
        if self.turn is None:
            return soonest
        turn = min(self._next_turn or soonest, soonest + self.round_of(watched))
        look = max(soonest, turn)
        if look < deadline:  # the wake at its deadline takes no turn
            self._take_turn(look)
        return look

    def adopt_limit(self) -> int:
        """How many waits another replica left are taken at once: what the pace allows in
        ``ADOPT_EVERY``, twice over."""
        return (max(1, round(2 * ADOPT_EVERY / self.turn)) if self.turn is not None
                else 5 * BATCH)

    def _take_turn(self, look: datetime) -> None:
        if self.turn is not None:
            self._next_turn = max(self._next_turn or look, look + self.turn)

    # -- the waits --------------------------------------------------------------------------

    def keep(self, execution_id: int, wait: WatchedWait, at: datetime | None = None) -> None:
        """Hold a wait until its next look, at its ``wake_at`` (up to ``WINDOW`` sooner: the
        looks due close together share a batch) or at ``at``; or, when it is only to be
        handed back (``plain``), until its ``wake_at`` exactly."""
        look = at or wait.wake_at
        self._waits[execution_id] = wait
        self._looks[execution_id] = look
        if wait.plain and at is None:
            heapq.heappush(self._wakes, (look, execution_id))
            return
        heapq.heappush(self._due, (look, execution_id))
        self._take_turn(look)

    def forget(self, execution_id: int) -> None:
        self._waits.pop(execution_id, None)
        self._looks.pop(execution_id, None)

    def take_due(self, now: datetime) -> DueWaits:
        """A look at ``now``: take the plain waits whose wake has come and the waits due for
        a look within ``WINDOW``; they are no longer held."""
        self._looked_at = now
        return DueWaits(self._take(self._wakes, now), self._take(self._due, now + WINDOW))

    def _take(self, heap: list[tuple[datetime, int]],
              until: datetime) -> list[tuple[int, WatchedWait]]:
        taken = []
        while (soonest := self._soonest(heap)) is not None and soonest <= until:
            _, execution_id = heapq.heappop(heap)
            del self._looks[execution_id]
            taken.append((execution_id, self._waits.pop(execution_id)))
        return taken

    def _soonest(self, heap: list[tuple[datetime, int]]) -> datetime | None:
        while heap:
            at, execution_id = heap[0]
            if self._looks.get(execution_id) == at:
                return at
            heapq.heappop(heap)  # a superseded entry
        return None

    # -- the timer --------------------------------------------------------------------------

    def fired(self) -> None:
        """The armed timer fired."""
        self._look_at = None

    def timer(self) -> datetime | None:
        """When a new look timer must fire, None when the armed one will do (or nothing is
        held): at the soonest plain wake exactly, or ``WINDOW`` before the soonest look, but
        not sooner than ``WINDOW`` after the last look, so that a steady stream of looks is
        taken in batches of ``WINDOW``'s worth."""
        times = []
        if (wake := self._soonest(self._wakes)) is not None:
            times.append(wake)
        if (look := self._soonest(self._due)) is not None:
            times.append(max(look - WINDOW, self._looked_at + WINDOW) if self._looked_at
                         else look - WINDOW)
        if not times:
            return None
        soonest = min(times)
        if self._look_at is None or soonest < self._look_at:
            self._look_at = soonest
            return soonest
        return None
