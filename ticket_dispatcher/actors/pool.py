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

import logging
import os
import socket
from datetime import datetime, timedelta

import pykka

from ticket_dispatcher import __version__
from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.execution import ExecutionWorker, abort_cancelled
from ticket_dispatcher.actors.messages import (
    Cancel,
    CancelExecution,
    Cancellation,
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
from ticket_dispatcher.actors.slots import AfterPark, ExecutionSlots
from ticket_dispatcher.actors.watcher import AckWatcher, WatchFigures
from ticket_dispatcher.domain.admission import AdmissionOutcome, admit
from ticket_dispatcher.domain.execution import Execution, ExecutionMode
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
class SlotsFree:
    """Execution slots free with nothing queued, as the pool last counted them: the pool
    writes it after every message, the shadow lane reads it (a shadow runs only then)."""

    def __init__(self) -> None:
        self.count = 0


# What the pool answers an ask (CreateExecutions, CancelExecution, PoolStatus,
# ExecutionWorkers); None to a told message.
PoolAnswer = CreationResult | CancelOutcome | PoolView | list[pykka.ActorRef] | None


class ExecutionPool(TrackedActor):
    """The actor around ``ExecutionSlots`` (actors/slots.py), which decides what runs, what
    waits and what is parked: this shell receives the messages, hands runs to the workers,
    arms the timers, and talks to the store (the claims, the heartbeat, the one writer)."""

    def __init__(self, deps: RuntimeDeps, supervisor: pykka.ActorRef, free: SlotsFree,
                 ack_watch: WatchFigures):
        """``free``: where the pool says how many slots are free; ``ack_watch``: where its
        ACK watcher says what it watches."""
        super().__init__(deps.activity)
        self._deps = deps
        self._slots: ExecutionSlots[pykka.ActorRef] = ExecutionSlots(
            deps.config.execution_slots, deps.config.lanes.notification_share)
        self._started = deps.clock.now()  # this replica's start, as the admin view shows it
        # The lock keys of the live executions, as far as they are known here (``_create``).
        self._keys = deps.cluster.lock_keys()
        self._host, self._pid = socket.gethostname(), os.getpid()
        self._supervisor = supervisor
        # The trigger's read of the issue beside each execution created here and not yet
        # started, for its first run, when one is kept (actors/first_read.py).
        self._first_reads = deps.cluster.first_reads()
        self._free = free
        self._free.count = self._slots.slots
        self._ack_watch = ack_watch
        self._watcher: pykka.ActorRef | None = None  # started with the pool

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
            slots = self._slots
            self._deps.metrics.pool(slots=slots.slots, busy=len(slots.running),
                                    queued=len(slots.queue), parked=len(slots.parked))
            self._deps.metrics.lanes("executions", slots.queue.lengths())
            self._free.count = slots.free_now()

    def _handle(self, message: object) -> PoolAnswer:
        now = self._deps.clock.now()
        match message:
            case Enqueue(execution_id):
                self._enqueue(execution_id)
            case Recover(executions):
                self._recover(executions)
            case WakeDue():
                self._wake_due()
            case Pull():
                self._slots.pulled(now)
                self._fill_slots()
            case Retry(execution_id):
                if self._slots.retry_due(execution_id, now):
                    self._fill_slots()
            case Finished(execution_id, run):
                self._finished(execution_id, run)
            case Parked():
                self._parked_run(message)
            case WatchedWake(execution_id, adopted):
                if self._slots.watched_wake(execution_id, now, adopted=adopted):
                    self._fill_slots()
            case Rescheduled(wakes, adopted):
                self._slots.rescheduled(wakes, adopted)
            case Interrupted():
                self._interrupted(message)
            case Crashed():
                self._crashed(message)
            case Heartbeat():
                self._heartbeat()
            case CreateExecutions():
                return self._create(message)
            case CancelExecution(execution_id, cancellation):
                return self._cancel(execution_id, cancellation)
            case PoolStatus():
                return self._slots.view(now)
            case ExecutionWorkers():  # for the shutdown, which stops them all under one deadline
                return self._slots.workers()
        return None  # a told message

    def _recover(self, executions: tuple[tuple[int, datetime | None, str | None], ...]) -> None:
        for execution_id, _, key in executions:
            self._keys.hold(execution_id, key)
        watch = self._slots.recover(((execution_id, wake_at)
                                     for execution_id, wake_at, _ in executions),
                                    self._deps.clock.now(), watching=self._watcher is not None)
        self._fill_slots()
        if self._watcher is not None and watch:
            self._deps.activity.tell(self._watcher, Watch(tuple(watch)))
        self._arm_wakes()

    def _finished(self, execution_id: int, run: int) -> None:
        if self._release(execution_id, run):
            self._keys.release(execution_id)
            self._slots.ended(execution_id)

    def _crashed(self, message: Crashed) -> None:
        if self._release(message.execution_id, message.run):
            self._deps.activity.tell(self._supervisor,
                                     ChildCrashed(message.execution_id, message.error))

    def _parked_run(self, message: Parked) -> None:
        execution_id, wake_at = message.execution_id, message.wake_at
        if not self._release(execution_id, message.run):
            return
        watcher = self._watcher if message.watched else None
        match self._slots.parked_run(execution_id, wake_at, self._deps.clock.now(),
                                     watched=watcher is not None):
            case AfterPark.QUEUED:
                self._fill_slots()
            case AfterPark.WATCHED if watcher is not None:
                self._deps.activity.tell(watcher, Watch(((execution_id, wake_at),)))
            case AfterPark.PARKED:
                self._arm_wakes()

    def _interrupted(self, message: Interrupted) -> None:
        execution_id = message.execution_id
        self._slots.interrupted(execution_id, message.run)
        if not self._release(execution_id, message.run):
            return
        due, attempt = self._slots.retry_at(execution_id, self._deps.clock.now())
        log.info("execution interrupted; retrying from its last checkpoint", extra={
            "execution_id": execution_id, "attempt": attempt, "reason": message.reason,
            "next_try": format_time(due)})
        self._deps.tell_at(due, self.actor_ref, Retry(execution_id), label="retry")

    # -- queue and slots ----------------------------------------------------------------------

    def _enqueue(self, execution_id: int, *, lane: str = ORDINARY_LANE) -> None:
        if self._slots.enqueue(execution_id, self._deps.clock.now(), lane=lane):
            self._fill_slots()

    def _fill_slots(self) -> None:
        if self._deps.stopping.is_set():
            return
        while (execution_id := self._slots.next_start()) is not None:
            self._start(execution_id)
        if self._slots.more and self._slots.room() > 0:
            self._pull()

    def _release(self, execution_id: int, run: int) -> bool:
        """Free the slot of ``run`` and fill it; False when that actor had already been
        replaced."""
        if not self._slots.release(execution_id, run):
            return False
        self._fill_slots()
        return True

    def _wake_due(self) -> None:
        """Queue every parked execution whose time has come (in shared mode a replica that
        took it meanwhile holds it, and its run's claim finds that), then arm the timer for
        the next."""
        self._slots.wake_due(self._deps.clock.now())
        self._fill_slots()
        self._arm_wakes()

    def _arm_wakes(self) -> None:
        if (at := self._slots.wake_timer()) is not None:
            self._deps.tell_at(at, self.actor_ref, WakeDue(), label="wake")

    # -- the store as a queue: claim what nobody holds --------------------------------------------

    def _pull(self) -> None:
        """Claim as many due executions as there are free slots, and start them (a single
        process has none to claim: actors/cluster.py). When fewer came than asked, the store
        holds no more due now: remember that, and set a timer for the soonest parked wait
        nobody holds, whichever replica parked it (``UNHELD_GRACE`` after it)."""
        deps = self._deps
        now = deps.clock.now()
        try:
            claim = deps.cluster.claim_executions(
                deps.store, deps.owner, self._slots.room(), now=now,
                expires_at=now + deps.config.leases.duration, woken_before=now - UNHELD_GRACE)
        except StoreUnavailable:
            return  # the store's health reports the outage; the heartbeat pulls again
        for execution_id in self._slots.claimed(claim.ids, claim.more):
            self._start(execution_id)
        soonest = None if claim.next_wake is None else claim.next_wake + UNHELD_GRACE
        if (at := self._slots.pull_timer(soonest)) is not None:
            deps.tell_at(at, self.actor_ref, Pull(), label="wake")

    def _start(self, execution_id: int) -> None:
        # The run claims and loads its checkpoint itself and reports issue, policy and
        # position; the hold it claims with is shared, so the heartbeat can renew it.
        self._slots.start(execution_id, self._deps.clock.now(), lambda run, hold: self._hand(
            RunExecution(execution_id, hold, run,
                         first_read=self._first_reads.take(execution_id),
                         cancel=self._slots.cancels.get(execution_id))))

    def _hand(self, order: RunExecution) -> pykka.ActorRef:
        """Tell ``order`` to a free worker, or to a new one when none is (told from here, so
        the run is in flight at once); the worker."""
        idle = self._slots.idle
        while idle:
            worker = idle.pop()  # the last freed: its thread is the likeliest to be warm
            if self._deps.activity.tell(worker, order):
                return worker
        worker = ExecutionWorker.start(self._deps, self.actor_ref)
        self._deps.activity.tell(worker, order)
        return worker

    # -- leases: renew what runs here, resume what nobody runs ------------------------------------

    def _heartbeat(self) -> None:
        deps, slots = self._deps, self._slots
        now, duration = deps.clock.now(), deps.config.leases.duration
        alive = slots.renewable(now, duration)
        try:
            held = deps.store.executions.renew(deps.owner, list(alive), now + duration)
            stale = deps.store.executions.stale(now)
            deps.store.replicas.beat(ReplicaBeat(
                owner=deps.owner, host=self._host, pid=self._pid,
                version=__version__, started_at=self._started, slots=slots.slots,
                busy=len(slots.running), parked=len(slots.parked)), now)
        except StoreUnavailable:
            return  # the store's health reports the outage; the next beat tries again
        for execution_id in held:
            # Not renewed (ended meanwhile, or taken over): its validity simply runs out.
            alive[execution_id].valid_until = now + duration
        for execution_id in deps.cluster.resumes(stale, slots.running):
            hung = slots.sweep(execution_id, now, duration)
            if hung is not None:
                hung.stop(block=False)  # once its call returns; another worker takes over
            self._fill_slots()
        slots.sweeps.last_at = now
        slots.more = True  # what nobody holds now is claimed, by whoever has room
        self._fill_slots()

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
        here = self._deps.cluster.runs_here(ids, self._slots.free())
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

    def _cancel(self, execution_id: int, cancellation: Cancellation) -> CancelOutcome:
        """An outcome, not an exception: expected answers must not read as actor failures."""
        if running := self._slots.running.get(execution_id):
            # A flag for its next step; False when its worker has just stopped, and the stored
            # state below decides.
            if self._deps.activity.tell(running.worker, Cancel(cancellation, running.run)):
                # and for the next run, if it parks
                self._slots.cancels[execution_id] = cancellation
                return CancelOutcome.SIGNALLED
        with unit_of_work(self._deps.store.db):
            try:
                execution = self._deps.store.executions.get(execution_id)
            except NotFound:
                return CancelOutcome.MISSING
            if execution.status.terminal:
                return CancelOutcome.FINISHED
            abort_cancelled(self._deps, self._deps.behavior(), execution, cancellation,
                            CancelOutcome.APPLIED)
        self._keys.release(execution_id)
        self._slots.cancelled(execution_id)
        return CancelOutcome.APPLIED


def _created_now(executions: list[Execution], now: datetime) -> None:
    """Stamp live executions as created now, after the check that their issue's locks are
    free: one that takes a lock then starts after the execution that held it ended (its
    ``completed_at`` was stamped before the save that freed the lock), not at the earlier
    moment its trigger built it. A dry run keeps its stamps (and its frozen business time)."""
    for execution in executions:
        if execution.mode is ExecutionMode.LIVE:
            execution.created_at = execution.updated_at = execution.business_now = now
