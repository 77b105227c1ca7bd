"""What one trigger turns into: one pre-built execution per matched policy."""

from __future__ import annotations

from datetime import datetime

from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES, NotificationRole
from ticket_dispatcher.domain.execution import (
    Execution,
    ExecutionMode,
    Trigger,
    build_rule_executions,
)
from ticket_dispatcher.domain.matching import lock_key
from ticket_dispatcher.domain.model import DispatchContext, Issue, Policy
from ticket_dispatcher.timeutil import parse_rfc3339


def reserved_role(source: str) -> NotificationRole | None:
    """The notification role a reserved source stands for, or None for ordinary sources."""
    return next((role for role in NOTIFICATION_ROLES if role.source == source), None)


def new_execution(trigger: Trigger, policy: Policy, issue: Issue,
                  dispatch_context: DispatchContext | None, registry: ActionRegistry,
                  now: datetime) -> Execution:
    """An unsaved execution with every rule and action execution pre-built and frozen.

    Each action's initial context comes from its executor's ``build_context``; a dry-run
    freezes its business time from ``overwrite_data.now`` or ``now``.
    """
    contexts = []
    for rule in policy.ordered_rules:
        row = []
        for action in rule.then:
            action_type = str(action.get("type", ""))
            executor = registry.get(action_type)
            config = action.get(action_type) or {}
            row.append(executor.build_context(issue, dispatch_context, config) if executor else {})
        contexts.append(row)
    live = trigger.mode is ExecutionMode.LIVE
    overwrite = (trigger.dryrun or {}).get("overwrite_data") if not live else None
    business_now = now  # live runs record their creation time and evaluate on the clock
    if not live and overwrite and (pretended := overwrite.get("now")):
        business_now = parse_rfc3339(pretended)
    return Execution(
        id=0,
        trigger_id=trigger.id,
        issue_key=issue.key,
        mode=trigger.mode,
        policy_id=policy.id,
        policy_family_id=policy.family_id,
        policy_version=policy.version,
        rule_executions=build_rule_executions(policy, contexts),
        overwrite_data=overwrite,
        business_now=business_now,
        live_lock_key=lock_key(policy, issue.key) if live else None,
        created_at=now,
        updated_at=now,
    )
