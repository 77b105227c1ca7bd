"""What the actors are built from: handed down at start-up, never looked up globally.

``RuntimeDeps`` is frozen: what changes while the runtime runs is owned by an object it holds
(the ``stopping`` event, the intake's turn, the cluster strategy's memory), or handed to its
writer and its reader when they are built (the free slots, the ACK watcher's figures, the
shadow lane: actors/runtime.py)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pykka

from ticket_dispatcher.actors.activity import Activity
from ticket_dispatcher.actors.cluster import Cluster
from ticket_dispatcher.actors.first_read import IssueActivity
from ticket_dispatcher.actors.intake import IntakePriority
from ticket_dispatcher.actors.leases import process_identity
from ticket_dispatcher.actors.scheduler import Scheduler
from ticket_dispatcher.clock import TimerClock
from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.behavior import Behavior, Checkpoints
from ticket_dispatcher.domain.burden_events import interrupts
from ticket_dispatcher.domain.execution import Execution
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.errors import NotFound
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.store import Store

log = logging.getLogger(__name__)

POLICY_NAMES_KEPT = 256  # policy versions whose names are remembered for the metrics


class PolicyNames:
    """Policy version names by id, for the ``policy`` label of the execution metrics.

    Every execution thread asks when its execution finishes; ``functools.lru_cache`` keeps
    the ``size`` most recently asked (a process that runs for months sees ever new versions)
    and is safe from many threads. A name that cannot be read (``NotFound`` for a deleted
    draft) is not remembered. Only a draft can be changed (docs/policies.md, "Versions and
    families"): its dry runs keep counting under the name first read."""

    def __init__(self, read: Callable[[int], str], size: int = POLICY_NAMES_KEPT):
        self.get = functools.lru_cache(maxsize=size)(read)

    def __len__(self) -> int:
        return self.get.cache_info().currsize


@dataclass(frozen=True)
class RuntimeDeps:
    config: Config
    store: Store
    clock: TimerClock
    registry: ActionRegistry
    ports: Ports  # the integrations and the engineer store (domain/ports.py)
    scheduler: Scheduler
    activity: Activity
    # A single process or one of several replicas (actors/cluster.py), decided at start-up.
    cluster: Cluster
    metrics: Metrics = field(default_factory=Metrics)
    # Who holds this process's leases (actors/leases.py).
    owner: str = field(default_factory=process_identity)
    # Set once the shutdown begins: no new step, claim or execution actor starts after it.
    stopping: threading.Event = field(default_factory=threading.Event)
    policy_names: PolicyNames = field(init=False, repr=False)
    # Trigger requests before the start of new triggers (actors/intake.py); the runtime
    # gives one bounded by ``intake_priority``.
    intake: IntakePriority = field(default_factory=lambda: IntakePriority(0))
    # The issues the execution actors are at work on, for the freshness rule of a trigger's
    # read (actors/first_read.py).
    issue_activity: IssueActivity = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Built from the fields above; set once here, as a frozen dataclass sets its own.
        object.__setattr__(self, "policy_names", PolicyNames(
            lambda policy_id: self.store.policies.get(policy_id).name))
        object.__setattr__(self, "issue_activity", IssueActivity(lambda: self.clock.monotonic()))

    def tell_at(self, when: datetime, ref: pykka.ActorRef, message: object, label: str) -> None:
        """Tell ``message`` to ``ref`` at ``when`` (the scheduler's timer only tells)."""
        self.scheduler.call_at(when, lambda: self.activity.tell(ref, message), label=label)

    def behavior(self, checkpoints: Checkpoints | None = None,
                 ports: Ports | None = None) -> Behavior:
        """The state machine over the store (unfenced: for a cancel or an abort from outside
        an actor), or over one actor's fenced ``checkpoints`` and guarded ``ports``, merging
        the checkpoints that guard nothing (domain/behavior.py)."""
        return Behavior(self.registry, checkpoints or self.store.executions, self.clock.now,
                        ports=ports or self.ports, on_finished=self.execution_finished,
                        merge=checkpoints is not None)

    def execution_finished(self, execution: Execution) -> None:
        """Once per execution, after the save that made it terminal: the metrics from
        its persisted contexts, and the one log line an operator follows."""
        try:
            self.metrics.execution_finished(execution, self._policy_name(execution.policy_id))
        except Exception:  # never let counting change how an execution ends
            log.exception("metrics of a finished execution failed",
                          extra={"execution_id": execution.id})
        if not execution.dry_run:
            self._count_interruptions(execution)
            self._settle_shadows(execution)
        seconds = ((execution.completed_at - execution.created_at).total_seconds()
                   if execution.completed_at and execution.created_at else None)
        failed = bool(execution.failure_code)
        (log.warning if failed else log.info)("execution finished", extra={
            "issue_key": execution.issue_key, "trigger_id": execution.trigger_id,
            "execution_id": execution.id, "policy_id": execution.policy_id,
            "status": execution.status.value, "mode": execution.mode.value,
            "failure_code": execution.failure_code, "reason": execution.failure_reason,
            "duration_seconds": seconds})

    def _count_interruptions(self, execution: Execution) -> None:
        """The interruptions a finished workflow recorded, by rotation and band, from its
        burden rows (one read, for a notification workflow only)."""
        if not interrupts(execution):
            return
        try:
            self.metrics.interrupted(self.store.burden.interruptions_of(execution.id))
        except Exception:  # never let counting change how an execution ends
            log.exception("counting the interruptions of a finished execution failed",
                          extra={"execution_id": execution.id})

    def _settle_shadows(self, execution: Execution) -> None:
        """Judge the shadow decisions made beside this live execution, now that it ended."""
        if self.cluster.unshadowed.settled((execution.trigger_id, execution.policy_family_id)):
            return  # its trigger found no shadow version of its family
        try:
            for family, verdict in self.store.shadows.settle(execution, self.clock.now()):
                self.metrics.shadow_decision(family, "differed" if verdict.differs
                                             else "agreed")
        except Exception as exc:  # a shadow never changes how a live execution ends
            log.warning("shadow decisions not judged", extra={
                "execution_id": execution.id, "reason": f"{type(exc).__name__}: {exc}"})

    def _policy_name(self, policy_id: int) -> str:
        try:
            return self.policy_names.get(policy_id)
        except NotFound:  # a draft deleted meanwhile
            return ""
