"""The actor system as one object: what ``serve``, the HTTP layer and the harness talk to."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import overload

import pykka

from ticket_dispatcher.actors.activity import Activity
from ticket_dispatcher.actors.client_pool import ClientPool
from ticket_dispatcher.actors.cluster import Cluster, for_mode
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.intake import IntakePriority
from ticket_dispatcher.actors.messages import (
    Boot,
    CancelExecution,
    Cancellation,
    CancelOutcome,
    ExecutionWorkers,
    ParkedView,
    PoolStatus,
    PoolView,
    Pull,
    WatchedWake,
)
from ticket_dispatcher.actors.pool import PoolAnswer, SlotsFree
from ticket_dispatcher.actors.scheduler import Scheduler
from ticket_dispatcher.actors.shadow import ShadowLane
from ticket_dispatcher.actors.status import (
    ClientView,
    ParkedExecutionView,
    ReplicaView,
    RuntimeStatus,
    StoreUnreadable,
    WaitingIn,
)
from ticket_dispatcher.actors.stopping import Deadline, await_stopped
from ticket_dispatcher.actors.supervisor import Supervisor
from ticket_dispatcher.actors.trigger import TriggerRouter
from ticket_dispatcher.actors.watcher import WatchFigures
from ticket_dispatcher.clock import TimerClock
from ticket_dispatcher.config import Config
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.actions.notification_state import page_wait
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    DryRun,
    Execution,
    Trigger,
    TriggerInput,
)
from ticket_dispatcher.domain.ports import NotConfigured, Ports, UncountedCalls
from ticket_dispatcher.errors import Conflict, NotFound, RuntimeUnavailable, StoreUnavailable
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.store import Store
from ticket_dispatcher.store.audit import Author
from ticket_dispatcher.store.cluster import notify_work
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)

ASK_TIMEOUT = 30  # seconds an HTTP request waits on an actor before giving up
# What the admin view says of a parked execution it cannot describe, or one waiting to load.
DETAILS_UNAVAILABLE = "unavailable: the database cannot be read"
RETRYING_LOAD = "retrying the issue load"
INTEGRATIONS = ("jira", "lark", "oncall", "core")  # the Ports fields served by client pools


def stop_remaining_actors(deadline: Deadline) -> None:
    """The backstop of a shutdown: stop every actor still registered and name the ones that did
    not stop in time (their threads are daemons, so they cannot hold the process)."""
    if await_stopped(pykka.ActorRegistry.stop_all(block=False), deadline):
        return
    alive = sorted(ref.actor_class.__name__ for ref in pykka.ActorRegistry.get_all())
    log.warning("shutdown deadline reached; abandoning actors still inside a call: %s",
                ", ".join(alive) or "none")


class Runtime:
    def __init__(self, config: Config, store: Store, clock: TimerClock, *, ports: Ports,
                 registry: ActionRegistry, metrics: Metrics | None = None,
                 cluster: Cluster | None = None):
        """``ports``: the integrations (a client pool each, or ``NotConfigured``) and the
        store's repositories; ``registry``: the actions it runs. Calls nobody counts
        (``UncountedCalls``) are counted in ``metrics`` (docs/operations.md, "Metrics").
        ``cluster``: the strategy of ``cluster.mode`` (actors/cluster.py), built from the
        configuration when not given."""
        self.activity = Activity()
        self.scheduler = Scheduler(clock)
        metrics = metrics or Metrics()
        if isinstance(ports.calls, UncountedCalls):
            ports = replace(ports, calls=metrics)
        self.deps = RuntimeDeps(config=config, store=store, clock=clock,
                                registry=registry, ports=ports,
                                scheduler=self.scheduler, activity=self.activity,
                                cluster=cluster or for_mode(config.cluster), metrics=metrics,
                                intake=IntakePriority(config.intake_priority.total_seconds(),
                                                      on_held=metrics.trigger_held))
        # Figures one actor leaves and another (or the admin view) reads.
        self._free = SlotsFree()  # the pool's free slots, for the shadow lane
        self._ack_watch = WatchFigures()  # the ACK watcher's round, for the admin view
        self._shadows: ShadowLane | None = None
        self._supervisor: pykka.ActorRef | None = None
        self._pool: pykka.ActorRef | None = None
        self._triggers: TriggerRouter | None = None
        self.recovered = False
        self.draining = False  # shared mode: the shutdown began, work is being handed back

    def start(self) -> None:
        """Start every actor and run boot recovery; raises if recovery cannot be read."""
        self._shadows = ShadowLane(self.deps, self._free)
        self._supervisor = Supervisor.start(self.deps, self._shadows, self._free,
                                            self._ack_watch)
        try:
            booted: tuple[pykka.ActorRef, TriggerRouter] = self._supervisor.ask(
                Boot(), block=True, timeout=ASK_TIMEOUT)
            self._pool, self._triggers = booted
            # A barrier: the pool has taken in every recovered execution (parked ones have
            # their timers) before start returns, since its inbox is first in, first out.
            self._pool.ask(PoolStatus(), timeout=ASK_TIMEOUT)
        except Exception:
            self.stop()
            raise
        self.recovered = True

    def stop(self, timeout: float | None = None) -> bool:
        """Stop every actor of the runtime within ``timeout`` (default ``shutdown_timeout``);
        False when some did not stop in time.

        No new step, claim or execution starts once this begins; callers blocked on an
        integration are woken; every actor is told to stop without blocking and their futures
        are awaited together. Nothing is marked failed: running work stays ``executing`` and
        resumes at the next boot.
        """
        if self._supervisor is None:
            return True
        if timeout is None:
            timeout = self.deps.config.shutdown_timeout.total_seconds()
        deadline = Deadline(timeout)
        supervisor, self._supervisor = self._supervisor, None
        self.recovered = False
        self.deps.stopping.set()
        self.deps.intake.stop()
        self.scheduler.stop()
        for pool in client_pools(self.deps.ports).values():
            pool.abandon()  # wake every caller still waiting on an integration (CallAbandoned)
        futures = self._triggers.stop() if self._triggers is not None else []
        if self._shadows is not None:
            futures.append(self._shadows.stop())
        if self._pool is not None:
            try:
                workers: list[pykka.ActorRef] = self._pool.ask(
                    ExecutionWorkers(), block=True, timeout=deadline.remaining())
            except (pykka.Timeout, pykka.ActorDeadError):
                workers = []
            futures += [ref.stop(block=False) for ref in workers]
            futures.append(self._pool.stop(block=False))
        futures.append(supervisor.stop(block=False))
        stopped = await_stopped(futures, deadline)
        self.deps.cluster.give_back(self.deps.store, self.deps.owner)  # a replica's leases
        return stopped

    def forget_replica(self) -> None:
        """Once it stopped cleanly: remove this process's heartbeat row, so that nobody takes
        it for a replica that was lost. Its owner (``close``) bounds the wait for the
        database by the shutdown deadline."""
        try:
            self.deps.store.replicas.stopped(self.deps.owner)
        except StoreUnavailable:  # the others see its heartbeat stop, and it is shown lost
            log.warning("this replica's heartbeat row was not removed: the database cannot "
                        "be reached")

    def drain(self) -> None:
        """Shared mode, at SIGTERM: readiness turns false and no new step, claim or execution
        actor starts here; the steps under way finish. Triggers posted meanwhile are still
        stored, for the other replicas. ``stop`` then hands back whatever is still held."""
        self.draining = True
        self.deps.stopping.set()
        log.info("draining: readiness is false; the steps under way finish, then every lease "
                 "held here is given back to the other replicas")

    def work_arrived(self) -> None:
        """A notification says there may be work to claim (from any thread)."""
        if self._pool is None or self._triggers is None or self.deps.stopping.is_set():
            return
        self.activity.tell(self._pool, Pull())
        self._triggers.work_arrived()

    def accept_trigger(self, source: str, issue_key: str, *, policy_id: int | None = None,
                       dryrun: DryRun | None = None,
                       audit: Callable[[Store, Trigger, datetime], None] | None = None) -> Trigger:
        """Persist a ``pending`` trigger in one short transaction and hand it to the trigger
        actors without waiting for them. ``audit`` records who posted it (a replay), in the
        same transaction."""
        def insert(store: Store, now: datetime) -> list[Trigger]:
            trigger = store.triggers.create(source, issue_key, policy_id=policy_id,
                                            dryrun=dryrun, now=now)
            if audit is not None:
                audit(store, trigger, now)
            return [trigger]

        [trigger] = self._accept(insert, statements=1 if audit is None else 2)
        return trigger

    def accept_delivery(self, identifier: str, issue_key: str,
                        triggers: list[tuple[str, TriggerInput]]) -> list[Trigger] | None:
        """Persist a Jira webhook delivery and the triggers it makes (each a source and its
        input) in one short transaction and hand them to the trigger actors; None when the
        delivery was taken before, and nothing is written."""
        return self._accept(
            lambda store, now: store.triggers.create_for_delivery(
                store.deliveries, identifier, issue_key, triggers, now=now),
            statements=self.deps.store.triggers.delivery_statements(len(triggers)))

    @overload
    def _accept(self, insert: Callable[[Store, datetime], list[Trigger]], *,
                statements: int) -> list[Trigger]: ...

    @overload
    def _accept(self, insert: Callable[[Store, datetime], list[Trigger] | None], *,
                statements: int) -> list[Trigger] | None: ...

    def _accept(self, insert: Callable[[Store, datetime], list[Trigger] | None], *,
                statements: int) -> list[Trigger] | None:
        """Run ``insert`` (of that many ``statements``) atomically, committed before the
        triggers it made are handed on: to a trigger actor here, or to whichever replica
        claims them first when the cluster strategy leaves them to the store (actors/cluster.py:
        a replica with no idle trigger actor)."""
        store, now, cluster = self.deps.store, self.deps.clock.now(), self.deps.cluster
        with self.deps.intake.accepting():  # new triggers wait for it (actors/intake.py)
            idle = self._router().has_idle() and not self.deps.stopping.is_set()
            with cluster.intake_unit(store, statements):
                made = insert(store, now)
                here = cluster.runs_here(made or [], len(made or ()) if idle else 0)
                if made and len(here) < len(made):
                    notify_work(store.db)  # sent at the commit
        for trigger in here:
            self._router().submit(trigger.id, source=trigger.source)
        return made

    def cancel(self, execution_id: int, reason: str, *, by: Author) -> CancelOutcome:
        """``APPLIED`` when it was not running, ``SIGNALLED`` when its actor stops at its next
        step; ``NotFound`` or ``Conflict`` (already terminal) otherwise. The execution ends
        with ``by``'s audit record, in its transaction."""
        outcome = self._ask_pool(CancelExecution(execution_id, Cancellation(reason, by)))
        assert isinstance(outcome, CancelOutcome), "the pool answers a cancel so"
        if outcome is CancelOutcome.MISSING:
            raise NotFound(f"execution {execution_id} not found")
        if outcome is CancelOutcome.FINISHED:
            raise Conflict(f"execution {execution_id} has already finished")
        return outcome

    def wake(self, execution_id: int) -> None:
        """Run a parked execution now rather than at its ``wake_at`` (a press of its card's
        button was recorded); nothing when it is not parked here: its next look or its next
        step reads the press."""
        if self._pool is not None and not self.deps.stopping.is_set():
            self.activity.tell(self._pool, WatchedWake(execution_id))

    def _router(self) -> TriggerRouter:
        """The trigger actors' router, which ``start`` sets before any trigger is accepted."""
        assert self._triggers is not None, "the runtime has started"
        return self._triggers

    def _ask_pool(self, message: object) -> PoolAnswer:
        """The pool's answer to an HTTP request's ``message`` (of the type the message names);
        ``RuntimeUnavailable`` (a 503) when it does not come within ``ASK_TIMEOUT`` or the
        runtime is stopping."""
        pool = self._pool
        if pool is None:
            raise RuntimeUnavailable("the actor runtime is not running")
        try:
            answer: PoolAnswer = pool.ask(message, block=True, timeout=ASK_TIMEOUT)
        except (pykka.Timeout, pykka.ActorDeadError):
            raise RuntimeUnavailable("the actor runtime did not answer in time; "
                                     "retry later") from None
        return answer

    def wait_idle(self, timeout: float = 10) -> bool:
        return self.activity.wait_idle(timeout)

    def status(self) -> RuntimeStatus:
        supervisor = self._supervisor  # read once: ``stop`` may clear it meanwhile
        triggers = self._triggers  # set by ``start`` just after the supervisor
        if supervisor is None or triggers is None:
            raise RuntimeUnavailable("the actor runtime is not running")
        timers, next_timer = self.scheduler.pending()
        pool = self._ask_pool(PoolStatus())
        assert isinstance(pool, PoolView), "the pool answers a status so"
        leases, watch = self.deps.config.leases, self._ack_watch.last
        trigger_actors = triggers.status()
        return {
            "supervisor": {"alive": supervisor.is_alive(), "recovered": self.recovered,
                           "in_flight": self.activity.in_flight},
            "scheduler": {"timers": timers, "next_at": format_time(next_timer)},
            "leases": {"owner": self.deps.owner,
                       "heartbeat_seconds": leases.heartbeat.total_seconds(),
                       "duration_seconds": leases.duration.total_seconds()},
            "pool": pool.figures,
            "executions": pool.running,
            "parked_executions": self._parked_views(pool.parked),
            "ack_watch": {"watched": watch.watched, "round_seconds": watch.round_seconds,
                          "looks_per_second": self.deps.config.ack_watch.looks_per_second},
            "cluster": {"mode": self.deps.config.cluster.mode, "draining": self.draining},
            "replicas": self._replica_views(),
            "trigger_actors": trigger_actors,
            "retries": {"database_waits": (pool.figures["database_waits"]
                                           + trigger_actors["database_waits"]),
                        "jira_retries": self._jira_retries()},
            "clients": self._client_status(),
        }

    def _jira_retries(self) -> int | None:
        """The triggers waiting for their next try after a passing fault of Jira, and the
        executions parked to retry their issue load; None while the database cannot be read
        (the admin view still answers)."""
        store = self.deps.store
        try:
            with store.connection():
                return store.triggers.retrying_count() + store.executions.retrying_load_count()
        except StoreUnavailable:
            return None

    def _replica_views(self) -> list[ReplicaView] | StoreUnreadable:
        """Every process serving this database as its heartbeats left it: this one (``self``)
        and any other; ``alive`` while its last heartbeat is younger than a lease. From the
        store, so during an outage only a note that it cannot be read."""
        try:
            replicas = self.deps.store.replicas.known()
        except StoreUnavailable:
            return {"unavailable": DETAILS_UNAVAILABLE}
        now, duration = self.deps.clock.now(), self.deps.config.leases.duration
        return [{"owner": r.owner, "self": r.owner == self.deps.owner, "host": r.host,
                 "pid": r.pid, "version": r.version, "started_at": format_time(r.started_at),
                 "last_heartbeat": format_time(r.heartbeat_at),
                 "alive": now - r.heartbeat_at <= duration,
                 "slots": r.slots, "busy": r.busy, "parked": r.parked} for r in replicas]

    def _parked_views(self, parked: list[ParkedView]) -> list[ParkedExecutionView]:
        """Parked executions as an operator wants them: what each waits in, and for what (the
        ACK wait's attempt and absolute deadline, or the issue load it retries); read from the
        store in one go. While the database cannot be read, each keeps what the pool knows (its
        id and ``wake_at``) and says ``details`` are unavailable: the admin view is what an
        operator reads during an outage, so it must not fail with it (docs/operations.md)."""
        if not parked:
            return []  # nothing to read: no connection needed
        try:
            executions = self.deps.store.executions.get_many(p["execution_id"] for p in parked)
        except StoreUnavailable:  # the store's health logs the outage, once
            return [{**entry, "details": DETAILS_UNAVAILABLE} for entry in parked]
        views: list[ParkedExecutionView] = []
        for entry in parked:
            view: ParkedExecutionView = {**entry, "issue_key": "", "action": "", "attempt": None,
                                         "deadline": None}
            execution = executions.get(entry["execution_id"])
            if execution is not None:
                view["issue_key"] = execution.issue_key
                view.update(_waiting_in(execution))
            views.append(view)
        return views

    def _client_status(self) -> dict[str, ClientView]:
        """Each integration's pool statistics; ``configured: False`` for a ``NotConfigured``
        port; ``configured: True`` for any other port (a test fake)."""
        ports, pools = self.deps.ports, client_pools(self.deps.ports)
        clients: dict[str, ClientView] = {}
        for name in INTEGRATIONS:
            if name in pools:
                clients[name] = pools[name].stats()
            else:
                clients[name] = {"configured": not isinstance(getattr(ports, name),
                                                             NotConfigured)}
        return clients


def client_pools(ports: Ports) -> dict[str, ClientPool]:
    """The client pools among the ports, by port name: what shutdown abandons and the admin
    view reports. ``Ports`` itself stays a plain domain dataclass."""
    return {name: port for name in INTEGRATIONS
            if isinstance(port := getattr(ports, name), ClientPool)}


def _waiting_in(execution: Execution) -> WaitingIn:
    """The action an execution is parked in, with its ACK wait's attempt and deadline; or,
    parked after a failed issue (or policy) load, the load it retries and how many loads have
    failed so far (actors/execution.py ``_load_failed``), whatever action it is in."""
    if execution.load_attempts:
        return {"action": RETRYING_LOAD, "attempt": execution.load_attempts, "deadline": None}
    for rule in execution.rule_executions:
        for action in rule.action_executions:
            if action.status is ActionStatus.EXECUTING:
                page = page_wait(action)  # only a page's wait has an attempt and a deadline
                return {"action": f"{rule.name}: {action.index}:{action.type}",
                        "attempt": page.attempt if page else None,
                        "deadline": format_time(page.deadline) if page else None}
    return {}
