"""TriggerProcessor: one trigger's processing, without an actor (docs/design.md, "The life of
a trigger"): claim it, load its issue, match the policies, have the execution pool create the
executions, offer the shadows; and when a passing fault of Jira puts the trigger off, or a
failure ends it.

The trigger actor (actors/trigger.py) is the thread it runs in; the pool is reached through
the ``create`` it is handed, so a test builds a processor with a store, a clock, fake ports
and a fake pool.

No database connection is held across the issue load or the creation ask: every store call is
its own short unit of work. A trigger whose processing meets a database failure (or an
execution pool that does not answer in time) is never failed for it: it keeps its claim and is
processed again after a backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.first_read import IssueRead
from ticket_dispatcher.actors.leases import Hold
from ticket_dispatcher.actors.messages import CreateExecutions, CreationResult, TriggerOutcome
from ticket_dispatcher.actors.shadow import ShadowRequest
from ticket_dispatcher.domain.execution import Execution, Trigger
from ticket_dispatcher.domain.fanout import new_execution, reserved_role
from ticket_dispatcher.domain.maintenance import Effect, in_effect, project_of
from ticket_dispatcher.domain.matching import (
    NOTIFICATION_LANE,
    ORDINARY_LANE,
    is_notification_policy,
    lane_of,
    match_policies,
)
from ticket_dispatcher.domain.model import DispatchContext, Issue, Policy
from ticket_dispatcher.domain.retries import next_try, spent
from ticket_dispatcher.domain.webhooks import (
    fresh_snapshot,
    required_label,
    role_label_step,
    snapshot_at,
)
from ticket_dispatcher.errors import (
    CallAbandoned,
    DispatcherError,
    Fault,
    LeaseLost,
    NotFound,
    StoreUnavailable,
    fault_of,
)
from ticket_dispatcher.integrations.call_policy import calls_first
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)


class CreationUnanswered(Exception):
    """The execution pool did not answer a creation in time: the trigger keeps its claim and
    is processed again, as after a database failure."""


# How a processor has the execution pool create a trigger's executions: the pool's answer;
# raises ``CallAbandoned`` once the pool has stopped, ``CreationUnanswered`` when it is late.
CreateInPool = Callable[[CreateExecutions], CreationResult]

NOTIFICATIONS_DISABLED = "assignment notification disabled"
INTERNAL_ERROR = "internal error while processing the trigger"


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


@dataclass(frozen=True)
class Matched:
    """The policies a trigger runs, the issue as they matched it, and each family's shadow
    version when read with them (None: not read)."""

    issue: Issue
    policies: list[Policy]
    shadows: dict[str, int] | None


class TriggerProcessor:
    def __init__(self, deps: RuntimeDeps, create: CreateInPool,
                 offer_shadow: Callable[[ShadowRequest], object]):
        """``create``: the execution pool's creation; ``offer_shadow``: the shadow lane's
        offer (actors/shadow.py)."""
        self._deps = deps
        self._create_in_pool = create
        self._offer_shadow = offer_shadow

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
            with calls_first(lane_of(trigger.source) == NOTIFICATION_LANE):
                outcome, reason = self._process(trigger)
        except CallAbandoned:  # shutdown: boot recovery takes it over
            log.info("trigger left processing for shutdown", extra={"trigger_id": trigger.id})
            return None
        except (StoreUnavailable, CreationUnanswered) as exc:
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
            snapshot = self._snapshot(trigger)
            if snapshot is not None:
                issue, since = snapshot
            else:  # known as it is from just before the read
                issue, since = self._deps.ports.jira.load_issue(trigger.issue_key), now
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
        matched = self._policies(trigger, labelled, now)
        if isinstance(matched, tuple):
            return matched
        if not matched.policies:
            store.triggers.complete(trigger.id, [], now, lease=lease)
            return TriggerOutcome.COMPLETED, ""
        held = self._hold(trigger, matched, now)
        if held is not None:
            return held
        return self._create(trigger, matched,
                            IssueRead(matched.issue, trigger.id, read_began, since), now)

    def _hold(self, trigger: Trigger, matched: Matched,
              now: datetime) -> tuple[TriggerOutcome, str] | None:
        """A live trigger in the scope of a current ``hold`` maintenance window goes back to
        ``pending``, carrying the window's id, due again at the end of its occurrence (or at
        once when an operator ends it): then it runs on the issue as it is. None when no
        window holds it."""
        if trigger.dryrun is not None:
            return None  # a dry run writes nothing: nothing to hold back
        windows = self._deps.store.maintenance.active(now)
        ruling = in_effect(windows, project_of(trigger.issue_key), trigger.source,
                           [policy.name for policy in matched.policies], now) \
            if windows else None
        if ruling is None or ruling.effect is not Effect.HOLD:
            return None
        self._deps.store.triggers.hold(trigger.id, ruling.window_id, ruling.until, now,
                                       lease=trigger.lease)
        reason = (f"held by maintenance window {ruling.window_id} until "
                  f"{format_time(ruling.until)}")
        log.info("trigger held by a maintenance window", extra={
            "trigger_id": trigger.id, "issue_key": trigger.issue_key, "source": trigger.source,
            "maintenance_window_id": ruling.window_id, "reason": reason})
        return TriggerOutcome.HELD, reason

    def _snapshot(self, trigger: Trigger) -> tuple[Issue, datetime] | None:
        """The issue of the trigger's webhook delivery and its event's time, on the trigger's
        first try, when it is fresh and carries every field the active policies read
        (domain/webhooks.py, ``fresh_snapshot``), and no execution of the issue, of any
        replica, may have written to it since the event; else None, and the issue is read."""
        at = snapshot_at(trigger.extra_input)
        if at is None or trigger.retry_count:
            return None
        store, config = self._deps.store, self._deps.config.jira
        issue = fresh_snapshot(trigger.extra_input, store.policies.list_active(),
                               self._deps.clock.now(), config.webhook_snapshot_max_age,
                               l2_field_id=config.l2_field_id,
                               severity_field_id=config.severity_field_id)
        if issue is None or store.executions.worked_since(trigger.issue_key, at):
            return None
        return issue, at

    def _policies(self, trigger: Trigger, issue: Issue,
                  now: datetime) -> Matched | tuple[TriggerOutcome, str]:
        """The policies the trigger runs: the one it names, or the active ones that match the
        issue (once a required label is written); or the trigger's outcome when it ends here."""
        if trigger.policy_id is not None:  # explicit: no trigger/status check
            return self._named_policy(trigger, issue, now)
        store = self._deps.store
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
        return Matched(issue, policies, shadows)

    def _named_policy(self, trigger: Trigger, issue: Issue,
                      now: datetime) -> Matched | tuple[TriggerOutcome, str]:
        store, lease = self._deps.store, trigger.lease
        assert trigger.policy_id is not None
        try:
            policy = store.policies.get(trigger.policy_id)
        except NotFound as exc:
            reason = f"policy load failed: {exc.message}"
            store.triggers.fail(trigger.id, reason, now, lease=lease)
            return TriggerOutcome.FAILED, reason
        # The switch is a kill switch: no explicit live run may card or page either.
        if trigger.dryrun is None and not self._deps.config.notifications.enabled \
                and is_notification_policy(policy):
            store.triggers.complete(trigger.id, [], now, reason=NOTIFICATIONS_DISABLED,
                                    lease=lease)
            return TriggerOutcome.COMPLETED, NOTIFICATIONS_DISABLED
        return Matched(issue, [policy], None)

    def _create(self, trigger: Trigger, matched: Matched, read: IssueRead,
                now: datetime) -> tuple[TriggerOutcome, str]:
        """Ask the pool to create the executions of the matched policies, then offer their
        shadows; the creation's outcome and reason."""
        issue, shadows = matched.issue, matched.shadows
        role = reserved_role(trigger.source)
        context = self._deps.store.contexts.find(trigger.issue_key)
        executions = [new_execution(trigger, policy, issue, context, self._deps.registry, now)
                      for policy in matched.policies]
        unshadowed = self._unshadowed(trigger, executions, shadows)
        created: list[int] = []
        try:
            result = self._create_in_pool(CreateExecutions(
                trigger=trigger, executions=executions, explicit=trigger.policy_id is not None,
                reserved_label=role.label if role else None, issue_labels=issue.labels,
                lease=trigger.lease, read=read))
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
            "reason": reason, "attempt": attempts, "next_try": format_time(due),
            "deadline": format_time(since + budget)})
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
            self._offer_shadow(ShadowRequest(
                trigger=trigger, issue=issue, context=context, now=now,
                live_execution_id=live[family], family_id=family, policy_id=policy_id))
