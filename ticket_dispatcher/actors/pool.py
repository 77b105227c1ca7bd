"""ExecutionPool: the execution slots, the FIFO queue, and the one writer of new executions.

- At most ``execution_slots`` executions run at once, each on an execution worker
  (actors/execution.py) the pool hands it to; the rest wait in FIFO order. A worker is started
  when no started one is free and is kept for the next execution, so a run costs no thread
  start.
- An execution ID that is queued or running is never queued again (dedupe).
- Parked executions hold no slot; the pool keeps their wake times in a heap, and one
  scheduler timer (``WakeDue``) at the soonest queues each at its ``wake_at``. A page's ACK
  wait is handed to the ACK watcher instead (actors/watcher.py), which wakes it when it must
  run; so is every parked execution boot recovery finds (the watcher tells a page's wait from
  the others, which it hands back at their ``wake_at``).
- Creating executions is serialized here: the busy check (``domain.admission``) and the
  insert happen in this one thread, and the ``live_lock_key`` UNIQUE index guards against
  anything else. Enqueueing happens only after the creating transaction has committed, in
  creation order.
- While the runtime stops, no new execution run starts: what is queued stays ``created`` or
  ``executing`` in the store and boot recovery picks it up.
- A step interrupted by the database (or by a lost lease) frees its slot; the execution is
  queued again after a capped, jittered backoff and resumes from its last checkpoint.
- On every heartbeat the pool renews the leases of its running executions and sweeps: an
  execution that should run and that no live lease covers (its enqueue was lost, its actor is
  gone, or its run showed no progress for a whole lease and is presumed hung) is queued
  again; a hung run's worker is given up on (stopped once its call returns, another takes its
  place), and the run's own writes are refused from then on.
- Shared mode (several replicas on one PostgreSQL database): the store is the queue. What this
  replica creates starts here while it has free slots; the rest, parked waits that come due and
  work whose holder's lease expired are claimed (``ExecutionRepository.claim_due``) by whichever
  replica has free slots, when a notification, a wake timer or the heartbeat says to look.
  The cluster strategy (actors/cluster.py) says which: a single process has nothing to claim.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import socket
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pykka

from ticket_dispatcher import __version__
from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.execution import ExecutionWorker
from ticket_dispatcher.actors.lanes import Lanes, lane_view
from ticket_dispatcher.actors.leases import Hold, Position, store_fault_backoff
from ticket_dispatcher.actors.messages import (
    Cancel,
    CancelExecution,
    CancelOutcome,
    ChildCrashed,
    Crashed,
    CreateExecutions,
    CreationResult,
    Enqueue,
    ExecutionWorkers,
    Finished,
    Heartbeat,
    Interrupted,
    Parked,
    PoolStatus,
    PoolView,
    Pull,
    Recover,
    Rescheduled,
    Retry,
    RunExecution,
    TriggerOutcome,
    WakeDue,
    Watch,
    WatchedWake,
)
from ticket_dispatcher.actors.watcher import AckWatcher, WatchFigures
from ticket_dispatcher.domain.admission import AdmissionOutcome, admit
from ticket_dispatcher.domain.execution import Execution, ExecutionMode, FailureCode
from ticket_dispatcher.domain.matching import ORDINARY_LANE, lane_of
from ticket_dispatcher.errors import Conflict, NotFound, StoreUnavailable
from ticket_dispatcher.store.cluster import notify_work
from ticket_dispatcher.store.database import unit_of_work
from ticket_dispatcher.store.replicas import ReplicaBeat
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)

# How long after an unheld wait's wake_at a claim from the store takes it. Its own replica
# wakes it on time (its pool's timer queues it, or its ACK watcher looks at it up to 250 ms
# before its wake_at); one still due later was left by a replica that is gone or behind, and
# every second the ACK watchers take those (actors/watcher.py, ``ADOPT_EVERY``), without a
# slot. A claim comes for what they have left after a few of their rounds. Without it, every
# pull would run in slots the page waits a watcher was about to look at, and the pull timer at
# the store's soonest wake would have every replica claim in vain hundreds of times a second.
UNHELD_GRACE = timedelta(seconds=5)
PARKED_SHOWN = 50  # parked executions listed in GET /admin/actors (all are counted)
RECLAIMED_SHOWN = 20  # the sweeper's latest reclaims listed in GET /admin/actors


@dataclass
class Running:
    ref: pykka.ActorRef  # the worker it runs on
    since: datetime
    hold: Hold  # its ``position`` is where the run is (set by the run)
    run: int


@dataclass
class SweepRecord:
    """What the sweeper did, for the admin view."""

    last_at: datetime | None = None
    reclaimed_total: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=RECLAIMED_SHOWN))

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

    def lanes(self, now: datetime) -> dict[str, dict]:
        """Each lane of new work and the wakes' line, as the admin view shows them."""
        return {**self._new.views(now),
                "wake": lane_view(len(self._wake), self._wake[0][1] if self._wake else None,
                                  now)}


class SlotsFree:
    """Execution slots free with nothing queued, as the pool last counted them: the pool
    writes it after every message, the shadow lane reads it (a shadow runs only then)."""

    def __init__(self) -> None:
        self.count = 0


# What the pool answers an ask (CreateExecutions, CancelExecution, PoolStatus,
# ExecutionWorkers); None to a told message.
PoolAnswer = CreationResult | CancelOutcome | PoolView | list[pykka.ActorRef] | None


class ExecutionPool(TrackedActor):
    def __init__(self, deps: RuntimeDeps, supervisor: pykka.ActorRef, free: SlotsFree,
                 ack_watch: WatchFigures):
        """``free``: where the pool says how many slots are free; ``ack_watch``: where its
        ACK watcher says what it watches."""
        super().__init__(deps.activity)
        self._deps = deps
        self._slots = deps.config.execution_slots
        self._started = deps.clock.now()  # this replica's start, as the admin view shows it
        # The lock keys of the live executions, as far as they are known here (``_create``).
        self._keys = deps.cluster.lock_keys()
        self._host, self._pid = socket.gethostname(), os.getpid()
        self._supervisor = supervisor
        self._queue = SlotQueue(deps.config.lanes.notification_share)
        self._running: dict[int, Running] = {}
        self._idle: list[pykka.ActorRef] = []  # started workers without an execution
        self._parked: dict[int, datetime] = {}
        self._retrying: dict[int, datetime] = {}  # interrupted: queued again at this time
        # Cancels told to a running execution, until it ends: a run that ends before its next
        # step (a park, an interruption) hands the cancel to the next one.
        self._cancels: dict[int, str] = {}
        self._interruptions: dict[int, int] = {}  # interrupted steps in a row
        # The trigger's read of the issue beside each execution created here and not yet
        # started, for its first run, when one is kept (actors/first_read.py).
        self._first_reads = deps.cluster.first_reads()
        self._runs = itertools.count(1)
        self._sweeps = SweepRecord()
        # The store as a queue: whether it may hold more due executions than the last claim
        # took, and when a timer tells the next Pull for a parked wait.
        self._free = free
        self._free.count = self._slots
        self._more = True
        self._pull_at: datetime | None = None
        self._ack_watch = ack_watch
        self._watcher: pykka.ActorRef | None = None  # started with the pool
        self._wakes: list[tuple[datetime, int]] = []  # (wake_at, id) of _parked; stale entries
        self._wake_at: datetime | None = None  # when the armed WakeDue timer fires

    def on_start(self) -> None:
        self._watcher = AckWatcher.start(self._deps, self.actor_ref, self._ack_watch)

    def on_stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop(block=False)
        super().on_stop()

    def handle(self, message: object) -> PoolAnswer:
        try:
            return self._handle(message)
        except Exception:
            if isinstance(message, (CreateExecutions, CancelExecution, PoolStatus)):
                raise  # an ask: the asker gets the exception
            log.exception("execution pool failed on %s", type(message).__name__)
            return None
        finally:  # four gauge sets: cheaper than asking the pool at every scrape
            self._deps.metrics.pool(slots=self._slots, busy=len(self._running),
                                    queued=len(self._queue), parked=len(self._parked))
            self._deps.metrics.lanes("executions", self._queue.lengths())
            self._free.count = 0 if self._queue else self._slots - len(self._running)

    def _handle(self, message: object) -> PoolAnswer:
        match message:
            case Enqueue(execution_id):
                self._enqueue(execution_id)
            case Recover(executions):
                now, watcher = self._deps.clock.now(), self._watcher
                watch = []
                for execution_id, wake_at, key in executions:
                    self._keys.hold(execution_id, key)
                    if wake_at is None or wake_at <= now:
                        self._enqueue(execution_id)
                    elif watcher is not None:  # it knows a page wait from the others
                        self._parked[execution_id] = wake_at
                        watch.append((execution_id, wake_at))
                    else:
                        self._park(execution_id, wake_at, arm=False)
                if watcher is not None and watch:
                    self._deps.activity.tell(watcher, Watch(tuple(watch)))
                self._arm_wakes()
            case WakeDue():
                self._wake_at = None
                self._wake_due()
            case Pull():
                if self._pull_at is not None and self._pull_at <= self._deps.clock.now():
                    self._pull_at = None
                self._more = True
                self._fill_slots()
            case Retry(execution_id):
                if self._retrying.pop(execution_id, None) is not None:
                    self._enqueue(execution_id)
            case Finished(execution_id, run):
                if self._release(execution_id, run):
                    self._keys.release(execution_id)
                    self._interruptions.pop(execution_id, None)
                    self._cancels.pop(execution_id, None)
            case Parked(execution_id, wake_at, run, watched):
                if self._release(execution_id, run):
                    self._interruptions.pop(execution_id, None)
                    if execution_id in self._cancels:
                        self._enqueue(execution_id)  # cancelled meanwhile: end it now
                    elif watched and self._watcher is not None:
                        self._parked[execution_id] = wake_at  # the watcher looks for it
                        self._deps.activity.tell(self._watcher,
                                                 Watch(((execution_id, wake_at),)))
                    else:
                        self._park(execution_id, wake_at)
            case WatchedWake(execution_id, adopted):
                if self._parked.pop(execution_id, None) is not None or adopted:  # not cancelled
                    self._enqueue(execution_id, wake=True)  # its actor claims it by id
            case Rescheduled(wakes, adopted):
                for execution_id, wake_at in wakes.items():
                    if wake_at is None:
                        self._parked.pop(execution_id, None)
                    elif execution_id in self._parked or execution_id in adopted:
                        self._parked[execution_id] = wake_at
            case Interrupted(execution_id, reason, run):
                running = self._current(execution_id, run)
                if running is not None and running.hold.position is not None:
                    self._interruptions.pop(execution_id, None)  # it advanced: a new series
                if self._release(execution_id, run):
                    self._requeue_after_interruption(execution_id, reason)
            case Crashed(execution_id, error, run):
                if self._release(execution_id, run):
                    self._deps.activity.tell(self._supervisor, ChildCrashed(execution_id, error))
            case Heartbeat():
                self._heartbeat()
            case CreateExecutions():
                return self._create(message)
            case CancelExecution(execution_id, reason):
                return self._cancel(execution_id, reason)
            case PoolStatus():
                return self._status()
            case ExecutionWorkers():  # for the shutdown, which stops them all under one deadline
                return [running.ref for running in self._running.values()] + self._idle
        return None  # a told message

    def _current(self, execution_id: int, run: int) -> Running | None:
        """The running entry ``run`` reports about; None for a replaced actor's report."""
        running = self._running.get(execution_id)
        return running if running is not None and running.run == run else None

    # -- queue and slots ----------------------------------------------------------------------

    def _enqueue(self, execution_id: int, *, wake: bool = False, lane: str = ORDINARY_LANE) -> None:
        if execution_id in self._queue or execution_id in self._running:
            return  # dedupe: it will run (or is running) anyway
        self._retrying.pop(execution_id, None)  # it runs now; its retry timer finds nothing
        self._queue.push(execution_id, self._deps.clock.now(), wake=wake, lane=lane)
        self._fill_slots()

    def _fill_slots(self) -> None:
        if self._deps.stopping.is_set():
            return
        while self._queue and len(self._running) < self._slots:
            self._start(self._queue.pop())
        if self._more and len(self._running) < self._slots:
            self._pull()

    # -- the store as a queue: claim what nobody holds --------------------------------------------

    def _pull(self) -> None:
        """Claim as many due executions as there are free slots, and start them (a single
        process has none to claim: actors/cluster.py). When fewer came than asked, the store
        holds no more due now: remember that, and set a timer for the soonest parked wait
        nobody holds, whichever replica parked it (``UNHELD_GRACE`` after it)."""
        deps = self._deps
        free = self._slots - len(self._running)
        now = deps.clock.now()
        try:
            claim = deps.cluster.claim_executions(
                deps.store, deps.owner, free, now=now,
                expires_at=now + deps.config.leases.duration, woken_before=now - UNHELD_GRACE)
        except StoreUnavailable:
            return  # the store's health reports the outage; the heartbeat pulls again
        self._more, soonest = claim.more, claim.next_wake
        for execution_id in claim.ids:
            self._parked.pop(execution_id, None)
            self._retrying.pop(execution_id, None)
            if execution_id not in self._running:  # else started here, its claim not yet made
                self._start(execution_id)
        if soonest is not None:
            soonest += UNHELD_GRACE
        if soonest is not None and (self._pull_at is None or soonest < self._pull_at):
            self._pull_at = soonest
            deps.tell_at(soonest, self.actor_ref, Pull(), label="wake")

    def _start(self, execution_id: int) -> None:
        # The run claims and loads its checkpoint itself and reports issue, policy and
        # position; the hold it claims with is shared, so the heartbeat can renew it.
        now, run = self._deps.clock.now(), next(self._runs)
        hold = Hold(now)
        worker = self._hand(RunExecution(execution_id, hold, run,
                                         first_read=self._first_reads.take(execution_id),
                                         cancel=self._cancels.get(execution_id)))
        self._running[execution_id] = Running(worker, since=now, hold=hold, run=run)

    def _hand(self, order: RunExecution) -> pykka.ActorRef:
        """Tell ``order`` to a free worker, or to a new one when none is (told from here, so
        the run is in flight at once); the worker."""
        while self._idle:
            worker = self._idle.pop()  # the last freed: its thread is the likeliest to be warm
            if self._deps.activity.tell(worker, order):
                return worker
        worker = ExecutionWorker.start(self._deps, self.actor_ref)
        self._deps.activity.tell(worker, order)
        return worker

    def _free_slots(self) -> int:
        return max(0, self._slots - len(self._running) - len(self._queue))

    def _release(self, execution_id: int, run: int) -> bool:
        """Free the slot of ``run``; False when that actor had already been replaced."""
        if self._current(execution_id, run) is None:
            return False
        worker = self._running.pop(execution_id).ref
        if worker.is_alive():  # not after a failure that escaped the run's guard
            self._idle.append(worker)
        self._fill_slots()
        return True

    def _requeue_after_interruption(self, execution_id: int, reason: str) -> None:
        attempt = self._interruptions.get(execution_id, 0) + 1
        self._interruptions[execution_id] = attempt
        due = self._deps.clock.now() + store_fault_backoff(attempt)
        self._retrying[execution_id] = due
        log.info("execution interrupted; retrying from its last checkpoint", extra={
            "execution_id": execution_id, "attempt": attempt, "reason": reason,
            "deadline": format_time(due)})
        self._deps.tell_at(due, self.actor_ref, Retry(execution_id), label="retry")

    # -- leases: renew what runs here, resume what nobody runs ------------------------------------

    def _heartbeat(self) -> None:
        deps = self._deps
        now, duration = deps.clock.now(), deps.config.leases.duration
        alive = {execution_id: running.hold for execution_id, running in self._running.items()
                 if running.hold.lease is not None and not running.hold.hung(now, duration)}
        try:
            held = deps.store.executions.renew(deps.owner, list(alive), now + duration)
            stale = deps.store.executions.stale(now)
            deps.store.replicas.beat(ReplicaBeat(
                owner=deps.owner, host=self._host, pid=self._pid,
                version=__version__, started_at=self._started, slots=self._slots,
                busy=len(self._running), parked=len(self._parked)), now)
        except StoreUnavailable:
            return  # the store's health reports the outage; the next beat tries again
        for execution_id in held:
            # Not renewed (ended meanwhile, or taken over): its validity simply runs out.
            alive[execution_id].valid_until = now + duration
        for execution_id in deps.cluster.resumes(stale, self._running):
            self._sweep(execution_id, now, duration)
        self._sweeps.last_at = now
        self._more = True  # what nobody holds now is claimed, by whoever has room
        self._fill_slots()

    def _sweep(self, execution_id: int, now: datetime, duration: timedelta) -> None:
        """Resume an execution the store says nobody holds, unless it is in hand here."""
        running = self._running.get(execution_id)
        if running is not None:
            if not running.hold.hung(now, duration):
                return  # just started and not yet claimed, or renewed after this read
            running.hold.lost = True  # its own writes and calls are refused from now on
            del self._running[execution_id]
            running.ref.stop(block=False)  # once its call returns; another worker takes over
            log.warning("execution actor showed no progress for a whole lease; replacing it",
                        extra={"execution_id": execution_id,
                               "issue_key": _position_of(running).issue_key})
            self._sweeps.reclaimed(execution_id, "hung actor replaced", now)
        elif (execution_id in self._queue or execution_id in self._parked
              or execution_id in self._retrying):
            return
        else:
            log.warning("resuming an execution that no actor held", extra={
                "execution_id": execution_id})
            self._sweeps.reclaimed(execution_id, "no actor held it", now)
        self._enqueue(execution_id)

    def _park(self, execution_id: int, wake_at: datetime, *, arm: bool = True) -> None:
        """Park until ``wake_at``. The pool keeps its own heap of wake times and one scheduler
        timer for the soonest: a hundred thousand parked executions after a restart are one
        timer, not a hundred thousand."""
        self._parked[execution_id] = wake_at
        heapq.heappush(self._wakes, (wake_at, execution_id))
        if arm:
            self._arm_wakes()

    def _arm_wakes(self) -> None:
        soonest = self._soonest_wake()
        if soonest is not None and (self._wake_at is None or soonest < self._wake_at):
            self._wake_at = soonest
            self._deps.tell_at(soonest, self.actor_ref, WakeDue(), label="wake")

    def _soonest_wake(self) -> datetime | None:
        while self._wakes:
            wake_at, execution_id = self._wakes[0]
            if self._parked.get(execution_id) == wake_at:
                return wake_at
            heapq.heappop(self._wakes)  # woken, cancelled or parked again meanwhile
        return None

    def _wake_due(self) -> None:
        """Queue every parked execution whose time has come (its actor claims it by id; in
        shared mode a replica that took it meanwhile holds it, and the claim finds that), then
        arm the timer for the next."""
        now = self._deps.clock.now()
        while (soonest := self._soonest_wake()) is not None and soonest <= now:
            _, execution_id = heapq.heappop(self._wakes)
            del self._parked[execution_id]
            self._enqueue(execution_id, wake=True)  # its actor claims it by id
        self._arm_wakes()

    # -- creation (the one writer) --------------------------------------------------------------

    def _create(self, request: CreateExecutions) -> CreationResult:
        """Create the trigger's executions as the admission rule decides.

        When the lock keys known here say none of the trigger's is held, the insert is the one
        round trip (a single process, the one writer of executions, hears of every end; the
        UNIQUE index of the keys backs that up: when it refuses one, the keys are read).
        Otherwise the held keys are read in the creating unit of work, which on replicas one
        at a time takes for an issue (actors/cluster.py). A key ends held only after its
        execution's end is saved, so an execution is never stamped created before the one
        whose key it took had ended."""
        store = self._deps.store
        keys = [e.live_lock_key for e in request.executions if e.live_lock_key]
        if self._keys.known_free(keys):
            try:
                with unit_of_work(store.db):
                    result, here = self._admit(request, busy=set())
            except Conflict:  # held after all: decide knowing which
                pass
            else:
                return self._start_created(request, result, here)
        with self._keys.creating(store, request.trigger.issue_key):
            busy = store.executions.busy_lock_keys(keys)
            try:
                result, here = self._admit(request, busy)
            except Conflict as exc:  # another writer won a lock key between check and insert
                store.triggers.fail(request.trigger.id, exc.message, self._deps.clock.now(),
                                    lease=request.lease)
                return CreationResult(outcome=TriggerOutcome.FAILED, reason=exc.message)
        return self._start_created(request, result, here)

    def _admit(self, request: CreateExecutions, busy: set[str],
               ) -> tuple[CreationResult, list[int]]:
        """Apply the admission rule given the ``busy`` lock keys and write its outcome: the
        result, and the IDs of the executions to start here once committed. Raises
        ``Conflict`` (nothing written) when the insert finds a key held after all."""
        store, now = self._deps.store, self._deps.clock.now()
        trigger, lease = request.trigger, request.lease
        admission = admit(request.executions, busy, explicit=request.explicit,
                          role_label=request.reserved_label, issue_labels=request.issue_labels)
        if admission.outcome is AdmissionOutcome.CONFLICT:
            store.triggers.fail(trigger.id, admission.reason, now, lease=lease)
            return CreationResult(outcome=TriggerOutcome.FAILED, reason=admission.reason), []
        if admission.outcome is AdmissionOutcome.DEFERRED:
            # duplicates coalesce, but one wake-up always stays pending
            if (waiting := store.triggers.pending_duplicate(trigger)) is not None:
                reason = f"{admission.reason}; coalesced into pending trigger {waiting}"
                store.triggers.complete(trigger.id, [], now, reason=reason, lease=lease)
                return CreationResult(outcome=TriggerOutcome.COALESCED, reason=reason), []
            until = now + self._deps.config.trigger_defer_interval
            store.triggers.defer(trigger.id, until, now, lease=lease)
            reason = f"{admission.reason}; deferred until {format_time(until)}"
            return CreationResult(outcome=TriggerOutcome.DEFERRED, reason=reason), []
        idle = [request.executions[i] for i in admission.admitted]
        _created_now(idle, now)  # read after the keys were found free
        # the missing default context is persisted for live runs only
        ids = store.executions.create(trigger.id, idle, issue_key=trigger.issue_key,
                                      ensure_context=bool(idle) and trigger.dryrun is None,
                                      now=now, reason=admission.reason, lease=lease)
        # What starts here at once; the rest is announced (at commit) to a replica with a
        # free slot.
        here = self._deps.cluster.runs_here(ids, self._free_slots())
        if len(here) < len(ids):
            notify_work(store.db)
        for execution in idle:
            self._keys.hold(execution.id, execution.live_lock_key)
        return CreationResult(execution_ids=ids, reason=admission.reason), here

    def _start_created(self, request: CreateExecutions, result: CreationResult,
                      here: list[int]) -> CreationResult:
        """After the commit: queue the executions to start here, in creation order, each
        with its trigger's read of the issue for its first run, where one is kept."""
        lane = lane_of(request.trigger.source)
        if request.read is not None:
            self._first_reads.keep(here, request.read, self._deps.clock.monotonic())
        for execution_id in here:
            self._enqueue(execution_id, lane=lane)
        return result

    # -- cancel and status ------------------------------------------------------------------------

    def _cancel(self, execution_id: int, reason: str) -> CancelOutcome:
        """An outcome, not an exception: expected answers must not read as actor failures."""
        if running := self._running.get(execution_id):
            # A flag for its next step; False when its worker has just stopped, and the stored
            # state below decides.
            if self._deps.activity.tell(running.ref, Cancel(reason, running.run)):
                self._cancels[execution_id] = reason  # and for the next run, if it parks
                return CancelOutcome.SIGNALLED
        with unit_of_work(self._deps.store.db):
            try:
                execution = self._deps.store.executions.get(execution_id)
            except NotFound:
                return CancelOutcome.MISSING
            if execution.status.terminal:
                return CancelOutcome.FINISHED
            self._deps.behavior().abort(execution, FailureCode.CANCELLED, reason)
        self._keys.release(execution_id)
        self._parked.pop(execution_id, None)  # its heap entry is dropped as stale
        self._retrying.pop(execution_id, None)
        return CancelOutcome.APPLIED

    def _status(self) -> PoolView:
        now = self._deps.clock.now()
        oldest = self._queue.oldest()
        soonest = heapq.nsmallest(PARKED_SHOWN, self._parked.items(), key=lambda item: item[1])
        next_wake = soonest[0][1] if soonest else None
        figures = {
            "slots": self._slots,
            "busy": len(self._running),
            "queue_length": len(self._queue),
            "oldest_queued_age_seconds": (now - oldest).total_seconds() if oldest else None,
            "lanes": self._queue.lanes(now),
            "parked": len(self._parked),
            "next_wake_at": format_time(next_wake),
            "retrying": len(self._retrying),
            "sweeper": {"last_at": format_time(self._sweeps.last_at),
                        "reclaimed_total": self._sweeps.reclaimed_total,
                        "recent": list(self._sweeps.recent)},
        }
        running = [
            {"execution_id": execution_id, "issue_key": p.issue_key, "policy_id": p.policy_id,
             "rule": p.rule, "action": p.action, "since": format_time(r.since),
             "lease": _lease_view(r.hold)}
            for execution_id, r in sorted(self._running.items()) for p in (_position_of(r),)]
        # the soonest first, bounded: the admin view shows what waits and until when
        parked = [{"execution_id": execution_id, "wake_at": format_time(wake_at)}
                  for execution_id, wake_at in soonest]
        return PoolView(figures, running, parked)


# A run that has not advanced a step yet: nothing known of it but its id.
_NOWHERE = Position("", None, "", "")


def _position_of(running: Running) -> Position:
    return running.hold.position or _NOWHERE


def _lease_view(hold: Hold) -> dict | None:
    """The lease a running execution works under, as this process last renewed it."""
    if hold.lease is None:
        return None
    return {"owner": hold.lease.owner, "epoch": hold.lease.epoch,
            "expires_at": format_time(hold.valid_until), "lost": hold.lost}


def _created_now(executions: list[Execution], now: datetime) -> None:
    """Stamp live executions as created now, after the check that their issue's locks are
    free: one that takes a lock then starts after the execution that held it ended (its
    ``completed_at`` was stamped before the save that freed the lock), not at the earlier
    moment its trigger built it. A dry run keeps its stamps (and its frozen business time)."""
    for execution in executions:
        if execution.mode is ExecutionMode.LIVE:
            execution.created_at = execution.updated_at = execution.business_now = now
