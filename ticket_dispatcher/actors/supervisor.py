"""Supervisor: ordered start-up, boot recovery, the trigger poll, restarts, ordered shutdown.

Start-up order: scheduler → execution pool → trigger actors → boot recovery of
executions (creation order; parked ones at their ``wake_at``) and of pending/processing
triggers → the periodic trigger poll and the lease heartbeat. ``Runtime.stop`` stops the same
children in reverse, under one deadline. A crashed execution is re-enqueued from its
checkpoint at most ``actor_restarts`` times, then failed with ``internal_error``; when the
database cannot record the crash, the restart is tried again after a backoff, never dropped.

What boot takes back is the cluster strategy's (actors/cluster.py). A single process is the
only one serving its database, so boot recovery gives back every lease the previous process
held: its work resumes at once instead of after its leases expire. In shared mode other
replicas may hold leases this very moment: a replica recovers nothing by itself, it claims
from the store what is due and unheld, like any pull (docs/operations.md, "High
availability").
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.leases import store_fault_backoff
from ticket_dispatcher.actors.messages import (
    Boot,
    ChildCrashed,
    Enqueue,
    Heartbeat,
    ObserveBacklog,
    PollTriggers,
    Pull,
    Recover,
)
from ticket_dispatcher.actors.pool import ExecutionPool, SlotsFree
from ticket_dispatcher.actors.shadow import ShadowLane
from ticket_dispatcher.actors.trigger import TriggerRouter
from ticket_dispatcher.actors.watcher import WatchFigures
from ticket_dispatcher.domain.execution import FailureCode
from ticket_dispatcher.errors import StoreUnavailable
from ticket_dispatcher.metrics import Backlog
from ticket_dispatcher.store.database import unit_of_work

log = logging.getLogger(__name__)

# The backlog gauges are sampled every minute, the first time one second after the start.
RECOVER_BATCH = 1000  # executions per message to the pool at boot recovery
BACKLOG_FIRST = timedelta(seconds=1)
BACKLOG_EVERY = timedelta(seconds=60)


class Supervisor(TrackedActor):
    def __init__(self, deps: RuntimeDeps, shadows: ShadowLane, free: SlotsFree,
                 ack_watch: WatchFigures):
        """``shadows``: the shadow lane the trigger actors offer evaluations to; ``free`` and
        ``ack_watch``: where the pool and its ACK watcher leave their figures."""
        super().__init__(deps.activity)
        self._deps = deps
        self._shadows = shadows
        self._free = free
        self._ack_watch = ack_watch
        self.pool: pykka.ActorRef | None = None
        self.triggers: TriggerRouter | None = None

    def handle(self, message: object) -> tuple[pykka.ActorRef, TriggerRouter] | None:
        if isinstance(message, Boot):
            return self._boot()  # an ask: a failure propagates to the caller
        self._handle_told(message)
        return None

    def _handle_told(self, message: object) -> None:
        if self._deps.stopping.is_set():
            return  # boot recovery at the next start covers what this would have done
        if isinstance(message, ObserveBacklog):
            return self._observe_backlog()  # its own units of work: a failure is counted
        if isinstance(message, Heartbeat):
            return self._heartbeat()
        try:
            with unit_of_work(self._deps.store.db):
                if isinstance(message, ChildCrashed):
                    self._restart(message)
                elif isinstance(message, PollTriggers):
                    self._poll()
        except StoreUnavailable:
            # The store's health logs the outage; a crash is retried, a poll comes again.
            if isinstance(message, ChildCrashed):
                self._restart_later(message)
        except Exception:
            log.exception("supervisor failed on %s", type(message).__name__)

    def _booted(self) -> tuple[pykka.ActorRef, TriggerRouter]:
        """The pool and the trigger router: only ``Boot`` comes before them (every other
        message is scheduled by the boot, by a message after it, or sent by the pool)."""
        assert self.pool is not None and self.triggers is not None, "booted first"
        return self.pool, self.triggers

    def _boot(self) -> tuple[pykka.ActorRef, TriggerRouter]:
        deps = self._deps
        deps.scheduler.start()
        self.pool = ExecutionPool.start(deps, self.actor_ref, self._free, self._ack_watch)
        self.triggers = TriggerRouter(deps, self.pool, deps.config.trigger_actors,
                                      self._shadows)
        recovery = deps.cluster.take_back(deps.store)  # raises: the start fails
        executions = recovery.executions
        for start in range(0, len(executions), RECOVER_BATCH):
            deps.activity.tell(self.pool, Recover(tuple(executions[start:start + RECOVER_BATCH])))
        for trigger_id, source in recovery.triggers:
            self.triggers.submit(trigger_id, recovering=True, source=source)
        # Then claim what is due and nobody holds (nothing, for a single process).
        deps.activity.tell(self.pool, Pull())
        self.triggers.pull()
        self._schedule_poll()
        self._schedule_heartbeat()
        self._schedule_backlog(BACKLOG_FIRST)
        return self.pool, self.triggers

    def _schedule_poll(self) -> None:
        deps = self._deps
        deps.tell_at(deps.clock.now() + deps.config.trigger_poll_interval, self.actor_ref,
                     PollTriggers(), label="trigger-poll")

    def _schedule_heartbeat(self) -> None:
        deps = self._deps
        deps.tell_at(deps.clock.now() + deps.config.leases.heartbeat, self.actor_ref,
                     Heartbeat(), label="lease-heartbeat")

    def _heartbeat(self) -> None:
        """Renew and sweep the triggers here, then the executions (the pool's own beat)."""
        pool, triggers = self._booted()
        try:
            triggers.heartbeat()
        except StoreUnavailable:
            pass  # the store's health reports the outage; the next beat tries again
        except Exception:
            log.exception("trigger lease heartbeat failed")
        finally:
            self._deps.activity.tell(pool, Heartbeat())
            self._schedule_heartbeat()

    def _schedule_backlog(self, after: timedelta) -> None:
        deps = self._deps
        deps.tell_at(deps.clock.now() + after, self.actor_ref, ObserveBacklog(),
                     label="backlog-metrics")

    def _observe_backlog(self) -> None:
        """One whole sample, or none: a failed read keeps the previous sample."""
        deps = self._deps
        try:
            now = deps.clock.now()
            created, executing = deps.store.executions.backlog(now)
            sample = Backlog(created=created, executing=executing,
                             triggers=deps.store.triggers.backlog(now),
                             maintenance=deps.store.maintenance.counts(
                                 now, deps.config.maintenance.max_duration))
        except Exception as exc:
            deps.metrics.backlog_failed()
            log.warning("backlog metrics not refreshed; keeping the previous sample",
                        extra={"reason": f"{type(exc).__name__}: {exc}"})
        else:
            deps.metrics.backlog(sample)
        finally:
            self._schedule_backlog(BACKLOG_EVERY)

    def _poll(self) -> None:
        """Pick up pending triggers whose ``available_at`` has come (deferred ones included):
        the ones the cluster strategy hands this process, then a claim of as many as actors
        are idle (actors/cluster.py)."""
        try:
            _, triggers = self._booted()
            deps = self._deps
            for trigger_id, source in deps.cluster.due_triggers(deps.store, deps.clock.now()):
                triggers.submit(trigger_id, source=source)
            triggers.work_arrived()
        finally:
            self._schedule_poll()

    def _restart_later(self, crash: ChildCrashed) -> None:
        """The crash could not be handled for a database failure: try again after a backoff,
        so the execution is never left without an actor."""
        deps = self._deps
        retried = ChildCrashed(crash.execution_id, crash.error, crash.attempt + 1)
        deps.tell_at(deps.clock.now() + store_fault_backoff(retried.attempt), self.actor_ref,
                     retried, label="restart")

    def _restart(self, crash: ChildCrashed) -> None:
        deps = self._deps
        restarts = deps.store.executions.record_restart(crash.execution_id)
        if restarts <= deps.config.actor_restarts:
            log.warning("restarting crashed execution from its checkpoint", extra={
                "execution_id": crash.execution_id, "attempt": restarts, "reason": crash.error})
            pool, _ = self._booted()
            deps.activity.tell(pool, Enqueue(crash.execution_id))
            return
        execution = deps.store.executions.get(crash.execution_id)
        if not execution.status.terminal:
            deps.behavior().abort(execution, FailureCode.INTERNAL_ERROR,
                                  f"crashed {restarts} times; last error: {crash.error}")
