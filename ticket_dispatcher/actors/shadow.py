"""Shadow evaluations: beside each live trigger that a family's active version handles, the
family's shadow version runs as a dry run on the same issue snapshot and the same frozen clock
(docs/policies.md, "Shadow: try a change on live traffic").

- **Never in the way of live work.** The live executions are created before the shadow is even
  offered the trigger; the evaluation runs on its own actor, after the fact.
- **Lower priority, bounded.** ``ShadowLane.offer`` takes an evaluation only while the execution
  pool has a free slot and nothing queued, and while fewer than ``capacity`` evaluations wait
  or run; otherwise it is dropped and counted, never queued without end.
- **Writes nothing.** The dry run plans and never executes, its checkpoints are kept in memory,
  and its ports only read: any other call is refused (``WriteRefused``) and shows as the
  decision's error. The only thing stored is the decision, beside the live execution's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.pool import SlotsFree
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.behavior import Behavior, StepKind
from ticket_dispatcher.domain.execution import Execution, RuleExecution, Trigger
from ticket_dispatcher.domain.fanout import new_execution
from ticket_dispatcher.domain.model import DispatchContext, Issue, Policy
from ticket_dispatcher.domain.ports import Ports, UncountedCalls
from ticket_dispatcher.domain.shadow import Decision, decide
from ticket_dispatcher.errors import DispatcherError, IntegrationError, StoreUnavailable
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)

CAPACITY = 4  # evaluations waiting or running at once, per process
MAX_STEPS = 200  # a dry run plans each action once: far more than any policy needs

# What a shadow may call: reads only, port by port.
READS = {
    "jira": {"load_issue", "find_user_by_email", "find_users_by_email", "count_issues"},
    "lark": {"open_ids_by_email", "read_user_ids"},
    "oncall": {"responders"},
    "core": {"group_members", "user", "leader"},
    "engineers": {"enabled_by_email", "hindered", "time_off"},
    "contexts": {"find"},
    "triggers": set(),
}


class WriteRefused(IntegrationError):
    """A shadow asked a port for something that is not a read."""


@dataclass(frozen=True)
class ShadowRequest:
    trigger: Trigger  # the live trigger
    issue: Issue  # its snapshot, as the live trigger loaded it
    context: DispatchContext | None
    now: datetime  # the live trigger's clock, frozen for the shadow's conditions
    live_execution_id: int
    family_id: str
    policy_id: int  # the shadow version


class ShadowLane:
    """The bounded, low-priority way in to the shadow actor (one per process), which it
    starts; ``free``: the execution pool's free slots."""

    def __init__(self, deps: RuntimeDeps, free: SlotsFree, capacity: int = CAPACITY):
        self._deps = deps
        self._free = free
        self._capacity = capacity
        self._lock = threading.Lock()
        self._pending = 0
        self._actor = ShadowActor.start(deps, self)

    def offer(self, request: ShadowRequest) -> bool:
        """Take the evaluation, or drop it (counted) when the service is busy."""
        with self._lock:
            taken = self._pending < self._capacity and self._free.count > 0
            if taken:
                self._pending += 1
        if taken:
            self._deps.activity.tell(self._actor, request)
            return True
        self._deps.metrics.shadow_decision(request.family_id, "dropped")
        try:
            self._deps.store.shadows.dropped(request.family_id)
        except StoreUnavailable:
            pass  # the metric has it; the report's count is a courtesy
        return False

    def done(self) -> None:
        with self._lock:
            self._pending -= 1

    def stop(self) -> pykka.Future:
        """Tell the shadow actor to stop; the future says when it has."""
        return self._actor.stop(block=False)


class _Memory:
    """Checkpoints of a dry run that leaves no trace: kept in the execution object only."""

    def save(self, execution: Execution, rules: list[RuleExecution], *,
             parked: bool = False) -> None:
        return None


class _ReadOnly:
    def __init__(self, name: str, port: Any):
        self._name = name
        self._port = port

    def __getattr__(self, method: str) -> Any:
        if method in READS.get(self._name, ()):
            return getattr(self._port, method)

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise WriteRefused(f"a shadow only reads; {self._name}.{method} was not called",
                               service=self._name)

        return refused


def read_only(ports: Ports) -> Ports:
    return replace(ports, calls=UncountedCalls(), **{
        name: _ReadOnly(name, getattr(ports, name)) for name in READS})


def dry_run(request: ShadowRequest, policy: Policy, registry: ActionRegistry, ports: Ports,
            clock_now: Callable[[], datetime]) -> Execution:
    """The shadow version's execution for the live trigger, run to its end in memory."""
    trigger = replace(request.trigger,
                      dryrun={"overwrite_data": {"now": format_time(request.now)}})
    execution = new_execution(trigger, policy, request.issue, request.context, registry,
                              request.now)
    behavior = Behavior(registry, _Memory(), clock_now, ports=read_only(ports))
    for _ in range(MAX_STEPS):
        if behavior.step(execution, request.issue).kind is not StepKind.ADVANCED:
            break
    return execution


class ShadowActor(TrackedActor):
    def __init__(self, deps: RuntimeDeps, lane: ShadowLane):
        super().__init__(deps.activity)
        self._deps = deps
        self._lane = lane

    def handle(self, message: object) -> None:
        if not isinstance(message, ShadowRequest):
            return
        try:
            self._evaluate(message)
        except Exception:  # a shadow never takes anything else down
            log.exception("shadow evaluation failed", extra={
                "trigger_id": message.trigger.id, "policy_id": message.policy_id})
        finally:
            self._lane.done()

    def _evaluate(self, request: ShadowRequest) -> None:
        deps = self._deps
        if deps.stopping.is_set():
            return
        try:
            policy = deps.store.policies.get(request.policy_id)
            execution = dry_run(request, policy, deps.registry, deps.ports, deps.clock.now)
            decision = decide(execution)
        except DispatcherError as exc:  # the shadow's own failure is part of its decision
            decision = Decision(error=exc.message)
        verdict = deps.store.shadows.record(
            policy_id=request.policy_id, family_id=request.family_id,
            trigger_id=request.trigger.id, issue_key=request.issue.key,
            live_execution_id=request.live_execution_id, shadow=decision,
            now=deps.clock.now())
        if verdict is not None:
            deps.metrics.shadow_decision(request.family_id,
                                         "differed" if verdict.differs else "agreed")
