"""TriggerActors: claim a pending trigger, load the issue, match, hand executions to the pool.

``TriggerProcessor`` holds the logic (SPEC §5, M§4); ``TriggerActor`` is the thin actor around
it, and ``TriggerRouter`` spreads triggers over the pool of actors.
"""

from __future__ import annotations

import itertools
import logging
import threading

import pykka

from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.messages import CreateExecutions, ProcessTrigger
from ticket_dispatcher.domain.execution import Trigger
from ticket_dispatcher.domain.fanout import new_execution, reserved_role
from ticket_dispatcher.domain.matching import match_policies
from ticket_dispatcher.errors import DispatcherError, NotFound
from ticket_dispatcher.store.database import unit_of_work

log = logging.getLogger(__name__)

NOTIFICATIONS_DISABLED = "assignment notification disabled"


class TriggerProcessor:
    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef):
        self._deps = deps
        self._pool = pool

    def process(self, trigger_id: int, recovering: bool = False) -> None:
        store, now = self._deps.store, self._deps.clock.now()
        trigger = store.triggers.claim(trigger_id, now, recovering=recovering)
        if trigger is None:
            return  # another actor has it, it is not due yet, or it is already done
        try:
            self._process(trigger)
        except Exception:
            log.exception("trigger processing failed", extra={"trigger_id": trigger.id})
            store.triggers.fail(trigger.id, "internal error while processing the trigger",
                                self._deps.clock.now())

    def _process(self, trigger: Trigger) -> None:
        store, now = self._deps.store, self._deps.clock.now()
        role = reserved_role(trigger.source)
        if role and not self._deps.config.notifications.enabled:  # SPEC §5.7
            store.triggers.complete(trigger.id, [], now, reason=NOTIFICATIONS_DISABLED)
            return
        try:
            issue = self._deps.ports.jira.load_issue(trigger.issue_key)
        except DispatcherError as exc:
            store.triggers.fail(trigger.id, f"issue load failed: {exc.message}", now)
            return
        if trigger.policy_id is not None:  # explicit: no trigger/status check (M§4.2)
            try:
                policies = [store.policies.get(trigger.policy_id)]
            except NotFound as exc:
                store.triggers.fail(trigger.id, f"policy load failed: {exc.message}", now)
                return
        else:
            policies = match_policies(store.policies.list_active(), trigger.source, issue)
        if not policies:
            store.triggers.complete(trigger.id, [], now)
            return
        context = store.contexts.find(trigger.issue_key)
        executions = [new_execution(trigger, policy, issue, context, self._deps.registry, now)
                      for policy in policies]
        result = self._pool.ask(CreateExecutions(
            trigger=trigger, executions=executions, explicit=trigger.policy_id is not None,
            reserved_label=role.label if role else None, issue_labels=issue.labels))
        log.info("trigger processed", extra={
            "trigger_id": trigger.id, "issue_key": trigger.issue_key, "source": trigger.source,
            "reason": result.reason or f"{result.outcome}: executions {result.execution_ids}"})


class TriggerActor(pykka.ThreadingActor):
    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef):
        super().__init__()
        self._deps = deps
        self._processor = TriggerProcessor(deps, pool)

    def on_receive(self, message):
        if not isinstance(message, ProcessTrigger):
            return
        try:
            with unit_of_work(self._deps.store.db):
                self._processor.process(message.trigger_id, message.recovering)
        except Exception:  # never let one trigger stop the actor
            log.exception("trigger actor failed", extra={"trigger_id": message.trigger_id})
        finally:
            self._deps.activity.end()


class TriggerRouter:
    """Round-robin over the trigger actors; counts what is in flight for the admin view."""

    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef, size: int):
        self._deps = deps
        self._actors = [TriggerActor.start(deps, pool) for _ in range(size)]
        self._next = itertools.cycle(self._actors)
        self._lock = threading.Lock()

    def submit(self, trigger_id: int, recovering: bool = False) -> None:
        self._deps.activity.begin()
        with self._lock:
            actor = next(self._next)
        actor.tell(ProcessTrigger(trigger_id, recovering))

    def stop(self) -> None:
        for actor in self._actors:
            actor.stop()

    def status(self) -> dict:
        return {"actors": len(self._actors),
                "alive": sum(1 for actor in self._actors if actor.is_alive())}
