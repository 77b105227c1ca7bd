"""The execution state machine (docs/design.md, "The life of an execution").

``Behavior.step`` advances an execution by one checkpoint — a status move, one rule evaluation or
one action's plan/execute — and persists it through the ``Checkpoints`` port before returning, so
a crash between any two steps resumes from the last saved state. No transaction is held across an
action's external calls.

With ``merge`` (a live execution actor's behavior), a checkpoint that guards nothing is not
written at once: the status move, a rule's outcome, an action started, planned or done wait in
memory and are written together, in one transaction, just before the next call through a port
(any of them but the engineers': a Jira read, a page) or with the next checkpoint that must
be durable at once (an action's plan, an action's own ``run.checkpoint`` before a call it must
never repeat, a park, the terminal state). Nothing leaves the process while a change is
unsaved, so a crash loses only changes that nothing outside depended on, and the execution
resumes from its last saved checkpoint and does them again (docs/design.md, "Checkpoints and
at-most-once").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from ticket_dispatcher.domain.actions.base import ActionError, ActionRegistry, ActionRun, ResultKind
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.conditions import ConditionError, evaluate_explained
from ticket_dispatcher.domain.execution import (
    ActionExecution,
    ActionStatus,
    Execution,
    ExecutionStatus,
    FailureCode,
    RuleExecution,
    RuleOutcome,
)
from ticket_dispatcher.domain.model import Issue
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.errors import DispatcherError
from ticket_dispatcher.timeutil import format_time


class Checkpoints(Protocol):
    def save(self, execution: Execution, rules: list[RuleExecution], *,
             parked: bool = False) -> None:
        """Persist the execution row and these rule executions in one short transaction;
        ``parked``: the execution waits until its ``wake_at`` and holds nothing meanwhile.

        Raises ``errors.Conflict`` when the execution is already terminal in the store (for
        example cancelled), so the caller stops driving it; ``errors.LeaseLost`` when another
        holder took it over; ``errors.StoreUnavailable`` when the database failed (the step is
        retried from the last checkpoint that was saved).
        """


class StepKind(StrEnum):
    ADVANCED = "advanced"  # saved one stage; call step again
    PARKED = "parked"  # waiting until ``wake_at``; release the slot
    FINISHED = "finished"  # terminal


@dataclass(frozen=True)
class StepOutcome:
    """What one ``Behavior.step`` came to, for the actor that drives the execution."""

    kind: StepKind
    wake_at: datetime | None = None


ADVANCED = StepOutcome(StepKind.ADVANCED)
FINISHED = StepOutcome(StepKind.FINISHED)


class Behavior:
    def __init__(self, registry: ActionRegistry, checkpoints: Checkpoints,
                 now: Callable[[], datetime], ports: Ports,
                 on_finished: Callable[[Execution], None] | None = None, *,
                 merge: bool = False):
        """``on_finished`` is told once per execution, right after the save that made it
        terminal (metrics and the finish log line); a save refused because the execution was
        already terminal never tells it again. ``merge``: checkpoints that guard nothing are
        written with the next one that does (the module's docstring); one execution per
        behavior."""
        self._registry = registry
        self._checkpoints = checkpoints
        self._on_finished = on_finished
        self._now = now  # the runtime's Clock.now; domain/ imports nothing from actors/
        self._merge = merge
        self._unsaved: Execution | None = None  # changed since the last write (merge)
        self._unsaved_rules: dict[int, RuleExecution] = {}  # by sequence
        self._write_error: Exception | None = None  # a deferred write that failed
        self._ports = _saving_first(ports, self.flush) if merge else ports

    def step(self, execution: Execution, issue: Issue, *,
             loaded: Issue | DispatcherError | None = None) -> StepOutcome:
        """One stage. ``loaded``: what Jira answered when the issue was loaded just before
        this step, so the step's first fresh read uses it instead of asking again: ``issue``
        itself, or the error it failed with, ``issue`` then being the ``stand_in``."""
        if execution.status.terminal:
            return FINISHED
        if execution.status is ExecutionStatus.CREATED:
            execution.status = ExecutionStatus.EXECUTING
            self._save(execution, [])
            return ADVANCED
        rule, action = _next_stage(execution)
        if rule is None:
            return self._finish(execution)
        if action is None:
            return self._evaluate(execution, rule, issue)
        return self._run_action(execution, rule, action, issue, loaded)

    def stand_in(self, execution: Execution) -> Issue | None:
        """The issue the next step goes on with while Jira cannot be read, or None when it
        must wait for Jira. Only an action that reads Jira itself before it decides (its
        executor's ``stand_in``) goes on; a rule to evaluate needs the live issue."""
        if execution.status is not ExecutionStatus.EXECUTING:
            return None
        _, action = _next_stage(execution)
        return self._stand_in(execution, action)

    def needs_live_issue(self, execution: Execution) -> bool:
        """Whether the next step needs what Jira answers now: a rule to evaluate, or an action
        with no ``stand_in``; not the end, nor an urgent or a page."""
        if execution.status.terminal:
            return False
        rule, action = _next_stage(execution)
        if rule is None:
            return False
        return action is None or self._stand_in(execution, action) is None

    def _stand_in(self, execution: Execution, action: ActionExecution | None) -> Issue | None:
        stand_in = getattr(self._registry.get(action.type), "stand_in", None) \
            if action is not None else None
        return stand_in(execution) if stand_in is not None else None

    def outside_trigger(self, execution: Execution, reason: str) -> StepOutcome:
        """End, before its first rule, an execution whose issue fell outside its policy's
        trigger since the trigger matched (``reason``): every rule not matched, nothing done,
        succeeded."""
        for rule in execution.rule_executions:
            if rule.outcome is RuleOutcome.NOT_EVALUATED:
                rule.outcome = RuleOutcome.NOT_MATCHED
                rule.evaluation = {"matched": False, "reason": reason,
                                   "evaluated_at": format_time(self._now())}
        execution.status = ExecutionStatus.EXECUTING
        return self._finish(execution)

    def abort(self, execution: Execution, code: FailureCode, reason: str) -> None:
        """End from outside the behavior: an operator cancel, a load that kept
        failing, or a runtime that kept crashing. Unfinished actions are skipped."""
        for rule in execution.rule_executions:
            for action in rule.action_executions:
                if action.status is ActionStatus.EXECUTING:
                    action.status = ActionStatus.SKIPPED
                    action.error = f"{code.value} while executing"
                    action.finished_at = self._now()
        self._fail(execution, code, reason)

    # -- stages ---------------------------------------------------------------------------

    def _evaluate(self, execution: Execution, rule: RuleExecution, issue: Issue) -> StepOutcome:
        try:
            matched, reason, tree = evaluate_explained(rule.when, issue,
                                                       self.business_now(execution))
        except ConditionError as exc:
            return self._fail(execution, FailureCode.CONDITION_ERROR,
                              f"rule {rule.name!r}: {exc}")
        rule.outcome = RuleOutcome.MATCHED if matched else RuleOutcome.NOT_MATCHED
        # ``tree``: every leaf with the issue's value beside the expected one, for a reader
        # (the console); ``reason`` stays the one line the API has always given.
        rule.evaluation = {"matched": matched, "reason": reason,
                           "evaluated_at": format_time(self._now()), "tree": tree}
        if not matched:  # its actions will never run
            _skip_pending([rule])
        self._save(execution, [rule])
        return ADVANCED

    def _run_action(self, execution: Execution, rule: RuleExecution, action: ActionExecution,
                    issue: Issue, loaded: Issue | DispatcherError | None) -> StepOutcome:
        if action.status is ActionStatus.PENDING:
            action.status = ActionStatus.EXECUTING
            action.started_at = self._now()
            self._save(execution, [rule])
        executor = self._registry.get(action.type)
        if executor is None:
            return self._fail_action(execution, rule, action, FailureCode.PLAN_FAILED,
                                     f"no executor for action type {action.type!r}")
        run = ActionRun(execution=execution, issue=issue, config=action.config,
                        context=action.context, now=self.business_now(execution),
                        ports=self._ports,
                        checkpoint=lambda: self._save(execution, [rule], durable=True),
                        live_issue=loaded)
        if action.planned_at is None:
            try:
                executor.plan(run)
            except ActionError as exc:
                return self._fail_action(execution, rule, action,
                                         exc.code or FailureCode.PLAN_FAILED, exc.message)
            action.planned_at = self._now()
            # Durable: a plan may have taken shared state (a round-robin turn), and a crash
            # in execute must resume from it, never plan again.
            self._save(execution, [rule], durable=True)
        if execution.dry_run:  # dry-run plans only
            return self._complete_action(execution, rule, action, ResultKind.CONTINUE)
        try:
            result = executor.execute(run)
        except ActionError as exc:
            return self._fail_action(execution, rule, action,
                                     exc.code or FailureCode.EXECUTE_FAILED, exc.message)
        if result.kind is ResultKind.PARK:
            execution.wake_at = result.until
            self._save(execution, [rule], parked=True)
            return StepOutcome(StepKind.PARKED, result.until)
        return self._complete_action(execution, rule, action, result.kind, result.status,
                                     result.error)

    def _complete_action(self, execution: Execution, rule: RuleExecution,
                         action: ActionExecution, kind: ResultKind,
                         status: ActionStatus = ActionStatus.SUCCEEDED,
                         error: str = "") -> StepOutcome:
        """The action done: ``status`` is how it ended (a business failure such as a page
        that was not sent is ``failed`` with its ``error``, and the execution goes on by
        ``kind`` all the same); only an ``ActionError`` fails the execution."""
        action.status = status
        action.error = error
        action.result = kind.value
        action.finished_at = self._now()
        execution.wake_at = None
        if kind is ResultKind.TERMINATE:
            return self._finish(execution)
        self._save(execution, [rule])
        return ADVANCED

    def _fail_action(self, execution: Execution, rule: RuleExecution, action: ActionExecution,
                     code: FailureCode, message: str) -> StepOutcome:
        action.status = ActionStatus.FAILED
        action.error = message
        action.finished_at = self._now()
        return self._fail(execution, code, f"rule {rule.name!r} action {action.index} "
                                           f"({action.type}): {message}")

    def _finish(self, execution: Execution) -> StepOutcome:
        execution.status = ExecutionStatus.SUCCEEDED
        return self._close(execution)

    def _fail(self, execution: Execution, code: FailureCode, reason: str) -> StepOutcome:
        execution.status = ExecutionStatus.FAILED
        execution.failure_code = code.value
        execution.failure_reason = reason
        return self._close(execution)

    def _close(self, execution: Execution) -> StepOutcome:
        """Terminal: skip what never ran; unvisited rules stay ``not_evaluated``."""
        _skip_pending(execution.rule_executions)
        execution.completed_at = self._now()
        execution.wake_at = None
        execution.live_lock_key = None
        self._save(execution, execution.rule_executions)
        if self._on_finished is not None:
            self._on_finished(execution)
        return FINISHED

    def business_now(self, execution: Execution) -> datetime:
        """A dry-run's frozen time, else the clock."""
        if execution.dry_run and execution.business_now is not None:
            return execution.business_now
        return self._now()

    def flush(self) -> None:
        """Write what the steps changed since the last write, if anything (``merge``). A
        failure is raised here and again by every later write of this behavior: a change that
        could not be saved must not be taken for saved because an action caught the error."""
        if self._unsaved is not None:
            try:
                self._write(self._unsaved, [])
            except Exception as exc:
                self._write_error = exc
                raise

    def _save(self, execution: Execution, rules: list[RuleExecution], *,
              parked: bool = False, durable: bool = False) -> None:
        execution.updated_at = self._now()
        if self._merge and not (parked or durable or execution.status.terminal):
            self._unsaved = execution
            self._unsaved_rules.update((rule.sequence, rule) for rule in rules)
            return
        self._write(execution, rules, parked=parked)

    def _write(self, execution: Execution, rules: list[RuleExecution], *,
               parked: bool = False) -> None:
        if self._write_error is not None:
            raise self._write_error
        if self._unsaved_rules:
            merged = self._unsaved_rules | {rule.sequence: rule for rule in rules}
            rules = [merged[sequence] for sequence in sorted(merged)]
        if parked:
            self._checkpoints.save(execution, rules, parked=True)
        else:
            self._checkpoints.save(execution, rules)
        self._unsaved = None
        self._unsaved_rules.clear()


class _SavingFirst:
    """A port whose every call first writes the behavior's unsaved changes."""

    def __init__(self, port: object, flush: Callable[[], None]):
        self._port = port
        self._flush = flush

    def __getattr__(self, name: str) -> object:
        attribute = getattr(self._port, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self._flush()
            return attribute(*args, **kwargs)

        return call


# Ports called without the unsaved changes written first: the call counter (metrics leave
# nothing outside the process), and the engineers (their round-robin turn is written in the
# same database, and a crash before the plan's durable checkpoint plans again, and takes a
# turn again, whether the changes before the turn were saved or not).
_UNGUARDED_PORTS = ("calls", "engineers")


def _saving_first(ports: Ports, flush: Callable[[], None]) -> Ports:
    """``ports`` with every port but ``_UNGUARDED_PORTS`` behind ``flush``."""
    # A _SavingFirst forwards every attribute to the port it wraps, so it stands in for whichever
    # port that is; no static type says so, hence Any.
    guarded: dict[str, Any] = {f.name: _SavingFirst(getattr(ports, f.name), flush)
                               for f in fields(ports) if f.name not in _UNGUARDED_PORTS}
    return replace(ports, **guarded)


def _next_stage(execution: Execution) -> tuple[RuleExecution | None, ActionExecution | None]:
    """Where an executing execution is: the rule to evaluate (no action), the rule and the
    action to run, or nothing left (the end)."""
    for rule in execution.rule_executions:
        if rule.outcome is RuleOutcome.NOT_EVALUATED:
            return rule, None
        if rule.outcome is RuleOutcome.NOT_MATCHED:
            continue
        action = _next_action(rule)
        if action is not None:
            return rule, action
        if rule.on_success is OnSuccess.TERMINATE:
            break
    return None, None


def _next_action(rule: RuleExecution) -> ActionExecution | None:
    """The action to run now: one left ``executing`` by a park or a restart, else the next
    pending one (re-run in place, never a duplicate record)."""
    for action in rule.action_executions:
        if action.status in (ActionStatus.EXECUTING, ActionStatus.PENDING):
            return action
    return None


def _pending(rules: list[RuleExecution]) -> Iterator[ActionExecution]:
    for rule in rules:
        for action in rule.action_executions:
            if action.status is ActionStatus.PENDING:
                yield action


def _skip_pending(rules: list[RuleExecution]) -> None:
    for action in _pending(rules):
        action.status = ActionStatus.SKIPPED
