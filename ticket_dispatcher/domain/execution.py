"""Triggers and executions: the durable records of a dispatch.

Their life is told in docs/design.md, "The life of a trigger" and "The life of an execution".

An ``Execution`` is an aggregate: its rule executions and their action executions are pre-built
at creation with each rule's condition and each action's config frozen, and the
behavior (``domain.behavior``) advances it one checkpoint at a time.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypedDict

from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.model import Policy
from ticket_dispatcher.timeutil import format_time


class TriggerStatus(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"


class ExecutionMode(StrEnum):
    LIVE = "live"
    DRY_RUN = "dry_run"


class ExecutionStatus(StrEnum):
    CREATED = "created"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED)


class RuleOutcome(StrEnum):
    NOT_EVALUATED = "not_evaluated"
    MATCHED = "matched"
    NOT_MATCHED = "not_matched"


class ActionStatus(StrEnum):
    PENDING = "pending"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"


class FailureCode(StrEnum):
    """The fixed, documented set of execution failure codes (docs/runbook.md,
    "TicketDispatcherExecutionsFailed")."""

    ISSUE_LOAD_FAILED = "issue_load_failed"  # the issue could not be loaded (after retries)
    POLICY_LOAD_FAILED = "policy_load_failed"  # the policy is gone (after retries)
    CONDITION_ERROR = "condition_error"  # a frozen condition cannot be evaluated
    NO_CANDIDATES = "no_candidates"  # a receiver resolved to nobody dispatch-enabled
    # everyone the receiver (and the fallback) resolved to was on time off, outside their
    # working hours where required, or at their cap of open issues
    NO_ELIGIBLE_CANDIDATE = "no_eligible_candidate"
    PLAN_FAILED = "plan_failed"  # an action's plan raised a technical error
    EXECUTE_FAILED = "execute_failed"  # an action's execute raised a technical error
    CANCELLED = "cancelled"  # an operator cancelled the execution
    INTERNAL_ERROR = "internal_error"  # the runtime crashed on it more than actor_restarts times


@dataclass(frozen=True)
class Lease:
    """A claim on a trigger or an execution: who holds it (a process identity) and which claim
    this is. Every claim increments the epoch, so a write made under an older claim is refused
    (fencing); the expiry lives in the store and is renewed by the holder's heartbeat."""

    owner: str
    epoch: int


class OverwriteData(TypedDict, total=False):
    """What a dry run is told to take as given (``dryrun.overwrite_data``): ``now``, the
    business time it judges at (RFC 3339; absent or null: the clock's)."""

    now: str | None


class DryRun(TypedDict, total=False):
    """A dry run's settings, as its trigger was posted with them (``dryrun``)."""

    overwrite_data: OverwriteData | None


class RoleLabel(TypedDict, total=False):
    """The label a Jira webhook's trigger adds to its issue first (``add_label``), and what its
    delivery saw: whom the role held, when it changed and, for a rise in urgency, the urgent
    rule's condition (domain/webhooks.py)."""

    label: str
    role: str | None
    account_id: str | None
    changed_at: str  # RFC 3339
    urgent: dict


class TriggerInput(TypedDict, total=False):
    """What a trigger was posted with beyond its issue key, which has its own column: a Jira
    webhook's trigger names its delivery, and a role's trigger the label it adds first."""

    issue_key: str
    webhook_delivery: str
    add_label: RoleLabel
    # The delivery's issue, when it arrived fresh: {"at": the event's time, "issue": {"key",
    # "fields"}} (domain/webhooks.py, ``snapshot_of``); not shown with the trigger.
    snapshot: dict


@dataclass
class Trigger:
    id: int
    source: str
    issue_key: str
    policy_id: int | None = None
    dryrun: DryRun | None = None
    status: TriggerStatus = TriggerStatus.PENDING
    available_at: datetime | None = None
    execution_ids: list[int] = field(default_factory=list)
    failure_reason: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    lease: Lease | None = None  # the claim it was processed under; never shown in the API
    # Retries after passing faults of the issue load: how many, the last one's reason,
    # and when the first failed (the retry budget counts from it).
    retry_count: int = 0
    retry_reason: str = ""
    retry_since: datetime | None = None
    extra_input: TriggerInput = field(default_factory=lambda: TriggerInput())
    execution_failed: bool = False  # one of its executions failed (read with the trigger)
    # The maintenance window holding it (while ``pending``), or that last held it; a
    # deferral or a retry for another cause clears it.
    maintenance_window_id: int | None = None

    @property
    def held(self) -> bool:
        """Waiting, ``pending``, for the end of the maintenance window that holds it."""
        return self.status is TriggerStatus.PENDING and self.maintenance_window_id is not None

    @property
    def retrying(self) -> bool:
        """Waiting for its next try after a passing fault: ``pending``, due at
        ``available_at``, with a retry in a row still open (a deferral closes it)."""
        return self.status is TriggerStatus.PENDING and self.retry_since is not None

    @property
    def mode(self) -> ExecutionMode:
        return ExecutionMode.DRY_RUN if self.dryrun is not None else ExecutionMode.LIVE

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "source": self.source,
            "input": {**{k: v for k, v in self.extra_input.items() if k != "snapshot"},
                      "issue_key": self.issue_key},
            "policy_id": self.policy_id,
            "dryrun": self.dryrun,
            "status": self.status.value,
            "available_at": format_time(self.available_at),
            "output": {"execution_ids": list(self.execution_ids)},
            "failure_reason": self.failure_reason,
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
            "completed_at": format_time(self.completed_at),
            "execution_failed": self.execution_failed,
            "maintenance_window_id": self.maintenance_window_id,
            "retries": {
                "count": self.retry_count,
                "last_reason": self.retry_reason,
                "since": format_time(self.retry_since),
                # a retrying trigger is due again at ``available_at``
                "next_at": format_time(self.available_at) if self.retrying else None,
            },
        }


@dataclass
class ActionExecution:
    index: int
    type: str
    action: dict  # the frozen action config, {"type": T, T: {...}}
    status: ActionStatus = ActionStatus.PENDING
    context: dict = field(default_factory=dict)
    result: str = ""
    error: str = ""
    started_at: datetime | None = None
    planned_at: datetime | None = None  # set once plan has run; a resumed action skips plan
    finished_at: datetime | None = None

    @property
    def config(self) -> dict:
        return self.action.get(self.type) or {}

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "type": self.type,
            "status": self.status.value,
            "action": self.action,
            "context": self.context,
            "result": self.result,
            "error": self.error,
            "started_at": format_time(self.started_at),
            "planned_at": format_time(self.planned_at),
            "finished_at": format_time(self.finished_at),
            # a notification action that saw the ACK says what told it, and when
            **self._ack(),
        }

    def _ack(self) -> dict:
        """``ack_source`` and ``ack_at`` from the action's state (``{"page": {...}}``)."""
        for state in self.context.values():
            if isinstance(state, dict) and "ack_source" in state:
                return {key: state.get(key) for key in _ACK_KEYS}
        return {}


# The ACK's source and time, kept in a guarded notification action's state
# (domain/actions/notification_state.py) and shown on the action itself.
_ACK_KEYS = ("ack_source", "ack_at")


@dataclass
class RuleExecution:
    sequence: int
    rule_id: int
    name: str
    priority: int
    when: dict
    on_success: OnSuccess
    action_executions: list[ActionExecution]
    outcome: RuleOutcome = RuleOutcome.NOT_EVALUATED
    # {"matched", "reason", "evaluated_at", "tree"}; "tree" (conditions.evaluate_explained) is
    # absent on rows evaluated by releases before it
    evaluation: dict | None = None

    def to_json(self) -> dict:
        return {
            "sequence": self.sequence,
            "rule_id": self.rule_id,
            "name": self.name,
            "priority": self.priority,
            "when": self.when,
            "transition": {"on_success": self.on_success.value},
            "outcome": self.outcome.value,
            "evaluation": self.evaluation,
            "action_executions": [a.to_json() for a in self.action_executions],
        }


@dataclass
class Execution:
    id: int
    trigger_id: int
    issue_key: str
    mode: ExecutionMode
    policy_id: int
    policy_family_id: str
    policy_version: int
    rule_executions: list[RuleExecution]
    status: ExecutionStatus = ExecutionStatus.CREATED
    failure_code: str = ""
    failure_reason: str = ""
    overwrite_data: OverwriteData | None = None
    business_now: datetime | None = None  # the business time of a dry-run; live: creation
    wake_at: datetime | None = None
    live_lock_key: str | None = None
    restart_count: int = 0  # runtime crashes survived, up to actor_restarts
    load_attempts: int = 0  # failed issue/policy loads in a row, for the backoff
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None

    @property
    def dry_run(self) -> bool:
        return self.mode is ExecutionMode.DRY_RUN

    def copy(self) -> Execution:
        return copy.deepcopy(self)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "trigger_id": self.trigger_id,
            "issue_key": self.issue_key,
            "mode": self.mode.value,
            "policy_id": self.policy_id,
            "policy_family_id": self.policy_family_id,
            "policy_version": self.policy_version,
            "status": self.status.value,
            "failure_code": self.failure_code,
            "failure_reason": self.failure_reason,
            "overwrite_data": self.overwrite_data,
            "business_now": format_time(self.business_now),
            "wake_at": format_time(self.wake_at),
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
            "completed_at": format_time(self.completed_at),
            "rule_executions": [r.to_json() for r in self.rule_executions],
        }


def build_rule_executions(policy: Policy, contexts: list[list[dict[str, Any]]] | None = None,
                          ) -> list[RuleExecution]:
    """Pre-build every rule and action execution in ``(priority, id)`` order.

    ``contexts[i][j]`` is the initial context of action j of the i-th ordered rule (built by the
    action's executor from the issue and dispatch context); configs are deep-copied so a later
    replacement never changes this execution.
    """
    rules = []
    for sequence, rule in enumerate(policy.ordered_rules):
        actions = []
        for index, action in enumerate(rule.then):
            initial = contexts[sequence][index] if contexts else {}
            actions.append(ActionExecution(index=index, type=str(action.get("type", "")),
                                           action=_copied(action), context=_copied(initial)))
        rules.append(RuleExecution(sequence=sequence, rule_id=rule.id, name=rule.name,
                                   priority=rule.priority, when=_copied(rule.when),
                                   on_success=rule.on_success, action_executions=actions))
    return rules


# The types of JSON's scalars as Python reads them: values that are their own copy and their
# own stored form.
JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _copied(value: Any) -> Any:
    """A deep copy of JSON data, as ``copy.deepcopy`` makes it but without its bookkeeping
    (every execution copies its policy's rules); anything that is not JSON data is left to
    ``copy.deepcopy``."""
    kind = type(value)
    if kind in JSON_SCALARS:
        return value
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    return copy.deepcopy(value)
