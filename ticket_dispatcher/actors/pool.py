"""ExecutionPool: the execution slots, the FIFO queue, and the one writer of new executions.

- At most ``execution_slots`` ExecutionActors run at once; the rest wait in FIFO order.
- An execution ID that is queued or running is never queued again (dedupe, M§11).
- Parked executions hold no slot; a scheduler timer tells ``Wake`` at their ``wake_at``.
- Creating executions is serialized here (SPEC §3): the busy check and the insert happen in this
  one thread, and the ``live_lock_key`` UNIQUE index guards against anything else. Enqueueing
  happens only after the creating transaction has committed, in creation order.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from datetime import datetime

import pykka

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
    Wake,
)
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.domain.timeutil import format_time
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.store.database import unit_of_work

log = logging.getLogger(__name__)


@dataclass
class Running:
    ref: pykka.ActorRef
    since: datetime
    issue_key: str = ""
    policy_id: int | None = None
    rule: str = ""
    action: str = ""


class ExecutionPool(pykka.ThreadingActor):
    def __init__(self, deps: RuntimeDeps, supervisor: pykka.ActorRef | None = None):
        super().__init__()
        self._deps = deps
        self._slots = deps.config.execution_slots
        self._supervisor = supervisor
        self._queue: deque[tuple[int, datetime]] = deque()
        self._queued: set[int] = set()
        self._running: dict[int, Running] = {}
        self._parked: dict[int, datetime] = {}

    def on_stop(self) -> None:
        """Shutdown is not a failure: running actions stay ``executing`` for recovery (SPEC §7)."""
        for running in self._running.values():
            try:
                running.ref.stop(block=True, timeout=30)
            except pykka.Timeout:
                log.warning("an execution actor did not stop within 30 s")

    def on_receive(self, message):
        try:
            return self._handle(message)
        except Exception:
            if isinstance(message, (CreateExecutions, CancelExecution, PoolStatus)):
                raise  # an ask: the asker gets the exception
            log.exception("execution pool failed on %s", type(message).__name__)

    def _handle(self, message):
        match message:
            case Enqueue(execution_id):
                self._enqueue(execution_id)
            case Wake(execution_id):
                self._parked.pop(execution_id, None)
                self._enqueue(execution_id)
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
                self._release(execution_id, done=False)
                if self._supervisor is not None:
                    self._supervisor.tell(ChildCrashed(execution_id, error))
                else:
                    self._deps.activity.end()
            case CreateExecutions():
                return self._create(message)
            case CancelExecution(execution_id, reason):
                return self._cancel(execution_id, reason)
            case PoolStatus():
                return self._status()

    # -- queue and slots ----------------------------------------------------------------------

    def _enqueue(self, execution_id: int) -> None:
        """Takes over one unit of ``activity`` begun by whoever told us."""
        if execution_id in self._queued or execution_id in self._running:
            self._deps.activity.end()  # dedupe: it will run (or is running) anyway
            return
        self._queue.append((execution_id, self._deps.clock.now()))
        self._queued.add(execution_id)
        self._fill_slots()

    def _fill_slots(self) -> None:
        while self._queue and len(self._running) < self._slots:
            execution_id, _ = self._queue.popleft()
            self._queued.discard(execution_id)
            self._start(execution_id)

    def _start(self, execution_id: int) -> None:
        # The actor loads its checkpoint itself and reports issue, policy and position.
        ref = ExecutionActor.start(execution_id, self._deps, self.actor_ref)
        self._running[execution_id] = Running(ref, since=self._deps.clock.now())

    def _release(self, execution_id: int, done: bool = True) -> None:
        if self._running.pop(execution_id, None) is not None and done:
            self._deps.activity.end()
        self._fill_slots()

    def _park(self, execution_id: int, wake_at: datetime) -> None:
        self._parked[execution_id] = wake_at
        activity, ref = self._deps.activity, self.actor_ref

        def wake() -> None:
            activity.begin()
            ref.tell(Wake(execution_id))

        self._deps.scheduler.call_at(wake_at, wake, label="wake")

    # -- creation (the one writer) --------------------------------------------------------------

    def _create(self, request: CreateExecutions) -> CreationResult:
        store, now = self._deps.store, self._deps.clock.now()
        trigger = request.trigger
        with unit_of_work(store.db):
            keys = [e.live_lock_key for e in request.executions if e.live_lock_key]
            busy = store.executions.busy_lock_keys(keys)
            idle = [e for e in request.executions if e.live_lock_key not in busy]
            if busy and request.explicit:
                reason = f"policy {request.executions[0].policy_id} already has a live " \
                         f"execution for {trigger.issue_key}"
                store.triggers.fail(trigger.id, reason, now)
                return CreationResult(outcome="failed", reason=reason)
            if busy and request.reserved_label and request.reserved_label in request.issue_labels:
                until = now + self._deps.config.trigger_defer_interval
                store.triggers.defer(trigger.id, until, now)
                return CreationResult(outcome="deferred",
                                      reason=f"a live notification workflow is running; "
                                             f"deferred until {format_time(until)}")
            try:
                # the missing default context is persisted for live runs only (M§4.2)
                ids = store.executions.create(trigger.id, idle, issue_key=trigger.issue_key,
                                              ensure_context=bool(idle) and trigger.dryrun is None,
                                              now=now)
            except Conflict as exc:  # another writer won a lock key between check and insert
                store.triggers.fail(trigger.id, exc.message, now)
                return CreationResult(outcome="failed", reason=exc.message)
        for execution_id in ids:  # only after commit, in creation order
            self._deps.activity.begin()
            self._enqueue(execution_id)
        return CreationResult(execution_ids=ids)

    # -- cancel and status ------------------------------------------------------------------------

    def _cancel(self, execution_id: int, reason: str) -> str:
        """An outcome, not an exception: expected answers must not read as actor failures."""
        if running := self._running.get(execution_id):
            running.ref.tell(Cancel(reason))
            return "signalled"
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
        oldest = self._queue[0][1] if self._queue else None
        next_wake = min(self._parked.values()) if self._parked else None
        return {
            "slots": self._slots,
            "busy": len(self._running),
            "queue_length": len(self._queue),
            "oldest_queued_age_seconds": (now - oldest).total_seconds() if oldest else None,
            "parked": len(self._parked),
            "next_wake_at": format_time(next_wake),
            "running": [
                {"execution_id": execution_id, "issue_key": r.issue_key,
                 "policy_id": r.policy_id, "rule": r.rule, "action": r.action,
                 "since": format_time(r.since)}
                for execution_id, r in sorted(self._running.items())
            ],
        }
