"""TriggerActors: claim a pending trigger, load the issue, match, hand executions to the pool.

``TriggerProcessor`` holds the logic (SPEC §5, M§4); ``TriggerActor`` is the thin actor around
it, and ``TriggerRouter`` hands each trigger to an idle actor or queues it, first in first out,
for the first actor that frees, so a trigger never waits behind a slow issue load of another.

No database connection is held across the issue load or the creation ask: every store call is
its own short unit of work (SPEC §7, M§10). A trigger whose processing the shutdown interrupts
stays ``processing`` (or ``pending``) and boot recovery takes it over.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.messages import CreateExecutions, ProcessTrigger
from ticket_dispatcher.domain.execution import Trigger
from ticket_dispatcher.domain.fanout import new_execution, reserved_role
from ticket_dispatcher.domain.matching import is_notification_policy, match_policies
from ticket_dispatcher.errors import CallAbandoned, DispatcherError, NotFound

log = logging.getLogger(__name__)

NOTIFICATIONS_DISABLED = "assignment notification disabled"


class TriggerProcessor:
    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef):
        self._deps = deps
        self._pool = pool

    def process(self, trigger_id: int, recovering: bool = False) -> None:
        if self._deps.stopping.is_set():
            return  # still pending: the poll or boot recovery picks it up
        store, now = self._deps.store, self._deps.clock.now()
        trigger = store.triggers.claim(trigger_id, now, recovering=recovering)
        if trigger is None:
            return  # another actor has it, it is not due yet, or it is already done
        try:
            outcome = self._process(trigger)
        except (CallAbandoned, pykka.ActorDeadError):  # shutdown: boot recovery takes it over
            log.info("trigger left processing for shutdown", extra={"trigger_id": trigger.id})
            return
        except Exception:
            log.exception("trigger processing failed", extra={"trigger_id": trigger.id})
            store.triggers.fail(trigger.id, "internal error while processing the trigger",
                                self._deps.clock.now())
            outcome = "failed"
        self._deps.metrics.trigger_processed(outcome)

    def _process(self, trigger: Trigger) -> str:
        """The trigger's outcome: completed, failed, deferred or coalesced."""
        store, now = self._deps.store, self._deps.clock.now()
        role = reserved_role(trigger.source)
        if role and not self._deps.config.notifications.enabled:  # SPEC §5.7
            store.triggers.complete(trigger.id, [], now, reason=NOTIFICATIONS_DISABLED)
            return "completed"
        try:
            issue = self._deps.ports.jira.load_issue(trigger.issue_key)
        except DispatcherError as exc:
            store.triggers.fail(trigger.id, f"issue load failed: {exc.message}", now)
            return "failed"
        if trigger.policy_id is not None:  # explicit: no trigger/status check (M§4.2)
            try:
                policies = [store.policies.get(trigger.policy_id)]
            except NotFound as exc:
                store.triggers.fail(trigger.id, f"policy load failed: {exc.message}", now)
                return "failed"
            # The switch is a kill switch: no explicit live run may card or page either.
            if trigger.dryrun is None and not self._deps.config.notifications.enabled \
                    and is_notification_policy(policies[0]):
                store.triggers.complete(trigger.id, [], now, reason=NOTIFICATIONS_DISABLED)
                return "completed"
        else:
            policies = match_policies(store.policies.list_active(), trigger.source, issue)
        if not policies:
            store.triggers.complete(trigger.id, [], now)
            return "completed"
        context = store.contexts.find(trigger.issue_key)
        executions = [new_execution(trigger, policy, issue, context, self._deps.registry, now)
                      for policy in policies]
        result = self._pool.ask(CreateExecutions(
            trigger=trigger, executions=executions, explicit=trigger.policy_id is not None,
            reserved_label=role.label if role else None, issue_labels=issue.labels))
        log.info("trigger processed", extra={
            "trigger_id": trigger.id, "issue_key": trigger.issue_key, "source": trigger.source,
            "reason": result.reason or f"{result.outcome}: executions {result.execution_ids}"})
        return result.outcome


class TriggerActor(TrackedActor):
    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef, router: TriggerRouter):
        super().__init__()
        self._deps = deps
        self._processor = TriggerProcessor(deps, pool)
        self._router = router

    def handle(self, message):
        if not isinstance(message, ProcessTrigger):
            return
        try:
            self._processor.process(message.trigger_id, message.recovering)
        except Exception:  # never let one trigger stop the actor
            log.exception("trigger actor failed", extra={"trigger_id": message.trigger_id})
        finally:
            # Told before this message's activity ends, so a queued trigger is never idle time.
            if (following := self._router.next_for(self.actor_ref)) is not None:
                self._deps.activity.tell(self.actor_ref, following)


class TriggerRouter:
    """An idle trigger actor gets the trigger at once; when all are busy it waits in one FIFO
    queue, and the first actor to finish takes it (``next_for``)."""

    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef, size: int):
        self._deps = deps
        self._lock = threading.Lock()
        self._queue: deque[ProcessTrigger] = deque()
        self._actors = [TriggerActor.start(deps, pool, self) for _ in range(size)]
        self._idle: list[pykka.ActorRef] = list(self._actors)

    def submit(self, trigger_id: int, recovering: bool = False) -> None:
        message = ProcessTrigger(trigger_id, recovering)
        with self._lock:
            if not self._idle:
                self._queue.append(message)
                return
            actor = self._idle.pop()
        self._deps.activity.tell(actor, message)

    def next_for(self, actor: pykka.ActorRef) -> ProcessTrigger | None:
        """The queued trigger ``actor`` should take now, or None (and it is idle again)."""
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            self._idle.append(actor)
            return None

    def stop(self) -> list[pykka.Future]:
        """Tell every trigger actor to stop; the futures say when they have."""
        return [actor.stop(block=False) for actor in self._actors]

    def status(self) -> dict:
        with self._lock:
            idle, queued = len(self._idle), len(self._queue)
        return {"actors": len(self._actors), "busy": len(self._actors) - idle,
                "queue_length": queued,
                "alive": sum(1 for actor in self._actors if actor.is_alive())}
