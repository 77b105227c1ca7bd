"""What a replay posts: a new trigger on the live issue, for a failed trigger or a failed
execution (docs/runbook.md, "Manual replay").

A replay is an ordinary trigger. It reads the issue as it is now, and the one admission rule
(``domain/admission.py``) keeps at most one live execution per lock key, as for any trigger.
"""

from __future__ import annotations

from dataclasses import dataclass

from ticket_dispatcher.domain.execution import (
    DryRun,
    Execution,
    ExecutionStatus,
    Trigger,
    TriggerStatus,
)
from ticket_dispatcher.domain.fanout import reserved_role
from ticket_dispatcher.errors import Conflict


@dataclass(frozen=True)
class Replay:
    """The trigger a replay posts."""

    source: str
    issue_key: str
    policy_id: int | None
    dryrun: DryRun | None

    @property
    def needs_role_label(self) -> bool:
        """A notification replay runs only while the issue still carries its role label."""
        return reserved_role(self.source) is not None


def replay_of_trigger(trigger: Trigger) -> Replay:
    """The same trigger again; ``Conflict`` unless it failed."""
    if trigger.status is not TriggerStatus.FAILED:
        raise Conflict(f"trigger {trigger.id} is {trigger.status.value}; only a failed "
                       "trigger is replayed")
    return Replay(trigger.source, trigger.issue_key, trigger.policy_id, trigger.dryrun)


def replay_of_execution(execution: Execution, trigger: Trigger) -> Replay:
    """Its trigger's source on the same issue, for the execution's policy alone: the other
    policies that trigger matched are not run again. A reserved source cannot name a policy;
    its replay is matched as Jira's would be. ``Conflict`` unless the execution failed."""
    if execution.status is not ExecutionStatus.FAILED:
        raise Conflict(f"execution {execution.id} is {execution.status.value}; only a failed "
                       "execution is replayed")
    policy_id = None if reserved_role(trigger.source) else execution.policy_id
    return Replay(trigger.source, execution.issue_key, policy_id, trigger.dryrun)
