"""The action executor contract and the registry that finds one by type.

An executor is a plain object. ``validate_config`` checks the action's configuration when a
policy is validated (the executor owns its configuration, so a type with no executor cannot be
activated). ``build_context`` snapshots what the action starts from at execution creation,
``plan`` fills the context (no external writes), ``execute`` does the side effect and answers a
result. Each executor keeps its context as one typed state (``state.py``). Expected business
outcomes are results and context fields; only a technical error raises ``ActionError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from ticket_dispatcher.domain.checks import Problems, check_config_object
from ticket_dispatcher.domain.execution import ActionStatus, Execution, FailureCode
from ticket_dispatcher.domain.model import DispatchContext, Issue
from ticket_dispatcher.domain.ports import Ports
from ticket_dispatcher.errors import DispatcherError, Problem


class ResultKind(StrEnum):
    CONTINUE = "continue"
    TERMINATE = "terminate"
    PARK = "park"


@dataclass(frozen=True)
class ActionResult:
    """What ``execute`` came to. ``kind``: whether the execution goes on, ends or waits.
    ``status`` and ``error``: how the action itself ended, which is separate: a page that
    could not be sent is ``failed`` while the workflow goes on to the next attempt (the
    notification actions judge it from their saved state, ``NotificationState.result``)."""

    kind: ResultKind
    until: datetime | None = None  # for PARK: when to look again (an absolute time)
    status: ActionStatus = ActionStatus.SUCCEEDED
    error: str = ""

    def ended(self, status: ActionStatus, error: str = "") -> ActionResult:
        """This result with the action's own status and, when it did not succeed, why."""
        return replace(self, status=status, error=error)

    @classmethod
    def proceed(cls) -> ActionResult:
        return cls(ResultKind.CONTINUE)

    @classmethod
    def terminate(cls) -> ActionResult:
        return cls(ResultKind.TERMINATE)

    @classmethod
    def park(cls, until: datetime) -> ActionResult:
        return cls(ResultKind.PARK, until)


class ActionError(Exception):
    """A technical failure of plan or execute; fails the action and the execution."""

    def __init__(self, message: str, code: FailureCode | None = None):
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass
class ActionRun:
    """Everything one plan/execute call sees. ``context`` is the action's own: its executor
    reads its typed state from it and writes the state back (``ActionState.editing``)."""

    execution: Execution
    issue: Issue
    config: dict
    context: dict
    now: datetime  # business time: frozen for dry-runs, the clock for live runs
    ports: Ports  # what the action may call: Jira, Lark, Oncall, Core, the engineers
    # Persists the execution with this action's context as it is now. An action calls it
    # (through ``ActionState.save``) before an external side effect it must never repeat (a
    # phase ``started``), so a restart finds the phase and does not call again; this is what
    # keeps those calls at most once (docs/design.md, "Checkpoints and at-most-once"). The
    # behavior provides it; there is no default, so it cannot be forgotten.
    checkpoint: Callable[[], None]
    # What Jira answered for this very step (a woken execution loads the issue just before its
    # first step): the issue, or the error the load failed with when the step goes on with a
    # stand-in (``Behavior.stand_in``). The step's first live read uses it instead of asking.
    live_issue: Issue | DispatcherError | None = None


class ActionExecutor(Protocol):
    @property
    def type(self) -> str:
        """The action type this executor runs (read only: the registry finds it by this)."""
        ...

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        """Every problem of this action's configuration, at JSON paths under ``path`` (the
        ``rules[i].then[j].<type>`` key). ``config`` is the value under that key, ``None`` when
        the key is absent or null."""
        ...

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict: ...

    def plan(self, run: ActionRun) -> None: ...

    def execute(self, run: ActionRun) -> ActionResult: ...


def config_problems(config: Any, path: str,
                    check: Callable[[dict, str, Problems], None]) -> list[Problem]:
    """The problems of an action's configuration: it must be an object (``None``: the key is
    missing), then ``check`` adds the action's own rules."""
    problems = Problems()
    if check_config_object(config, path, problems):
        check(config, path, problems)
    return problems


class ActionRegistry:
    """Finds an executor by action type; the product registry holds only the real ones."""

    def __init__(self, executors: Iterable[ActionExecutor] = ()):
        self._executors: dict[str, ActionExecutor] = {}
        for executor in executors:
            self.register(executor)

    def register(self, executor: ActionExecutor) -> None:
        self._executors[executor.type] = executor

    def get(self, action_type: str) -> ActionExecutor | None:
        return self._executors.get(action_type)

    def types(self) -> tuple[str, ...]:
        """The action types this registry can run, in registration order."""
        return tuple(self._executors)
