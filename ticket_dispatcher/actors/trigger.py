"""TriggerActors: claim a pending trigger, load the issue, match, hand executions to the pool.

``TriggerProcessor`` (actors/trigger_processor.py) holds the logic (docs/design.md, "The life
of a trigger"); ``TriggerActor`` is the thin actor around it, and ``TriggerRouter`` hands each
trigger to an idle actor or queues it, first in first out, for the first actor that frees, so a
trigger never waits behind a slow issue load of another.

A trigger whose processing the shutdown interrupts stays ``processing`` (or ``pending``) and
boot recovery takes it over.

A trigger is claimed under a lease (actors/leases.py) and every write that closes it is fenced
by that lease. A trigger whose processing meets a database failure (or an execution pool that
does not answer in time) is never failed for it: it keeps its claim and is processed again
after a capped, jittered backoff. The router knows every trigger this process has in hand
(queued, processing or waiting to retry), so a trigger is never in hand twice, and the
supervisor's heartbeat renews their leases and resumes the ones nobody holds.
"""

from __future__ import annotations

import itertools
import logging
import threading
from datetime import datetime, timedelta

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.lanes import Lanes
from ticket_dispatcher.actors.leases import store_fault_backoff
from ticket_dispatcher.actors.messages import (
    CreateExecutions,
    CreationResult,
    ProcessTrigger,
    TriggerOutcome,
)
from ticket_dispatcher.actors.shadow import ShadowLane
from ticket_dispatcher.actors.status import TriggerActorsView, TriggerLeaseView
from ticket_dispatcher.actors.trigger_processor import (
    CreateInPool,
    CreationUnanswered,
    TriggerProcessor,
    TriggerWork,
)
from ticket_dispatcher.domain.execution import Trigger
from ticket_dispatcher.domain.matching import NOTIFICATION_LANE, ORDINARY_LANE, lane_of
from ticket_dispatcher.errors import CallAbandoned, StoreUnavailable
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)

# The longest a trigger actor waits for the execution pool to create its executions.
CREATE_TIMEOUT_SECONDS = 30


def create_in(pool: pykka.ActorRef) -> CreateInPool:
    """The pool's creation as a trigger processor asks it: in the actor's thread, bounded."""
    def create(request: CreateExecutions) -> CreationResult:
        try:
            result: CreationResult = pool.ask(request, block=True,
                                              timeout=CREATE_TIMEOUT_SECONDS)
        except pykka.ActorDeadError:
            raise CallAbandoned("the execution pool has stopped") from None
        except pykka.Timeout:
            raise CreationUnanswered("the execution pool did not answer in time") from None
        return result
    return create


class TriggerActor(TrackedActor):
    def __init__(self, deps: RuntimeDeps, processor: TriggerProcessor, router: TriggerRouter):
        super().__init__(deps.activity)
        self._deps = deps
        self._processor = processor
        self._router = router

    def handle(self, message: object) -> None:
        if not isinstance(message, ProcessTrigger):
            return
        work = self._router.work(message)
        outcome = None
        try:
            if work is not None:  # else a retry of a trigger handed on by the sweeper
                self._deps.intake.wait_turn()  # the requests being accepted go first
                outcome = self._processor.process(work)
        except Exception:  # never let one trigger stop the actor
            log.exception("trigger actor failed", extra={"trigger_id": message.trigger_id})
        finally:
            self._router.processed(work, retry=outcome is TriggerOutcome.INTERRUPTED)
            # Told before this message's activity ends, so a queued trigger is never idle time.
            if (following := self._router.next_for(self.actor_ref)) is not None:
                self._deps.activity.tell(self.actor_ref, following)
            else:
                self._router.pull()  # idle now: take what waits in the store, if anything


class TriggerRouter:
    """An idle trigger actor gets the trigger at once; when all are busy it waits in its lane
    (actors/lanes.py: notifications before ordinary triggers, by ``lanes.notification_share``),
    and the first actor to finish takes the next (``next_for``).

    It also knows every trigger in hand here (``_in_hand``: queued, processing or waiting to
    retry), so submitting one already in hand does nothing, and the heartbeat can renew the
    leases of the ones being processed (``heartbeat``)."""

    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef, size: int,
                 shadows: ShadowLane):
        self._deps = deps
        self._lock = threading.Lock()
        self._queue: Lanes[ProcessTrigger] = Lanes(deps.config.lanes.notification_share)
        deps.metrics.lanes("triggers", self._queue.lengths())  # each lane's series from the start
        self._in_hand: dict[int, TriggerWork] = {}
        self._tokens = itertools.count(1)
        create = create_in(pool)
        self._actors = [TriggerActor.start(deps, TriggerProcessor(deps, create, shadows.offer),
                                           self)
                        for _ in range(size)]
        self._idle: list[pykka.ActorRef] = list(self._actors)
        self.reclaimed_total = 0
        # The store as a queue: actors a pull is claiming for right now, and whether the store
        # may hold more due triggers than the last pull took.
        self._reserved = 0
        self._more = True
        self._pulls = 0  # pulls since the last that took ordinary triggers first

    def submit(self, trigger_id: int, recovering: bool = False, *,
               claimed: Trigger | None = None, source: str | None = None) -> None:
        """Process the trigger here; ``source`` (or the claimed trigger's) decides its lane,
        ordinary when not known."""
        lane = lane_of(claimed.source if claimed is not None else source)
        with self._lock:
            if trigger_id in self._in_hand:
                # Queued, processing or waiting to retry here already. A claim taken for it
                # meanwhile is this process's own: its processing claims it again.
                return
            work = TriggerWork(trigger_id, recovering, token=next(self._tokens), claimed=claimed,
                               lane=lane)
            self._in_hand[trigger_id] = work
        self._dispatch(ProcessTrigger(trigger_id, recovering, work.token))

    def has_idle(self) -> bool:
        """An idle trigger actor would take a trigger submitted now."""
        with self._lock:
            return len(self._idle) > len(self._queue) + self._reserved

    def work_arrived(self) -> None:
        """Another replica (or this one) says there may be triggers to claim."""
        self._more = True
        self.pull()

    def pull(self) -> None:
        """Claim as many due triggers as there are idle trigger actors here, so a busy
        replica leaves the rest to the others (``TriggerRepository.claim_due``; a single
        process has none to claim: actors/cluster.py)."""
        deps = self._deps
        if deps.stopping.is_set() or not self._more:
            return
        with self._lock:
            free = len(self._idle) - len(self._queue) - self._reserved
            if free <= 0:
                return
            self._reserved += free
            first = self._lane_first()
        claimed = []
        try:
            now = deps.clock.now()
            claimed = deps.cluster.claim_triggers(
                deps.store, deps.owner, free, now=now,
                expires_at=now + deps.config.leases.duration, first=first)
            self._more = len(claimed) == free
        except StoreUnavailable:
            pass  # the store's health reports the outage; the poll comes again
        finally:
            with self._lock:
                self._reserved -= free
        for trigger in claimed:
            self.submit(trigger.id, claimed=trigger)

    def _lane_first(self) -> str | None:
        """The lane a pull claims from first (under the lock). Notifications, but
        one pull in ``notification_share + 1`` takes ordinary triggers first, so they always
        move."""
        share = self._queue.share
        if not share:
            return None
        self._pulls = (self._pulls + 1) % (share + 1)
        return ORDINARY_LANE if self._pulls == 0 else NOTIFICATION_LANE

    def _dispatch(self, message: ProcessTrigger) -> None:
        with self._lock:
            if not self._idle:
                work = self._in_hand.get(message.trigger_id)
                self._queue.push(message, work.lane if work is not None else ORDINARY_LANE,
                                 self._deps.clock.now())
                self._deps.metrics.lanes("triggers", self._queue.lengths())
                return
            actor = self._idle.pop()
        self._deps.activity.tell(actor, message)

    def work(self, message: ProcessTrigger) -> TriggerWork | None:
        """The work ``message`` is about; None when it was given up meanwhile."""
        with self._lock:
            work = self._in_hand.get(message.trigger_id)
            return work if work is not None and work.token == message.token else None

    def processed(self, work: TriggerWork | None, *, retry: bool) -> None:
        """The trigger is done here, or waits for its retry after a backoff."""
        if work is None:
            return
        with self._lock:
            if self._in_hand.get(work.trigger_id) is not work:
                return  # replaced by the sweeper meanwhile
            if not retry or self._deps.stopping.is_set():
                del self._in_hand[work.trigger_id]
                return
            work.attempts += 1
            work.hold.progress_at = None  # waiting, not hung: its lease is renewed meanwhile
        due = self._deps.clock.now() + store_fault_backoff(work.attempts)
        message = ProcessTrigger(work.trigger_id, work.recovering, work.token)
        self._deps.scheduler.call_at(due, lambda: self._dispatch(message), label="retry")

    def next_for(self, actor: pykka.ActorRef) -> ProcessTrigger | None:
        """The queued trigger ``actor`` should take now, or None (and it is idle again)."""
        with self._lock:
            if self._queue:
                following = self._queue.pop()
                self._deps.metrics.lanes("triggers", self._queue.lengths())
                return following
            self._idle.append(actor)
            return None

    def heartbeat(self) -> None:
        """Renew the leases of the triggers processed here, then resume the stale ones:
        unheld, or held by an actor that showed no progress for a whole lease."""
        deps = self._deps
        now, duration = deps.clock.now(), deps.config.leases.duration
        with self._lock:
            alive = {work.trigger_id: work for work in self._in_hand.values()
                     if work.hold.lease is not None and not work.hold.hung(now, duration)}
        held = deps.store.triggers.renew(deps.owner, list(alive), now + duration)
        for trigger_id, work in alive.items():
            if trigger_id in held:
                work.hold.valid_until = now + duration
        # What no process has in hand is left to the claim below, on replicas.
        for trigger_id in deps.cluster.resumes(deps.store.triggers.stale(now), self._in_hand):
            self._resume(trigger_id, now, duration)
        self.work_arrived()

    def _resume(self, trigger_id: int, now: datetime, duration: timedelta) -> None:
        with self._lock:
            work = self._in_hand.get(trigger_id)
            if work is not None and not work.hold.hung(now, duration):
                return  # in hand and healthy; its lease is renewed on the next beat
            if work is not None:
                del self._in_hand[trigger_id]  # the hung actor's writes are refused now
        log.warning("resuming a trigger that nobody processes", extra={
            "trigger_id": trigger_id,
            "reason": "its actor showed no progress" if work else "its lease expired"})
        self.reclaimed_total += 1
        self.submit(trigger_id)

    def stop(self) -> list[pykka.Future]:
        """Tell every trigger actor to stop; the futures say when they have."""
        return [actor.stop(block=False) for actor in self._actors]

    def status(self) -> TriggerActorsView:
        now = self._deps.clock.now()
        with self._lock:
            idle, queued, lanes = len(self._idle), len(self._queue), self._queue.views(now)
            leases: list[TriggerLeaseView] = [
                {"trigger_id": work.trigger_id, "epoch": work.hold.lease.epoch,
                 "expires_at": format_time(work.hold.valid_until)}
                for work in self._in_hand.values() if work.hold.lease is not None]
            database_waits = sum(1 for work in self._in_hand.values() if work.attempts)
        return {"actors": len(self._actors), "busy": len(self._actors) - idle,
                "queue_length": queued, "lanes": lanes, "database_waits": database_waits,
                "leases": leases,
                "reclaimed_total": self.reclaimed_total,
                "waiting_for_intake": self._deps.intake.waiting,
                "alive": sum(1 for actor in self._actors if actor.is_alive())}
