"""Which active policies a trigger fans out to, and the live lock each one takes
(docs/policies.md, "Trigger: which triggers and issues a policy matches")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ticket_dispatcher.domain.catalog import NOTIFICATION_ACTION_TYPES, RESERVED_SOURCES
from ticket_dispatcher.domain.execution import Execution
from ticket_dispatcher.domain.model import Issue, Policy, PolicySpec, PolicyStatus


def policy_matches(policy: Policy, source: str, issue: Issue) -> bool:
    """Matching: status, switch, project, labels, then the ``source_in`` rule."""
    trigger = policy.trigger
    if policy.status is not PolicyStatus.ACTIVE or not trigger.enable:
        return False
    if outside_trigger(policy, issue):
        return False
    return source_admitted(trigger.source_in, source)


def outside_trigger(policy: Policy, issue: Issue) -> str:
    """Why ``issue`` falls outside what the policy's trigger asks of an issue (its project,
    its labels), or "" when it is inside. An execution checks it again at its start, on the
    issue as it is then: a trigger matched on an earlier read (docs/design.md, "The life of an
    execution")."""
    trigger = policy.trigger
    if trigger.project_key_in and issue.project_key not in trigger.project_key_in:
        return f"the issue is in project {issue.project_key}, not one the policy takes"
    missing = sorted(set(trigger.issue_label_all) - set(issue.labels))
    if missing:
        return f"the issue no longer has the label {', '.join(missing)} the policy requires"
    return ""


def source_admitted(source_in: Iterable[str], source: str) -> bool:
    """Non-empty ``source_in`` lists exact sources; empty is a wildcard for ordinary sources
    only — a reserved source reaches just the policies that name it."""
    listed = tuple(source_in)
    if listed:
        return source in listed
    return source not in RESERVED_SOURCES


def match_policies(policies: Iterable[Policy], source: str, issue: Issue) -> list[Policy]:
    """The matching policies in ascending id order, the order executions are created in."""
    return sorted(
        (policy for policy in policies if policy_matches(policy, source, issue)),
        key=lambda policy: policy.id,
    )


def lock_key(policy: Policy, issue_key: str) -> str:
    """The live mutual-exclusion key: per policy, or per family for notification policies so a
    replacement cannot run a second workflow for the same role."""
    if is_notification_policy(policy):
        return f"{issue_key}#family:{policy.family_id}"
    return f"{issue_key}#policy:{policy.id}"


def is_notification_policy(policy: Policy | PolicySpec | Mapping[str, Any]) -> bool:
    """True when any action is an assignment-notification action or ``source_in`` names a
    reserved source. Accepts raw policy JSON too, read defensively for the validator."""
    if isinstance(policy, Policy | PolicySpec):
        sources: Any = policy.trigger.source_in
        actions: Iterable[Any] = (action for rule in policy.rules for action in rule.then)
    else:
        trigger = policy.get("trigger") if isinstance(policy, Mapping) else None
        sources = trigger.get("source_in") if isinstance(trigger, Mapping) else None
        actions = _raw_actions(policy)
    if isinstance(sources, list | tuple) and any(is_reserved_source(s) for s in sources):
        return True
    return any(
        isinstance(action, Mapping) and is_notification_action_type(action.get("type"))
        for action in actions
    )


def is_reserved_source(source: Any) -> bool:
    """One of ``jira_assignment_assignee`` / ``jira_assignment_l2_assignee``."""
    return isinstance(source, str) and source in RESERVED_SOURCES


# The lanes that waiting work takes (actors/lanes.py), a trigger's and its executions' alike.
NOTIFICATION_LANE, ORDINARY_LANE = "notification", "ordinary"


def lane_of(source: str | None) -> str:
    """The lane of a trigger of ``source`` (ordinary when not known) and of its executions."""
    return NOTIFICATION_LANE if is_reserved_source(source) else ORDINARY_LANE


def is_notification_action_type(action_type: Any) -> bool:
    return isinstance(action_type, str) and action_type in NOTIFICATION_ACTION_TYPES


def in_notification_lane(execution: Execution) -> bool:
    """An execution of the notification lane: one that runs a notification action. Its
    calls go first under a Jira budget (integrations/call_policy.py, ``first_calls``)."""
    return any(is_notification_action_type(action.type) for rule in execution.rule_executions
               for action in rule.action_executions)


def _raw_actions(raw: Any) -> Iterable[Any]:
    rules = raw.get("rules") if isinstance(raw, Mapping) else None
    for rule in rules if isinstance(rules, list) else ():
        then = rule.get("then") if isinstance(rule, Mapping) else None
        yield from then if isinstance(then, list) else ()
