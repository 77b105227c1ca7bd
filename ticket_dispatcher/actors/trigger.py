"""TriggerActors: claim a pending trigger, load the issue, match, hand executions to the pool.

``TriggerProcessor`` holds the logic (docs/design.md, "The life of a trigger");
``TriggerActor`` is the thin actor around it, and ``TriggerRouter`` hands each trigger to an
idle actor or queues it, first in first out, for the first actor that frees, so a trigger never
waits behind a slow issue load of another.

No database connection is held across the issue load or the creation ask: every store call is
its own short unit of work. A trigger whose processing the shutdown interrupts stays
``processing`` (or ``pending``) and boot recovery takes it over.

A trigger is claimed under a lease (actors/leases.py) and every write that closes it is fenced
by that lease. A trigger whose processing meets a database failure (or an execution pool that
does not answer in time) is never failed for it: it keeps its claim and is processed again
after a capped, jittered backoff. The router knows every trigger this process has in hand
(queued, processing or waiting to retry), so a trigger is never in hand twice, and the
supervisor's heartbeat renews their leases and resumes the ones nobody holds.
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.first_read import IssueRead
from ticket_dispatcher.actors.lanes import Lanes
from ticket_dispatcher.actors.leases import Hold, store_fault_backoff
from ticket_dispatcher.actors.messages import (
    CreateExecutions,
    CreationResult,
    ProcessTrigger,
    TriggerOutcome,
)
from ticket_dispatcher.actors.shadow import ShadowLane, ShadowRequest
from ticket_dispatcher.domain.execution import Execution, Trigger
from ticket_dispatcher.domain.fanout import new_execution, reserved_role
from ticket_dispatcher.domain.matching import (
    NOTIFICATION_LANE,
    ORDINARY_LANE,
    is_notification_policy,
    lane_of,
    match_policies,
)
from ticket_dispatcher.domain.model import DispatchContext, Issue
from ticket_dispatcher.domain.retries import next_try, spent
from ticket_dispatcher.domain.webhooks import required_label, role_label_step
from ticket_dispatcher.errors import (
    CallAbandoned,
    DispatcherError,
    Fault,
    LeaseLost,
    NotFound,
    StoreUnavailable,
    fault_of,
)
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)

NOTIFICATIONS_DISABLED = "assignment notification disabled"
INTERNAL_ERROR = "internal error while processing the trigger"
# The longest a trigger actor waits for the execution pool to create its executions.
CREATE_TIMEOUT_SECONDS = 30


@dataclass
class TriggerWork:
    """One trigger this process has in hand: queued, processing or waiting to retry. Its
    ``hold`` is the claim, once taken (progress is the claim itself: none while waiting)."""

    trigger_id: int
    recovering: bool = False
    attempts: int = 0  # interrupted attempts in a row
    token: int = field(default=0)
    hold: Hold = field(default_factory=lambda: Hold(None))
    claimed: Trigger | None = None  # claimed already, by a shared-mode pull (``claim_due``)
    lane: str = ORDINARY_LANE  # which lane it waits in for an actor (actors/lanes.py)


class TriggerProcessor:
    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef, shadows: ShadowLane):
        self._deps = deps
        self._pool = pool
        self._shadows = shadows

    def process(self, work: TriggerWork) -> TriggerOutcome | None:
        """Process the trigger of ``work``; its outcome, ``INTERRUPTED`` when a database failure
        interrupted it (it keeps its claim and is tried again), None when it was not ours to
        process. The claim's lease and times are recorded in ``work`` for the heartbeat."""
        if self._deps.stopping.is_set():
            return None  # still pending: the poll or boot recovery picks it up
        deps, now = self._deps, self._deps.clock.now()
        trigger, work.claimed = work.claimed, None
        try:
            trigger = trigger or deps.store.triggers.claim(
                work.trigger_id, now, recovering=work.recovering, owner=deps.owner,
                expires_at=now + deps.config.leases.duration)
        except StoreUnavailable:
            return TriggerOutcome.INTERRUPTED
        if trigger is None:
            return None  # another actor has it, it is not due yet, or it is already done
        assert trigger.lease is not None, "a claimed trigger carries the lease of its claim"
        work.hold.claimed(trigger.lease, now, deps.config.leases.duration)
        try:
            outcome, reason = self._process(trigger)
        except (CallAbandoned, pykka.ActorDeadError):  # shutdown: boot recovery takes it over
            log.info("trigger left processing for shutdown", extra={"trigger_id": trigger.id})
            return None
        except (StoreUnavailable, pykka.Timeout) as exc:
            log.debug("trigger processing interrupted; it is retried", extra={
                "trigger_id": trigger.id, "reason": type(exc).__name__})
            return TriggerOutcome.INTERRUPTED
        except LeaseLost as exc:
            log.warning("trigger lease lost; another holder processes it", extra={
                "trigger_id": trigger.id, "reason": exc.message})
            return None
        except Exception:
            log.exception("trigger processing failed", extra={"trigger_id": trigger.id})
            outcome, reason = TriggerOutcome.FAILED, INTERNAL_ERROR
            try:
                deps.store.triggers.fail(trigger.id, reason, deps.clock.now(),
                                         lease=trigger.lease)
            except (StoreUnavailable, LeaseLost):
                return TriggerOutcome.INTERRUPTED
        if outcome is TriggerOutcome.FAILED:  # every failure passes here: one line per trigger
            log.warning("trigger failed", extra={
                "trigger_id": trigger.id, "issue_key": trigger.issue_key,
                "source": trigger.source, "reason": reason})
        deps.metrics.trigger_processed(outcome)
        return outcome

    def _process(self, trigger: Trigger) -> tuple[TriggerOutcome, str]:
        """The trigger's outcome (completed, failed, deferred or coalesced) and its reason,
        once the trigger is closed or deferred in the store."""
        store, now = self._deps.store, self._deps.clock.now()
        role = reserved_role(trigger.source)
        lease = trigger.lease
        read_began = self._deps.issue_activity.mark()  # before the issue's read
        if role and not self._deps.config.notifications.enabled:  # switched off: no executions
            store.triggers.complete(trigger.id, [], now, reason=NOTIFICATIONS_DISABLED,
                                    lease=lease)
            return TriggerOutcome.COMPLETED, NOTIFICATIONS_DISABLED
        try:
            issue = self._deps.ports.jira.load_issue(trigger.issue_key)
            read_began = self._deps.issue_activity.answered(read_began)
        except DispatcherError as exc:
            reason, fault = f"issue load failed: {exc.message}", fault_of(exc)
            if fault.passing:
                # from when the load failed: a wait behind the rate limit took time
                return self._put_off_trigger(trigger, fault, reason, self._deps.clock.now())
            store.triggers.fail(trigger.id, reason, now, lease=lease)
            return TriggerOutcome.FAILED, reason
        labelled = self._role_label(trigger, issue)
        if isinstance(labelled, tuple):
            return labelled
        issue = labelled
        shadows: dict[str, int] | None = None  # each family's shadow, when read with them
        if trigger.policy_id is not None:  # explicit: no trigger/status check
            try:
                policies = [store.policies.get(trigger.policy_id)]
            except NotFound as exc:
                reason = f"policy load failed: {exc.message}"
                store.triggers.fail(trigger.id, reason, now, lease=lease)
                return TriggerOutcome.FAILED, reason
            # The switch is a kill switch: no explicit live run may card or page either.
            if trigger.dryrun is None and not self._deps.config.notifications.enabled \
                    and is_notification_policy(policies[0]):
                store.triggers.complete(trigger.id, [], now, reason=NOTIFICATIONS_DISABLED,
                                        lease=lease)
                return TriggerOutcome.COMPLETED, NOTIFICATIONS_DISABLED
        else:
            active, shadows = store.policies.active_and_shadows()
            policies = match_policies(active, trigger.source, issue)
            label = None if policies else required_label(issue, trigger.extra_input,
                                                         trigger.source, active)
            if label is not None:
                labelled = self._write_label(trigger, issue, label)
                if isinstance(labelled, tuple):
                    return labelled
                issue = labelled
                policies = match_policies(active, trigger.source, issue)
        if not policies:
            store.triggers.complete(trigger.id, [], now, lease=lease)
            return TriggerOutcome.COMPLETED, ""
        context = store.contexts.find(trigger.issue_key)
        executions = [new_execution(trigger, policy, issue, context, self._deps.registry, now)
                      for policy in policies]
        unshadowed = self._unshadowed(trigger, executions, shadows)
        created: list[int] = []
        try:
            result: CreationResult = self._pool.ask(CreateExecutions(
                trigger=trigger, executions=executions, explicit=trigger.policy_id is not None,
                reserved_label=role.label if role else None, issue_labels=issue.labels,
                lease=lease, read=IssueRead(issue, trigger.id, read_began)),
                block=True, timeout=CREATE_TIMEOUT_SECONDS)
            created = result.execution_ids
        finally:  # the executions not created have no end to wait for
            self._deps.cluster.unshadowed.forget(
                key for key, execution in unshadowed.items() if execution.id not in created)
        if trigger.dryrun is None and result.execution_ids:
            self._offer_shadows(trigger, issue, context, executions, result.execution_ids, now,
                                shadows)
        if result.outcome is not TriggerOutcome.FAILED:  # a failure is logged once, by ``process``
            log.info("trigger processed", extra={
                "trigger_id": trigger.id, "issue_key": trigger.issue_key,
                "source": trigger.source,
                "reason": result.reason or f"{result.outcome}: executions "
                                           f"{result.execution_ids}"})
        return result.outcome, result.reason

    def _role_label(self, trigger: Trigger, issue: Issue) -> Issue | tuple[TriggerOutcome, str]:
        """A Jira webhook's role trigger adds the role's label to the issue first, when the
        webhook code says so (domain/webhooks.py, ``role_label_step``). The issue as matching
        sees it, or the trigger's outcome when it ends here."""
        store = self._deps.store
        step = role_label_step(issue, trigger.extra_input, lambda since: (
            store.executions.started_since(trigger.source, trigger.issue_key, since)))
        if step.ends:
            store.triggers.complete(trigger.id, [], self._deps.clock.now(), reason=step.ends,
                                    lease=trigger.lease)
            return TriggerOutcome.COMPLETED, step.ends
        return issue if step.label is None else self._write_label(trigger, issue, step.label)

    def _write_label(self, trigger: Trigger, issue: Issue,
                     label: str) -> Issue | tuple[TriggerOutcome, str]:
        """Add ``label`` to the issue: harmless when repeated, a passing fault retried like
        the issue load, a refusal the trigger's failure."""
        try:
            self._deps.ports.jira.edit_labels(trigger.issue_key, add=[label])
        except DispatcherError as exc:
            reason, fault = f"label write failed: {exc.message}", fault_of(exc)
            now = self._deps.clock.now()
            if fault.passing:
                return self._put_off_trigger(trigger, fault, reason, now)
            self._deps.store.triggers.fail(trigger.id, reason, now, lease=trigger.lease)
            return TriggerOutcome.FAILED, reason
        return replace(issue, labels=(*issue.labels, label))

    def _put_off_trigger(self, trigger: Trigger, fault: Fault, reason: str,
                         now: datetime) -> tuple[TriggerOutcome, str]:
        """A passing fault of Jira: the trigger goes back to ``pending``, due again after a
        backoff, or fails once its retry budget is spent (domain/retries.py)."""
        deps = self._deps
        budget = deps.config.transient_retry_budget
        since, attempts = trigger.retry_since or now, trigger.retry_count + 1
        due = next_try(fault.retry_after, attempts, since, now, budget)
        if due is None:
            reason = spent(reason, attempts, since, now, budget)
            deps.store.triggers.fail(trigger.id, reason, now, lease=trigger.lease)
            return TriggerOutcome.FAILED, reason
        deps.store.triggers.retry(trigger.id, due, reason, now, since=since,
                                  lease=trigger.lease)
        deps.metrics.passing_fault_retry("trigger", fault.cause_label)
        log.info("trigger's issue load met a passing fault; it is tried again", extra={
            "trigger_id": trigger.id, "issue_key": trigger.issue_key, "source": trigger.source,
            "reason": reason, "attempt": attempts, "deadline": format_time(due)})
        return TriggerOutcome.RETRYING, reason

    def _unshadowed(self, trigger: Trigger, executions: list[Execution],
                    shadows: dict[str, int] | None) -> dict[tuple[int, str], Execution]:
        """Note the live executions about to be created whose family has no shadow version,
        so that their end need not look for decisions (a single process's memory: on
        replicas every end looks, actors/cluster.py). Noted before the creation: an execution
        may end before the pool answers."""
        if shadows is None or trigger.dryrun is not None:
            return {}
        unshadowed = {(trigger.id, e.policy_family_id): e for e in executions
                      if e.policy_family_id not in shadows}
        self._deps.cluster.unshadowed.note(unshadowed)
        return unshadowed

    def _offer_shadows(self, trigger: Trigger, issue: Issue, context: DispatchContext | None,
                       executions: list[Execution], created: list[int], now: datetime,
                       shadows: dict[str, int] | None) -> None:
        """The live executions exist: offer each family's shadow version, if it has one, the
        same trigger, issue snapshot and clock (actors/shadow.py). ``shadows``: read with the
        active versions the trigger matched, else read here. Never in their way: when the
        store cannot say which families have a shadow, this trigger goes without."""
        live = {e.policy_family_id: e.id for e in executions if e.id in created}
        if shadows is None:
            try:
                shadows = self._deps.store.shadows.of_families(sorted(live))
            except StoreUnavailable:
                return  # the live work is done; the store's health reports the outage
        shadows = {family: policy_id for family, policy_id in shadows.items() if family in live}
        for family, policy_id in shadows.items():
            self._shadows.offer(ShadowRequest(
                trigger=trigger, issue=issue, context=context, now=now,
                live_execution_id=live[family], family_id=family, policy_id=policy_id))


class TriggerActor(TrackedActor):
    def __init__(self, deps: RuntimeDeps, processor: TriggerProcessor, router: TriggerRouter):
        super().__init__(deps.activity)
        self._deps = deps
        self._processor = processor
        self._router = router

    def handle(self, message: object) -> None:
        if not isinstance(message, ProcessTrigger):
            return
        work = self._router.work(message)
        outcome = None
        try:
            if work is not None:  # else a retry of a trigger handed on by the sweeper
                self._deps.intake.wait_turn()  # the requests being accepted go first
                outcome = self._processor.process(work)
        except Exception:  # never let one trigger stop the actor
            log.exception("trigger actor failed", extra={"trigger_id": message.trigger_id})
        finally:
            self._router.processed(work, retry=outcome is TriggerOutcome.INTERRUPTED)
            # Told before this message's activity ends, so a queued trigger is never idle time.
            if (following := self._router.next_for(self.actor_ref)) is not None:
                self._deps.activity.tell(self.actor_ref, following)
            else:
                self._router.pull()  # idle now: take what waits in the store, if anything


class TriggerRouter:
    """An idle trigger actor gets the trigger at once; when all are busy it waits in its lane
    (actors/lanes.py: notifications before ordinary triggers, by ``lanes.notification_share``),
    and the first actor to finish takes the next (``next_for``).

    It also knows every trigger in hand here (``_in_hand``: queued, processing or waiting to
    retry), so submitting one already in hand does nothing, and the heartbeat can renew the
    leases of the ones being processed (``heartbeat``)."""

    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef, size: int,
                 shadows: ShadowLane):
        self._deps = deps
        self._lock = threading.Lock()
        self._queue: Lanes[ProcessTrigger] = Lanes(deps.config.lanes.notification_share)
        deps.metrics.lanes("triggers", self._queue.lengths())  # each lane's series from the start
        self._in_hand: dict[int, TriggerWork] = {}
        self._tokens = itertools.count(1)
        self._actors = [TriggerActor.start(deps, TriggerProcessor(deps, pool, shadows), self)
                        for _ in range(size)]
        self._idle: list[pykka.ActorRef] = list(self._actors)
        self.reclaimed_total = 0
        # The store as a queue: actors a pull is claiming for right now, and whether the store
        # may hold more due triggers than the last pull took.
        self._reserved = 0
        self._more = True
        self._pulls = 0  # pulls since the last that took ordinary triggers first

    def submit(self, trigger_id: int, recovering: bool = False, *,
               claimed: Trigger | None = None, source: str | None = None) -> None:
        """Process the trigger here; ``source`` (or the claimed trigger's) decides its lane,
        ordinary when not known."""
        lane = lane_of(claimed.source if claimed is not None else source)
        with self._lock:
            if trigger_id in self._in_hand:
                # Queued, processing or waiting to retry here already. A claim taken for it
                # meanwhile is this process's own: its processing claims it again.
                return
            work = TriggerWork(trigger_id, recovering, token=next(self._tokens), claimed=claimed,
                               lane=lane)
            self._in_hand[trigger_id] = work
        self._dispatch(ProcessTrigger(trigger_id, recovering, work.token))

    def has_idle(self) -> bool:
        """An idle trigger actor would take a trigger submitted now."""
        with self._lock:
            return len(self._idle) > len(self._queue) + self._reserved

    def work_arrived(self) -> None:
        """Another replica (or this one) says there may be triggers to claim."""
        self._more = True
        self.pull()

    def pull(self) -> None:
        """Claim as many due triggers as there are idle trigger actors here, so a busy
        replica leaves the rest to the others (``TriggerRepository.claim_due``; a single
        process has none to claim: actors/cluster.py)."""
        deps = self._deps
        if deps.stopping.is_set() or not self._more:
            return
        with self._lock:
            free = len(self._idle) - len(self._queue) - self._reserved
            if free <= 0:
                return
            self._reserved += free
            first = self._lane_first()
        claimed = []
        try:
            now = deps.clock.now()
            claimed = deps.cluster.claim_triggers(
                deps.store, deps.owner, free, now=now,
                expires_at=now + deps.config.leases.duration, first=first)
            self._more = len(claimed) == free
        except StoreUnavailable:
            pass  # the store's health reports the outage; the poll comes again
        finally:
            with self._lock:
                self._reserved -= free
        for trigger in claimed:
            self.submit(trigger.id, claimed=trigger)

    def _lane_first(self) -> str | None:
        """The lane a pull claims from first (under the lock). Notifications, but
        one pull in ``notification_share + 1`` takes ordinary triggers first, so they always
        move."""
        share = self._queue.share
        if not share:
            return None
        self._pulls = (self._pulls + 1) % (share + 1)
        return ORDINARY_LANE if self._pulls == 0 else NOTIFICATION_LANE

    def _dispatch(self, message: ProcessTrigger) -> None:
        with self._lock:
            if not self._idle:
                work = self._in_hand.get(message.trigger_id)
                self._queue.push(message, work.lane if work is not None else ORDINARY_LANE,
                                 self._deps.clock.now())
                self._deps.metrics.lanes("triggers", self._queue.lengths())
                return
            actor = self._idle.pop()
        self._deps.activity.tell(actor, message)

    def work(self, message: ProcessTrigger) -> TriggerWork | None:
        """The work ``message`` is about; None when it was given up meanwhile."""
        with self._lock:
            work = self._in_hand.get(message.trigger_id)
            return work if work is not None and work.token == message.token else None

    def processed(self, work: TriggerWork | None, *, retry: bool) -> None:
        """The trigger is done here, or waits for its retry after a backoff."""
        if work is None:
            return
        with self._lock:
            if self._in_hand.get(work.trigger_id) is not work:
                return  # replaced by the sweeper meanwhile
            if not retry or self._deps.stopping.is_set():
                del self._in_hand[work.trigger_id]
                return
            work.attempts += 1
            work.hold.progress_at = None  # waiting, not hung: its lease is renewed meanwhile
        due = self._deps.clock.now() + store_fault_backoff(work.attempts)
        message = ProcessTrigger(work.trigger_id, work.recovering, work.token)
        self._deps.scheduler.call_at(due, lambda: self._dispatch(message), label="retry")

    def next_for(self, actor: pykka.ActorRef) -> ProcessTrigger | None:
        """The queued trigger ``actor`` should take now, or None (and it is idle again)."""
        with self._lock:
            if self._queue:
                following = self._queue.pop()
                self._deps.metrics.lanes("triggers", self._queue.lengths())
                return following
            self._idle.append(actor)
            return None

    def heartbeat(self) -> None:
        """Renew the leases of the triggers processed here, then resume the stale ones:
        unheld, or held by an actor that showed no progress for a whole lease."""
        deps = self._deps
        now, duration = deps.clock.now(), deps.config.leases.duration
        with self._lock:
            alive = {work.trigger_id: work for work in self._in_hand.values()
                     if work.hold.lease is not None and not work.hold.hung(now, duration)}
        held = deps.store.triggers.renew(deps.owner, list(alive), now + duration)
        for trigger_id, work in alive.items():
            if trigger_id in held:
                work.hold.valid_until = now + duration
        # What no process has in hand is left to the claim below, on replicas.
        for trigger_id in deps.cluster.resumes(deps.store.triggers.stale(now), self._in_hand):
            self._resume(trigger_id, now, duration)
        self.work_arrived()

    def _resume(self, trigger_id: int, now: datetime, duration: timedelta) -> None:
        with self._lock:
            work = self._in_hand.get(trigger_id)
            if work is not None and not work.hold.hung(now, duration):
                return  # in hand and healthy; its lease is renewed on the next beat
            if work is not None:
                del self._in_hand[trigger_id]  # the hung actor's writes are refused now
        log.warning("resuming a trigger that nobody processes", extra={
            "trigger_id": trigger_id,
            "reason": "its actor showed no progress" if work else "its lease expired"})
        self.reclaimed_total += 1
        self.submit(trigger_id)

    def stop(self) -> list[pykka.Future]:
        """Tell every trigger actor to stop; the futures say when they have."""
        return [actor.stop(block=False) for actor in self._actors]

    def status(self) -> dict:
        now = self._deps.clock.now()
        with self._lock:
            idle, queued, lanes = len(self._idle), len(self._queue), self._queue.views(now)
            leases = [{"trigger_id": work.trigger_id, "epoch": work.hold.lease.epoch,
                       "expires_at": format_time(work.hold.valid_until)}
                      for work in self._in_hand.values() if work.hold.lease is not None]
            retrying = sum(1 for work in self._in_hand.values() if work.attempts)
        return {"actors": len(self._actors), "busy": len(self._actors) - idle,
                "queue_length": queued, "lanes": lanes, "retrying": retrying, "leases": leases,
                "reclaimed_total": self.reclaimed_total,
                "waiting_for_intake": self._deps.intake.waiting,
                "alive": sum(1 for actor in self._actors if actor.is_alive())}
