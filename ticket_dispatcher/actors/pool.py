"""ExecutionPool: the execution slots, the FIFO queue, and the one writer of new executions.

- At most ``execution_slots`` ExecutionActors run at once; the rest wait in FIFO order.
- An execution ID that is queued or running is never queued again (dedupe, M§11).
- Parked executions hold no slot; a scheduler timer tells ``Wake`` at their ``wake_at``.
- Creating executions is serialized here (SPEC §3): the busy check (``domain.admission``) and
  the insert happen in this one thread, and the ``live_lock_key`` UNIQUE index guards against
  anything else. Enqueueing happens only after the creating transaction has committed, in
  creation order.
- While the runtime stops, no new execution actor starts: what is queued stays ``created`` or
  ``executing`` in the store and boot recovery picks it up.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from datetime import datetime

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.execution import ExecutionActor
from ticket_dispatcher.actors.messages import (
    Cancel,
    CancelExecution,
    ChildCrashed,
    Crashed,
    CreateExecutions,
    CreationResult,
    Enqueue,
    Finished,
    Parked,
    PoolStatus,
    Progress,
    RunningActors,
    Step,
    Wake,
)
from ticket_dispatcher.domain.admission import Outcome, admit
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.store.database import unit_of_work
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)

PARKED_SHOWN = 50  # parked executions listed in GET /admin/actors (all are counted)


@dataclass
class Running:
    ref: pykka.ActorRef
    since: datetime
    issue_key: str = ""
    policy_id: int | None = None
    rule: str = ""
    action: str = ""


class SlotQueue:
    """Executions waiting for a slot, in two first-in-first-out lanes: ``new`` work (created,
    recovered, restarted) and ``wake``s of parked waits. When both wait they take turns, so a
    thousand polling ACK waits cannot hold an ordinary dispatch behind all of them, and a
    stream of new work cannot starve a wait past its poll (measured: bench/parked_waits.py)."""

    def __init__(self) -> None:
        self._lanes: dict[str, deque[tuple[int, datetime]]] = {"new": deque(), "wake": deque()}
        self._members: set[int] = set()
        self._wake_next = False

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, execution_id: int) -> bool:
        return execution_id in self._members

    def push(self, execution_id: int, at: datetime, *, wake: bool = False) -> None:
        self._lanes["wake" if wake else "new"].append((execution_id, at))
        self._members.add(execution_id)

    def pop(self) -> int:
        new, wake = self._lanes["new"], self._lanes["wake"]
        lane = wake if (self._wake_next and wake) or not new else new
        self._wake_next = lane is new
        execution_id, _ = lane.popleft()
        self._members.discard(execution_id)
        return execution_id

    def oldest(self) -> datetime | None:
        heads = [lane[0][1] for lane in self._lanes.values() if lane]
        return min(heads) if heads else None


class ExecutionPool(TrackedActor):
    def __init__(self, deps: RuntimeDeps, supervisor: pykka.ActorRef | None = None):
        super().__init__()
        self._deps = deps
        self._slots = deps.config.execution_slots
        self._supervisor = supervisor
        self._queue = SlotQueue()
        self._running: dict[int, Running] = {}
        self._parked: dict[int, datetime] = {}

    def handle(self, message):
        try:
            return self._handle(message)
        except Exception:
            if isinstance(message, (CreateExecutions, CancelExecution, PoolStatus)):
                raise  # an ask: the asker gets the exception
            log.exception("execution pool failed on %s", type(message).__name__)
        finally:  # four gauge sets: cheaper than asking the pool at every scrape
            self._deps.metrics.pool(slots=self._slots, busy=len(self._running),
                                    queued=len(self._queue), parked=len(self._parked))

    def _handle(self, message):
        match message:
            case Enqueue(execution_id):
                self._enqueue(execution_id)
            case Wake(execution_id):
                self._parked.pop(execution_id, None)
                self._enqueue(execution_id, wake=True)
            case Progress(execution_id, issue_key, policy_id, rule, action):
                if running := self._running.get(execution_id):
                    running.issue_key, running.policy_id = issue_key, policy_id
                    running.rule, running.action = rule, action
            case Finished(execution_id):
                self._release(execution_id)
            case Parked(execution_id, wake_at):
                self._release(execution_id)
                self._park(execution_id, wake_at)
            case Crashed(execution_id, error):
                self._release(execution_id)
                if self._supervisor is not None:
                    self._deps.activity.tell(self._supervisor, ChildCrashed(execution_id, error))
            case CreateExecutions():
                return self._create(message)
            case CancelExecution(execution_id, reason):
                return self._cancel(execution_id, reason)
            case PoolStatus():
                return self._status()
            case RunningActors():  # for the shutdown, which stops them all under one deadline
                return [running.ref for running in self._running.values()]

    # -- queue and slots ----------------------------------------------------------------------

    def _enqueue(self, execution_id: int, *, wake: bool = False) -> None:
        if execution_id in self._queue or execution_id in self._running:
            return  # dedupe: it will run (or is running) anyway
        self._queue.push(execution_id, self._deps.clock.now(), wake=wake)
        self._fill_slots()

    def _fill_slots(self) -> None:
        if self._deps.stopping.is_set():
            return
        while self._queue and len(self._running) < self._slots:
            self._start(self._queue.pop())

    def _start(self, execution_id: int) -> None:
        # The actor loads its checkpoint itself and reports issue, policy and position.
        ref = ExecutionActor.start(execution_id, self._deps, self.actor_ref)
        self._running[execution_id] = Running(ref, since=self._deps.clock.now())
        self._deps.activity.tell(ref, Step())  # told from here, so the run is in flight at once

    def _release(self, execution_id: int) -> None:
        self._running.pop(execution_id, None)
        self._fill_slots()

    def _park(self, execution_id: int, wake_at: datetime) -> None:
        self._parked[execution_id] = wake_at
        activity, ref = self._deps.activity, self.actor_ref

        def wake() -> None:
            activity.tell(ref, Wake(execution_id))

        self._deps.scheduler.call_at(wake_at, wake, label="wake")

    # -- creation (the one writer) --------------------------------------------------------------

    def _create(self, request: CreateExecutions) -> CreationResult:
        store, now = self._deps.store, self._deps.clock.now()
        trigger = request.trigger
        with unit_of_work(store.db):
            keys = [e.live_lock_key for e in request.executions if e.live_lock_key]
            admission = admit(request.executions, store.executions.busy_lock_keys(keys),
                              explicit=request.explicit, role_label=request.reserved_label,
                              issue_labels=request.issue_labels)
            if admission.outcome is Outcome.CONFLICT:
                store.triggers.fail(trigger.id, admission.reason, now)
                return CreationResult(outcome="failed", reason=admission.reason)
            if admission.outcome is Outcome.DEFERRED:
                # N§3.4: duplicates coalesce, but one wake-up always stays pending
                if (twin := store.triggers.pending_twin(trigger)) is not None:
                    reason = f"{admission.reason}; coalesced into pending trigger {twin}"
                    store.triggers.complete(trigger.id, [], now, reason=reason)
                    return CreationResult(outcome="coalesced", reason=reason)
                until = now + self._deps.config.trigger_defer_interval
                store.triggers.defer(trigger.id, until, now)
                return CreationResult(outcome="deferred", reason=f"{admission.reason}; deferred "
                                                                 f"until {format_time(until)}")
            idle = [request.executions[i] for i in admission.admitted]
            try:
                # the missing default context is persisted for live runs only (M§4.2)
                ids = store.executions.create(trigger.id, idle, issue_key=trigger.issue_key,
                                              ensure_context=bool(idle) and trigger.dryrun is None,
                                              now=now, reason=admission.reason)
            except Conflict as exc:  # another writer won a lock key between check and insert
                store.triggers.fail(trigger.id, exc.message, now)
                return CreationResult(outcome="failed", reason=exc.message)
        for execution_id in ids:  # only after commit, in creation order
            self._enqueue(execution_id)
        return CreationResult(execution_ids=ids, reason=admission.reason)

    # -- cancel and status ------------------------------------------------------------------------

    def _cancel(self, execution_id: int, reason: str) -> str:
        """An outcome, not an exception: expected answers must not read as actor failures."""
        if running := self._running.get(execution_id):
            try:  # a flag for its next step; the step chain itself is what is in flight
                running.ref.tell(Cancel(reason))
                return "signalled"
            except pykka.ActorDeadError:
                pass  # it has just finished: decide on the stored state below
        with unit_of_work(self._deps.store.db):
            try:
                execution = self._deps.store.executions.get(execution_id)
            except NotFound:
                return "missing"
            if execution.status.terminal:
                return "finished"
            self._deps.behavior().abort(execution, FailureCode.CANCELLED, reason)
        self._parked.pop(execution_id, None)  # its timer will find it terminal and do nothing
        return "applied"

    def _status(self) -> dict:
        now = self._deps.clock.now()
        oldest = self._queue.oldest()
        next_wake = min(self._parked.values()) if self._parked else None
        return {
            "slots": self._slots,
            "busy": len(self._running),
            "queue_length": len(self._queue),
            "oldest_queued_age_seconds": (now - oldest).total_seconds() if oldest else None,
            "parked": len(self._parked),
            # the soonest first, bounded: the admin view shows what waits and until when
            "parked_executions": [
                {"execution_id": execution_id, "wake_at": format_time(wake_at)}
                for execution_id, wake_at in sorted(self._parked.items(),
                                                    key=lambda item: item[1])[:PARKED_SHOWN]],
            "next_wake_at": format_time(next_wake),
            "running": [
                {"execution_id": execution_id, "issue_key": r.issue_key,
                 "policy_id": r.policy_id, "rule": r.rule, "action": r.action,
                 "since": format_time(r.since)}
                for execution_id, r in sorted(self._running.items())
            ],
        }
