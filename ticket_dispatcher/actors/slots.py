"""ExecutionSlots: the execution pool's bookkeeping and decisions, without its actor.

Which execution takes the next free slot, which waits and until when, which run a report is
about, and what the sweeper resumes: all of it is decided here, in plain objects a test builds
with a clock and a few fakes. The execution pool (actors/pool.py) is the actor around it: it
receives the messages, hands the runs to the execution workers, arms the timers and talks to
the store, and asks ``ExecutionSlots`` what to do.

``W`` is how the pool knows a worker (its actor reference); here it is only held, counted and
asked whether it is still alive.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Generic, Protocol, TypeVar

from ticket_dispatcher.actors.lanes import Lanes, LaneView, lane_view
from ticket_dispatcher.actors.leases import Hold, Position, store_fault_backoff
from ticket_dispatcher.actors.messages import (
    Cancellation,
    LeaseView,
    ParkedView,
    PoolFigures,
    PoolView,
    ReclaimView,
    RunningView,
)
from ticket_dispatcher.domain.matching import ORDINARY_LANE
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)

PARKED_SHOWN = 50  # parked executions listed in GET /admin/actors (all are counted)
RECLAIMED_SHOWN = 20  # the sweeper's latest reclaims listed in GET /admin/actors


class SlotWorker(Protocol):
    def is_alive(self) -> bool: ...


W = TypeVar("W", bound=SlotWorker)


@dataclass
class Running(Generic[W]):
    worker: W  # the worker it runs on
    since: datetime
    hold: Hold  # its ``position`` is where the run is (set by the run)
    run: int


@dataclass
class SweepRecord:
    """What the sweeper did, for the admin view."""

    last_at: datetime | None = None
    reclaimed_total: int = 0
    recent: deque[ReclaimView] = field(default_factory=lambda: deque(maxlen=RECLAIMED_SHOWN))

    def reclaimed(self, execution_id: int, why: str, at: datetime) -> None:
        self.reclaimed_total += 1
        self.recent.appendleft({"execution_id": execution_id, "reason": why,
                                "at": format_time(at)})


class SlotQueue:
    """Executions waiting for a slot, in two lines: ``new`` work (created, recovered,
    restarted) and ``wake``s of parked waits. When both wait they take turns, so a thousand
    polling ACK waits cannot hold an ordinary dispatch behind all of them, and a stream of new
    work cannot starve a wait past its poll (measured: bench/parked_waits.py). New work waits
    in its lane (actors/lanes.py): a notification's executions before a backlog of ordinary
    ones, by ``lanes.notification_share``."""

    def __init__(self, share: int = 0) -> None:
        self._new: Lanes[int] = Lanes(share)
        self._wake: deque[tuple[int, datetime]] = deque()
        self._members: set[int] = set()
        self._wake_next = False

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, execution_id: int) -> bool:
        return execution_id in self._members

    def push(self, execution_id: int, at: datetime, *, wake: bool = False,
             lane: str = ORDINARY_LANE) -> None:
        if wake:
            self._wake.append((execution_id, at))
        else:
            self._new.push(execution_id, lane, at)
        self._members.add(execution_id)

    def pop(self) -> int:
        if (self._wake_next and self._wake) or not self._new:
            execution_id, _ = self._wake.popleft()
            self._wake_next = False
        else:
            execution_id = self._new.pop()
            self._wake_next = True
        self._members.discard(execution_id)
        return execution_id

    def oldest(self) -> datetime | None:
        heads = [self._wake[0][1]] if self._wake else []
        if (new := self._new.oldest()) is not None:
            heads.append(new)
        return min(heads) if heads else None

    def lengths(self) -> dict[str, int]:
        return {**self._new.lengths(), "wake": len(self._wake)}

    def lanes(self, now: datetime) -> dict[str, LaneView]:
        """Each lane of new work and the wakes' line, as the admin view shows them."""
        return {**self._new.views(now),
                "wake": lane_view(len(self._wake), self._wake[0][1] if self._wake else None,
                                  now)}


class AfterPark(Enum):
    """Where a parked execution waits, once its run parked it."""

    QUEUED = "queued"  # cancelled meanwhile: it runs at once, to end
    WATCHED = "watched"  # the ACK watcher looks at it
    PARKED = "parked"  # parked here, until its wake time


class ExecutionSlots(Generic[W]):
    """The slots, what runs in them, what waits for one, and what is parked.

    - At most ``slots`` executions run at once; the rest wait in the ``SlotQueue``, and an
      execution queued or running is never queued again.
    - Each start of an execution is numbered (``run``), so a report from a run already
      replaced is told apart (``current``).
    - Parked executions hold no slot: their wake times wait in a heap, and one timer at the
      soonest (``wake_timer``) wakes them (``wake_due``).
    - A run interrupted by the database is queued again after a backoff that grows with the
      interruptions in a row (``interrupted``).
    - Started workers without a run wait in ``idle``, the last freed first.
    """

    def __init__(self, slots: int, share: int = 0) -> None:
        self.slots = slots
        self.queue = SlotQueue(share)
        self.running: dict[int, Running[W]] = {}
        self.idle: list[W] = []  # started workers without an execution
        self.parked: dict[int, datetime] = {}
        self.retrying: dict[int, datetime] = {}  # interrupted: queued again at this time
        # Cancels told to a running execution, until it ends: a run that ends before its next
        # step (a park, an interruption) hands the cancel to the next one.
        self.cancels: dict[int, Cancellation] = {}
        self.interruptions: dict[int, int] = {}  # interrupted steps in a row
        self.sweeps = SweepRecord()
        # The store as a queue: whether it may hold more due executions than the last claim
        # took, and when a timer tells the next claim for a parked wait.
        self.more = True
        self.pull_at: datetime | None = None
        self._runs = itertools.count(1)
        self._wakes: list[tuple[datetime, int]] = []  # (wake_at, id) of parked; stale entries
        self._wake_at: datetime | None = None  # when the armed wake timer fires

    # -- figures ----------------------------------------------------------------------------

    def room(self) -> int:
        """Slots no run holds."""
        return self.slots - len(self.running)

    def free(self) -> int:
        """Slots no run holds and nothing queued will take."""
        return max(0, self.room() - len(self.queue))

    def free_now(self) -> int:
        """Slots free with nothing queued (0 while anything waits for one)."""
        return 0 if self.queue else self.room()

    def workers(self) -> list[W]:
        """Every started worker, running or idle."""
        return [running.worker for running in self.running.values()] + self.idle

    # -- the queue and the slots --------------------------------------------------------------

    def enqueue(self, execution_id: int, now: datetime, *, wake: bool = False,
                lane: str = ORDINARY_LANE) -> bool:
        """Queue the execution for a slot; False when it is queued or running already."""
        if execution_id in self.queue or execution_id in self.running:
            return False  # dedupe: it will run (or is running) anyway
        self.retrying.pop(execution_id, None)  # it runs now; its retry timer finds nothing
        self.queue.push(execution_id, now, wake=wake, lane=lane)
        return True

    def next_start(self) -> int | None:
        """The queued execution to start now, when a slot is free."""
        if self.queue and len(self.running) < self.slots:
            return self.queue.pop()
        return None

    def start(self, execution_id: int, now: datetime,
              hand: Callable[[int, Hold], W]) -> None:
        """Start a run of the execution: ``hand`` gives it (the run's number and its hold) to
        a worker, and says which."""
        run, hold = next(self._runs), Hold(now)
        self.running[execution_id] = Running(hand(run, hold), since=now, hold=hold, run=run)

    def current(self, execution_id: int, run: int) -> Running[W] | None:
        """The running entry ``run`` reports about; None for a replaced actor's report."""
        running = self.running.get(execution_id)
        return running if running is not None and running.run == run else None

    def release(self, execution_id: int, run: int) -> bool:
        """Free the slot of ``run``; False when that run had already been replaced."""
        if self.current(execution_id, run) is None:
            return False
        worker = self.running.pop(execution_id).worker
        if worker.is_alive():  # not after a failure that escaped the run's guard
            self.idle.append(worker)
        return True

    # -- what runs reports --------------------------------------------------------------------

    def ended(self, execution_id: int) -> None:
        """Its run (released) ended the execution: nothing of it is remembered."""
        self.interruptions.pop(execution_id, None)
        self.cancels.pop(execution_id, None)

    def parked_run(self, execution_id: int, wake_at: datetime, now: datetime, *,
                   watched: bool) -> AfterPark:
        """Its run (released) parked the execution until ``wake_at``: left to the ACK
        watcher (``watched``: the run says the watcher can keep it, and there is one), parked
        here, or queued at once when it was cancelled meanwhile."""
        self.interruptions.pop(execution_id, None)
        if execution_id in self.cancels:
            self.enqueue(execution_id, now)  # cancelled meanwhile: end it now
            return AfterPark.QUEUED
        if watched:
            self.parked[execution_id] = wake_at  # the watcher looks for it
            return AfterPark.WATCHED
        self.park(execution_id, wake_at)
        return AfterPark.PARKED

    def interrupted(self, execution_id: int, run: int) -> None:
        """A database failure (or a lost lease) is to interrupt the run (before its release):
        a run that advanced a step starts a new series of interruptions."""
        running = self.current(execution_id, run)
        if running is not None and running.hold.position is not None:
            self.interruptions.pop(execution_id, None)  # it advanced: a new series

    def retry_at(self, execution_id: int, now: datetime) -> tuple[datetime, int]:
        """When the interrupted execution (released) is queued again: after a backoff that
        grows with the interruptions in a row; and how many that is, this one counted."""
        attempt = self.interruptions.get(execution_id, 0) + 1
        self.interruptions[execution_id] = attempt
        due = now + store_fault_backoff(attempt)
        self.retrying[execution_id] = due
        return due, attempt

    def retry_due(self, execution_id: int, now: datetime) -> bool:
        """Its backoff is over: queued again, unless it runs already (or was cancelled)."""
        if self.retrying.pop(execution_id, None) is None:
            return False
        return self.enqueue(execution_id, now)

    def watched_wake(self, execution_id: int, now: datetime, *, adopted: bool) -> bool:
        """The ACK watcher hands back a wait to run (a wait it took from the store, when
        ``adopted``); False when it was cancelled meanwhile."""
        if self.parked.pop(execution_id, None) is None and not adopted:
            return False
        return self.enqueue(execution_id, now, wake=True)  # its actor claims it by id

    def rescheduled(self, wakes: dict[int, datetime | None], adopted: Iterable[int]) -> None:
        """The ACK watcher looked at these waits: each one's next wake, or None when it moved
        on."""
        adopted = set(adopted)
        for execution_id, wake_at in wakes.items():
            if wake_at is None:
                self.parked.pop(execution_id, None)
            elif execution_id in self.parked or execution_id in adopted:
                self.parked[execution_id] = wake_at

    def cancelled(self, execution_id: int) -> None:
        """The execution was ended while queued or parked: it no longer waits."""
        self.parked.pop(execution_id, None)  # its heap entry is dropped as stale
        self.retrying.pop(execution_id, None)

    # -- parked executions --------------------------------------------------------------------

    def recover(self, executions: Iterable[tuple[int, datetime | None]], now: datetime, *,
                watching: bool) -> list[tuple[int, datetime]]:
        """Take back what boot recovery found running: queued when due, else parked (or, when
        an ACK watcher is ``watching``, left to it: it knows a page wait from the others). The
        waits for the watcher."""
        watch = []
        for execution_id, wake_at in executions:
            if wake_at is None or wake_at <= now:
                self.enqueue(execution_id, now)
            elif watching:
                self.parked[execution_id] = wake_at
                watch.append((execution_id, wake_at))
            else:
                self.park(execution_id, wake_at)
        return watch

    def park(self, execution_id: int, wake_at: datetime) -> None:
        """Park until ``wake_at``. One heap of wake times and one timer for the soonest: a
        hundred thousand parked executions after a restart are one timer, not a hundred
        thousand."""
        self.parked[execution_id] = wake_at
        heapq.heappush(self._wakes, (wake_at, execution_id))

    def wake_timer(self) -> datetime | None:
        """When a new wake timer must fire: the soonest wake, when no armed timer fires by
        then; None when none is needed."""
        soonest = self._soonest_wake()
        if soonest is not None and (self._wake_at is None or soonest < self._wake_at):
            self._wake_at = soonest
            return soonest
        return None

    def wake_due(self, now: datetime) -> list[int]:
        """The wake timer fired: queue every parked execution whose time has come (its actor
        claims it by id); the ones queued."""
        self._wake_at = None
        woken = []
        while (soonest := self._soonest_wake()) is not None and soonest <= now:
            _, execution_id = heapq.heappop(self._wakes)
            del self.parked[execution_id]
            if self.enqueue(execution_id, now, wake=True):
                woken.append(execution_id)
        return woken

    def _soonest_wake(self) -> datetime | None:
        while self._wakes:
            wake_at, execution_id = self._wakes[0]
            if self.parked.get(execution_id) == wake_at:
                return wake_at
            heapq.heappop(self._wakes)  # woken, cancelled or parked again meanwhile
        return None

    # -- the store as a queue -----------------------------------------------------------------

    def pulled(self, now: datetime) -> None:
        """A claim was asked for (a notification, a timer): the store may hold more."""
        if self.pull_at is not None and self.pull_at <= now:
            self.pull_at = None
        self.more = True

    def claimed(self, ids: Iterable[int], more: bool) -> list[int]:
        """A claim took these executions from the store: the ones to start (one started here
        meanwhile, whose claim its run has not made yet, is not started twice)."""
        self.more = more
        starting = []
        for execution_id in ids:
            self.parked.pop(execution_id, None)
            self.retrying.pop(execution_id, None)
            if execution_id not in self.running:
                starting.append(execution_id)
        return starting

    def pull_timer(self, soonest: datetime | None) -> datetime | None:
        """When a new claim timer must fire for the store's soonest unheld wait; None when
        none is needed."""
        if soonest is not None and (self.pull_at is None or soonest < self.pull_at):
            self.pull_at = soonest
            return soonest
        return None

    # -- leases -------------------------------------------------------------------------------

    def renewable(self, now: datetime, duration: timedelta) -> dict[int, Hold]:
        """The holds of the runs whose leases the heartbeat renews: claimed and not hung."""
        return {execution_id: running.hold for execution_id, running in self.running.items()
                if running.hold.lease is not None and not running.hold.hung(now, duration)}

    def sweep(self, execution_id: int, now: datetime, duration: timedelta) -> W | None:
        """Resume an execution the store says nobody holds, unless it is in hand here. A run
        that showed no progress for a whole lease is given up on: its worker, to stop once
        its call returns (its own writes and calls are refused from now on)."""
        running = self.running.get(execution_id)
        if running is not None:
            if not running.hold.hung(now, duration):
                return None  # just started and not yet claimed, or renewed after this read
            running.hold.lost = True
            del self.running[execution_id]
            log.warning("execution actor showed no progress for a whole lease; replacing it",
                        extra={"execution_id": execution_id,
                               "issue_key": position_of(running).issue_key})
            self.sweeps.reclaimed(execution_id, "hung actor replaced", now)
            self.enqueue(execution_id, now)
            return running.worker
        if (execution_id in self.queue or execution_id in self.parked
                or execution_id in self.retrying):
            return None
        log.warning("resuming an execution that no actor held", extra={
            "execution_id": execution_id})
        self.sweeps.reclaimed(execution_id, "no actor held it", now)
        self.enqueue(execution_id, now)
        return None

    # -- the admin view -----------------------------------------------------------------------

    def view(self, now: datetime) -> PoolView:
        oldest = self.queue.oldest()
        soonest = heapq.nsmallest(PARKED_SHOWN, self.parked.items(), key=lambda item: item[1])
        next_wake = soonest[0][1] if soonest else None
        figures: PoolFigures = {
            "slots": self.slots,
            "busy": len(self.running),
            "queue_length": len(self.queue),
            "oldest_queued_age_seconds": (now - oldest).total_seconds() if oldest else None,
            "lanes": self.queue.lanes(now),
            "parked": len(self.parked),
            "next_wake_at": format_time(next_wake),
            "database_waits": len(self.retrying),
            "sweeper": {"last_at": format_time(self.sweeps.last_at),
                        "reclaimed_total": self.sweeps.reclaimed_total,
                        "recent": list(self.sweeps.recent)},
        }
        running: list[RunningView] = [
            {"execution_id": execution_id, "issue_key": p.issue_key, "policy_id": p.policy_id,
             "rule": p.rule, "action": p.action, "since": format_time(r.since),
             "lease": lease_view(r.hold)}
            for execution_id, r in sorted(self.running.items()) for p in (position_of(r),)]
        # the soonest first, bounded: the admin view shows what waits and until when
        parked: list[ParkedView] = [
            {"execution_id": execution_id, "wake_at": format_time(wake_at)}
            for execution_id, wake_at in soonest]
        return PoolView(figures, running, parked)


# A run that has not advanced a step yet: nothing known of it but its id.
_NOWHERE = Position("", None, "", "")


def position_of(running: Running[W]) -> Position:
    return running.hold.position or _NOWHERE


def lease_view(hold: Hold) -> LeaseView | None:
    """The lease a running execution works under, as this process last renewed it."""
    if hold.lease is None:
        return None
    return {"owner": hold.lease.owner, "epoch": hold.lease.epoch,
            "expires_at": format_time(hold.valid_until), "lost": hold.lost}
