"""Execution workers: the pool's slots as actors, each driving one execution at a time from
its checkpoint to a terminal state or a park.

A worker is a long-lived actor (one thread, started once): the pool hands it an execution
(``RunExecution``) when one of its slots is free, and it runs it as an ``ExecutionRun`` until
that run ends, parks or is interrupted, reports so and waits for the next. The pool starts a
worker only when none is free, so there are as many as executions ever ran at once: at most
``execution_slots``, plus one for each worker the pool gave up on as hung (it stops once its
call returns). A parked execution has none. A run takes its behavior steps one after another
while nothing waits in the worker's inbox; when something does (a cancel, the worker's stop),
the next step is a message of its own (``NextStep``, naming the run), so what was told
meanwhile is seen before it, and a message about an earlier run is ignored. Everything a run
reports goes up to the pool as a ``tell``; a crash is caught here and reported, never left to
kill the worker silently.

A run holds no database connection of its own: each checkpoint is one short unit of work on a
pooled connection, so none is held across a Jira, Lark, Oncall or Core call. When the runtime
stops, it starts no further step, and a step whose integration call was abandoned ends where
it is: the action stays ``executing`` and resumes after the restart.

A run claims the execution's lease before its first write and works through a ``Hold``
(actors/leases.py): its checkpoints are fenced by the lease, and its ports refuse to call out
once the lease is lost. A step that meets a database failure or a lost lease is interrupted:
nothing of it past the last saved checkpoint counts, and the pool tries it again later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pykka

from ticket_dispatcher.actors.activity import TrackedActor
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.first_read import IssueRead
from ticket_dispatcher.actors.leases import FencedCheckpoints, Hold, Position, guarded_ports
from ticket_dispatcher.actors.messages import (
    Cancel,
    Cancellation,
    CancelOutcome,
    Crashed,
    Finished,
    Interrupted,
    NextStep,
    Parked,
    RunExecution,
)
from ticket_dispatcher.actors.recent_reads import RecentReads
from ticket_dispatcher.domain.actions.notification_watch import ack_watch
from ticket_dispatcher.domain.behavior import Behavior, StepKind
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    Execution,
    ExecutionStatus,
    FailureCode,
    RuleOutcome,
)
from ticket_dispatcher.domain.matching import (
    in_notification_lane,
    is_notification_policy,
    outside_trigger,
)
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.domain.retries import backoff, next_try, spent
from ticket_dispatcher.errors import (
    CallAbandoned,
    Conflict,
    DispatcherError,
    LeaseLost,
    NotFound,
    StoreUnavailable,
    fault_of,
)
from ticket_dispatcher.integrations.call_policy import calls_first, first_calls
from ticket_dispatcher.store.database import write_lock
from ticket_dispatcher.timeutil import format_time

log = logging.getLogger(__name__)

def load_backoff(attempt: int) -> timedelta:
    """The wait before the next load of the issue and policy: 5 s, doubling up to 5 min (the
    backoff of passing faults, which a ``Retry-After`` may lengthen)."""
    return backoff(attempt)


class ExecutionWorker(TrackedActor):
    """One execution slot: runs the executions the pool hands it, one at a time."""

    def __init__(self, deps: RuntimeDeps, pool: pykka.ActorRef):
        super().__init__(deps.activity)
        self._deps = deps
        self._pool = pool
        self._current: ExecutionRun | None = None

    def handle(self, message: RunExecution | Cancel | NextStep) -> None:
        try:
            self._handle(message)
        except Exception as exc:  # past the run's own guard: the run crashed, the worker goes on
            self._crashed(message, exc)

    def _handle(self, message: RunExecution | Cancel | NextStep) -> None:
        if isinstance(message, RunExecution):
            self._current = begun = ExecutionRun(message.execution_id, self._deps, self._pool,
                                                 message.hold, message.run, message.first_read)
            if message.cancel is not None:  # seen before its first step
                begun.cancel(message.cancel)
            self._step(begun)
        elif (current := self._current) is None or current.run != message.run:
            return  # about an earlier run, which has ended
        elif isinstance(message, Cancel):
            current.cancel(message.cancellation)
        elif isinstance(message, NextStep):
            self._step(current)

    def _step(self, current: ExecutionRun) -> None:
        current.step()
        while current.advanced:
            if not self.actor_inbox.empty():  # a cancel or a stop first: step after it
                self._deps.activity.tell(self.actor_ref, NextStep(current.run))
                break
            current.step()
        if current.over:
            self._current = None  # free for the pool's next execution

    def _crashed(self, message: object, exc: Exception) -> None:
        """Report the run crashed, as its guard would have: its slot is freed and the
        supervisor restarts it from its checkpoint."""
        current, self._current = self._current, None
        if current is not None:
            current.done_with_issue()
            execution_id, run = current.execution_id, current.run
        elif isinstance(message, RunExecution):  # it failed to begin
            execution_id, run = message.execution_id, message.run
        else:
            raise exc
        if self._deps.stopping.is_set():
            return
        log.exception("execution actor crashed", extra={"execution_id": execution_id})
        self._deps.activity.tell(self._pool, Crashed(execution_id,
                                                     f"{type(exc).__name__}: {exc}", run))

    def on_stop(self) -> None:
        if self._current is not None:
            self._current.done_with_issue()
        super().on_stop()

    def on_failure(self, *exc_info: Any) -> None:
        if self._current is not None:
            self._current.done_with_issue()
        super().on_failure(*exc_info)


class ExecutionRun:
    """One run of an execution on a worker: from its claim to its report (``over`` then)."""

    def __init__(self, execution_id: int, deps: RuntimeDeps, pool: pykka.ActorRef,
                 hold: Hold, run: int,
                 first_read: IssueRead | None = None):
        self.execution_id = execution_id
        self.run = run  # which of the pool's starts of this execution this is
        self.over = False  # reported: the worker is free
        self.advanced = False  # the last step advanced: the run has a next one to take
        self._deps = deps
        self._pool = pool
        self._hold = hold  # shared with the pool, whose heartbeat renews it
        self._checkpoints = FencedCheckpoints(deps.store.executions, self._hold, deps.clock.now)
        guarded = guarded_ports(deps.ports, self._hold, deps.clock.now)
        # the run's reads of its issue, given again while nothing can have changed it
        self._jira = RecentReads(
            guarded.jira, deps.issue_activity, monotonic=deps.clock.monotonic,
            now=deps.clock.now,
            unseen=lambda read: deps.cluster.written_unseen(deps.store, read, execution_id))
        self._behavior = deps.behavior(self._checkpoints,
                                       replace(guarded, jira=self._jira, reads=self._jira))
        self._execution: Execution | None = None
        self._issue: Issue | None = None
        self._cancellation: Cancellation | None = None
        # what the load for the next step answered (every wake reloads the issue): the issue,
        # or the error it failed with when the step goes on with a stand-in
        self._loaded: Issue | DispatcherError | None = None
        self._standing_in = False  # ``_issue`` is a stand-in, not what Jira answered
        # The trigger's read of the issue, for a first run (actors/first_read.py), and the
        # issue this run counts as at work on from its claim until it reports.
        self._first_read = first_read
        self._at_work_on: str | None = None

    def cancel(self, cancellation: Cancellation) -> None:
        """A flag for the next step."""
        self._cancellation = cancellation

    def step(self) -> None:
        self.advanced = False
        # a notification's calls go first under a Jira budget, its load's included (``_load``
        # sets it once the execution is read)
        with calls_first(self._execution is not None
                         and in_notification_lane(self._execution)):
            self._guarded(self._step)

    def done_with_issue(self) -> None:
        if self._at_work_on is not None:
            self._deps.issue_activity.end(self._at_work_on)
            self._at_work_on = None

    def _guarded(self, work: Callable[[], None]) -> None:
        try:
            work()
        except CallAbandoned:  # shutting down: the checkpoint stays as it is
            log.info("execution stopped mid-step for shutdown; it resumes after the restart",
                     extra={"execution_id": self.execution_id})
        except (StoreUnavailable, LeaseLost) as exc:
            if self._deps.stopping.is_set():
                return
            self._interrupted(exc)
        except Exception as exc:  # report up: the supervisor decides on a restart
            if self._deps.stopping.is_set():  # e.g. the pool or the store already closed
                log.info("execution stopped for shutdown", extra={
                    "execution_id": self.execution_id, "reason": type(exc).__name__})
                return
            log.exception("execution actor crashed", extra={"execution_id": self.execution_id})
            self._report(Crashed(self.execution_id, f"{type(exc).__name__}: {exc}", self.run))

    def _interrupted(self, exc: StoreUnavailable | LeaseLost) -> None:
        """Stop where the last checkpoint is: the pool resumes from it after a backoff. A
        database failure is the store health's to log (once per outage), not each step's."""
        if isinstance(exc, LeaseLost):
            self._hold.lost = True
            log.warning("execution lease lost; stopping before any further call", extra={
                "execution_id": self.execution_id, "reason": exc.message})
        else:
            log.debug("execution step interrupted by the database", extra={
                "execution_id": self.execution_id, "reason": exc.kind})
        self._report(Interrupted(self.execution_id, f"{type(exc).__name__}: {exc.message}",
                                 self.run))

    def _report(self, message: Crashed | Interrupted | Finished | Parked) -> None:
        """The run's last act: it is done with its issue (every call it made has ended), then
        the pool hears how it ended and may hand the worker its next execution."""
        self.done_with_issue()
        self.over = True
        self._deps.activity.tell(self._pool, message)

    def _step(self) -> None:
        if self._deps.stopping.is_set():
            return  # the shutdown stops the worker next; the store has the last checkpoint
        if self._cancellation is not None:
            return self._cancel(self._cancellation)
        if self._execution is None and not self._load():
            return
        execution = self._execution
        assert execution is not None, "loaded by this step or an earlier one"
        try:
            if self._standing_in and self._behavior.needs_live_issue(execution):
                # the step after an urgent or page that went on without the issue needs it (a
                # rule to evaluate, the escalation): read it again, or wait for the load's retry
                self._behavior.flush()
                if not self._read_issue(execution):
                    return
            loaded, self._loaded = self._loaded, None
            assert self._issue is not None, "read with the execution, or its stand-in"
            outcome = self._behavior.step(execution, self._issue, loaded=loaded)
        except Conflict:  # already terminal in the store (cancelled, or ended elsewhere)
            return self._report(Finished(self.execution_id, self.run))
        if outcome.kind is StepKind.ADVANCED:
            self._hold.position = Position(execution.issue_key, execution.policy_id,
                                           *_position(execution))
            self.advanced = True
        elif outcome.kind is StepKind.PARKED:
            assert outcome.wake_at is not None, "a parked step says when it wakes"
            self._report(Parked(self.execution_id, outcome.wake_at, self.run,
                                watched=ack_watch(execution) is not None))
        else:
            self._report(Finished(self.execution_id, self.run))

    def _cancel(self, cancellation: Cancellation) -> None:
        """End the execution as cancelled from its last checkpoint, without loading the issue:
        a cancel must work while Jira does not."""
        execution = self._execution or self._deps.store.executions.get(self.execution_id)
        if not execution.status.terminal:
            try:
                abort_cancelled(self._deps, self._behavior, execution, cancellation,
                                CancelOutcome.SIGNALLED)
            except Conflict:
                pass  # it ended elsewhere meanwhile
        self._report(Finished(self.execution_id, self.run))

    def _load(self) -> bool:
        """Claim the execution, then reload its checkpoint, the policy and the live issue, or
        for a first run the issue its trigger has just read (docs/design.md, "The life of an
        execution", "The freshness rule")."""
        deps = self._deps
        store, now = deps.store, deps.clock.now()
        claimed = store.executions.claim_loaded(self.execution_id, owner=deps.owner, now=now,
                                                expires_at=now + deps.config.leases.duration)
        if claimed is None:  # ended, or another live holder has it
            log.info("execution not claimed: it ended or another holder has it",
                     extra={"execution_id": self.execution_id})
            self._report(Finished(self.execution_id, self.run))
            return False
        lease, execution = claimed
        first_calls.set(in_notification_lane(execution))  # for this step (``step``)
        self._hold.claimed(lease, now, deps.config.leases.duration)
        read = self._begin_work(execution)
        if not store.policies.exists(execution.policy_id):
            return self._load_failed(execution, FailureCode.POLICY_LOAD_FAILED,
                                     f"policy {execution.policy_id} not found")
        if read is not None:  # the trigger's read, still as this process left the issue
            self._issue, self._loaded, self._standing_in = read, read, False
        elif not self._read_issue(execution):
            return False
        if self._left_trigger(execution):
            return False
        self._execution = execution
        return True

    def _begin_work(self, execution: Execution) -> Issue | None:
        """Count this actor at work on the issue before any call; the issue its trigger
        read when this first run may start from it (actors/first_read.py), else None."""
        read, self._first_read = self._first_read, None
        if read is not None and (execution.status is not ExecutionStatus.CREATED
                                 or execution.trigger_id != read.trigger_id):
            read = None  # not the first run of an execution that trigger created
        if read is not None and self._deps.cluster.written_unseen(self._deps.store, read,
                                                                   execution.id):
            read = None
        self._at_work_on = execution.issue_key
        issue = self._deps.issue_activity.begin(execution.issue_key, read)
        if issue is not None and read is not None:
            self._jira.keep(read)  # and the run's next reads, while it stays fresh
        return issue

    def _left_trigger(self, execution: Execution) -> bool:
        """An ordinary execution about to start whose issue fell outside its policy's trigger
        since the trigger matched (another execution removed the label it requires, or the
        issue moved): it ends, succeeded, having done nothing. Two triggers of one issue
        processed side by side would otherwise both assign it, the second after the first
        removed ``auto-dispatch``. A trigger that named its policy matched no filter: its
        execution starts whatever the issue holds."""
        if execution.status is not ExecutionStatus.CREATED or execution.dry_run:
            return False  # (a created execution never stands in: no page has run yet)
        policies = self._deps.store.policies
        # A replica that has not matched a trigger since it started has loaded no version:
        # it reads this one rather than let the check pass unmade.
        try:
            policy = policies.known(execution.policy_id) or policies.get(execution.policy_id)
        except NotFound:
            return False  # deleted meanwhile: the step finds it gone
        if is_notification_policy(policy):
            return False
        assert self._issue is not None, "read by _load before this check"
        reason = outside_trigger(policy, self._issue)
        if not reason or self._deps.store.triggers.get(execution.trigger_id).policy_id:
            return False  # inside, or a trigger that named its policy: no filter matched it
        log.info("execution not started: the issue left the policy's trigger", extra={
            "execution_id": execution.id, "issue_key": execution.issue_key, "reason": reason})
        try:
            self._behavior.outside_trigger(execution, reason)
        except Conflict:
            pass  # it ended elsewhere meanwhile
        self._report(Finished(self.execution_id, self.run))
        return True

    def _read_issue(self, execution: Execution) -> bool:
        """The live issue for the next step; False when the step waits for the load's retry
        (parked). When Jira is down, an urgent or a page goes on with a stand-in: its guard
        takes the failed read for no verdict, and the phone channel is not held up by Jira
        (docs/design.md, "The guard")."""
        deps = self._deps
        try:
            self._hold.check(deps.clock.now())
            issue = self._jira.load_issue(execution.issue_key)
        except (LeaseLost, StoreUnavailable):
            raise
        except DispatcherError as exc:
            stand_in = self._behavior.stand_in(execution) if _unavailable(exc) else None
            if stand_in is None:
                return self._load_failed(execution, FailureCode.ISSUE_LOAD_FAILED, exc.message,
                                         exc)
            log.warning("issue could not be loaded; the notification goes on without it", extra={
                "execution_id": execution.id, "issue_key": execution.issue_key,
                "reason": exc.message})
            self._issue, self._loaded, self._standing_in = stand_in, exc, True
        else:
            self._issue, self._loaded, self._standing_in = issue, issue, False
        if execution.load_attempts:
            deps.store.executions.reset_load_attempts(execution.id)
        return True

    def _load_failed(self, execution: Execution, code: FailureCode, reason: str,
                     error: DispatcherError | None = None) -> bool:
        """Park until the load's next try, or fail: a passing fault of Jira (no answer, 429,
        5xx) is tried again within the retry budget (domain/retries.py), anything else
        ``execution_load_retries`` times."""
        deps = self._deps
        now = deps.clock.now()
        attempts, since = deps.store.executions.record_load_failure(execution.id, now)
        fault = fault_of(error) if error is not None else None
        if fault is not None and fault.passing:
            budget = deps.config.transient_retry_budget
            due = next_try(fault.retry_after, attempts, since or now, now, budget)
            if due is None:
                self._behavior.abort(execution, code, spent(reason, attempts, since or now,
                                                            now, budget))
                self._report(Finished(self.execution_id, self.run))
                return False
            deps.metrics.passing_fault_retry("execution_load", fault.cause_label)
            return self._park_load(execution, reason, attempts, due, (since or now) + budget)
        retries = deps.config.execution_load_retries
        if attempts > retries:
            self._behavior.abort(execution, code, f"{reason} (after {retries} retries)")
            self._report(Finished(self.execution_id, self.run))
            return False
        return self._park_load(execution, reason, attempts, now + load_backoff(attempts), None)

    def _park_load(self, execution: Execution, reason: str, attempts: int,
                   wake_at: datetime, deadline: datetime | None) -> bool:
        """Park until ``wake_at``, the load's next try; ``deadline``: the end of the retry
        budget (None: the retries are counted, not timed)."""
        fields = {"execution_id": execution.id, "issue_key": execution.issue_key,
                  "reason": reason, "attempt": attempts, "next_try": format_time(wake_at)}
        if deadline is not None:
            fields["deadline"] = format_time(deadline)
        log.warning("execution load failed; retrying", extra=fields)
        execution.wake_at = wake_at
        self._checkpoints.save(execution, [], parked=True)
        self._report(Parked(self.execution_id, wake_at, self.run))
        return False


def _unavailable(exc: DispatcherError) -> bool:
    """Jira failing for now (no answer, 429, 5xx), not answering that the issue is gone or
    out of reach (404, 403): only then does a notification go on without the issue."""
    return fault_of(exc).passing


def _position(execution: Execution) -> tuple[str, str]:
    """The rule and action the execution is at, for the admin view."""
    if execution.status is ExecutionStatus.CREATED:
        return "", ""
    for rule in execution.rule_executions:
        if rule.outcome is RuleOutcome.NOT_EVALUATED:
            return rule.name, ""
        for action in rule.action_executions:
            if action.status in (ActionStatus.PENDING, ActionStatus.EXECUTING):
                return rule.name, f"{action.index}:{action.type}"
    return "", ""


def abort_cancelled(deps: RuntimeDeps, behavior: Behavior, execution: Execution,
                    cancellation: Cancellation, outcome: CancelOutcome) -> None:
    """End ``execution`` as cancelled and record who cancelled it, in one transaction: the
    audit trail never shows a cancel that did not happen, nor misses one that did."""
    store = deps.store
    with write_lock(store.db):
        behavior.abort(execution, FailureCode.CANCELLED, cancellation.reason)
        store.audit.record(cancellation.by, "execution.cancelled", "execution",
                           str(execution.id), after={"outcome": outcome.value},
                           now=deps.clock.now())
