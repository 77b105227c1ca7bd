"""Supervisor: ordered start-up, boot recovery, the trigger poll, restarts, ordered shutdown.

Start-up order (SPEC §3, M§11): scheduler → execution pool → trigger actors → boot recovery of
executions (creation order; parked ones at their ``wake_at``) and of pending/processing
triggers → the periodic trigger poll. ``Runtime.stop`` stops the same children in reverse,
under one deadline. A crashed execution is re-enqueued from its checkpoint at most
``actor_restarts`` times, then failed with ``internal_error``.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.messages import (
    Boot,
    ChildCrashed,
    Enqueue,
    ObserveBacklog,
    Parked,
    PollTriggers,
)
from ticket_dispatcher.actors.pool import ExecutionPool
from ticket_dispatcher.actors.trigger import TriggerRouter
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.metrics import Backlog
from ticket_dispatcher.store.database import unit_of_work

log = logging.getLogger(__name__)

# N§12: the backlog gauges are sampled every minute, the first time one second after the start.
BACKLOG_FIRST = timedelta(seconds=1)
BACKLOG_EVERY = timedelta(seconds=60)


class Supervisor(TrackedActor):
    def __init__(self, deps: RuntimeDeps):
        super().__init__()
        self._deps = deps
        self.pool: pykka.ActorRef | None = None
        self.triggers: TriggerRouter | None = None

    def handle(self, message):
        if isinstance(message, Boot):
            return self._boot()  # an ask: a failure propagates to the caller
        if self._deps.stopping.is_set():
            return  # boot recovery at the next start covers what this would have done
        if isinstance(message, ObserveBacklog):
            return self._observe_backlog()  # its own units of work: a failure is counted
        try:
            with unit_of_work(self._deps.store.db):
                if isinstance(message, ChildCrashed):
                    self._restart(message)
                elif isinstance(message, PollTriggers):
                    self._poll()
        except Exception:
            log.exception("supervisor failed on %s", type(message).__name__)

    def _boot(self) -> tuple[pykka.ActorRef, TriggerRouter]:
        deps = self._deps
        deps.scheduler.start()
        self.pool = ExecutionPool.start(deps, self.actor_ref)
        self.triggers = TriggerRouter(deps, self.pool, deps.config.trigger_actors)
        with unit_of_work(deps.store.db):
            executions = deps.store.executions.recoverable()  # raises: the start fails
            triggers = deps.store.triggers.recoverable()
        now = deps.clock.now()
        for execution_id, wake_at in executions:
            if wake_at is not None and wake_at > now:
                deps.activity.tell(self.pool, Parked(execution_id, wake_at))
            else:
                deps.activity.tell(self.pool, Enqueue(execution_id))
        for trigger_id in triggers:
            self.triggers.submit(trigger_id, recovering=True)
        log.info("boot recovery done", extra={
            "reason": f"{len(executions)} executions, {len(triggers)} triggers"})
        self._schedule_poll()
        self._schedule_backlog(BACKLOG_FIRST)
        return self.pool, self.triggers

    def _schedule_poll(self) -> None:
        deps, ref = self._deps, self.actor_ref

        def poll() -> None:
            deps.activity.tell(ref, PollTriggers())

        deps.scheduler.call_at(deps.clock.now() + deps.config.trigger_poll_interval, poll,
                               label="trigger-poll")

    def _schedule_backlog(self, after: timedelta) -> None:
        deps, ref = self._deps, self.actor_ref

        def observe() -> None:
            deps.activity.tell(ref, ObserveBacklog())

        deps.scheduler.call_at(deps.clock.now() + after, observe, label="backlog-metrics")

    def _observe_backlog(self) -> None:
        """One whole sample, or none: a failed read keeps the previous sample (N§12)."""
        deps = self._deps
        try:
            now = deps.clock.now()
            created, executing = deps.store.executions.backlog(now)
            sample = Backlog(created=created, executing=executing,
                             triggers=deps.store.triggers.backlog(now))
        except Exception as exc:
            deps.metrics.backlog_failed()
            log.warning("backlog metrics not refreshed; keeping the previous sample",
                        extra={"reason": f"{type(exc).__name__}: {exc}"})
        else:
            deps.metrics.backlog(sample)
        finally:
            self._schedule_backlog(BACKLOG_EVERY)

    def _poll(self) -> None:
        """Pick up pending triggers whose ``available_at`` has come (deferred ones included)."""
        try:
            for trigger_id in self._deps.store.triggers.due(self._deps.clock.now()):
                self.triggers.submit(trigger_id)
        finally:
            self._schedule_poll()

    def _restart(self, crash: ChildCrashed) -> None:
        deps = self._deps
        try:
            restarts = deps.store.executions.record_restart(crash.execution_id)
        except Exception:  # the database is down too: boot recovery will pick it up
            log.exception("cannot record a crash; the execution waits for the next start",
                          extra={"execution_id": crash.execution_id})
            return
        if restarts <= deps.config.actor_restarts:
            log.warning("restarting crashed execution from its checkpoint", extra={
                "execution_id": crash.execution_id, "attempt": restarts, "reason": crash.error})
            deps.activity.tell(self.pool, Enqueue(crash.execution_id))
            return
        execution = deps.store.executions.get(crash.execution_id)
        if not execution.status.terminal:
            deps.behavior().abort(execution, FailureCode.INTERNAL_ERROR,
                                  f"crashed {restarts} times; last error: {crash.error}")
