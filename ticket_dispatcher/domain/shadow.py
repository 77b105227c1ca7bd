"""Shadow policies: what a version would decide, next to what the active one did
(docs/policies.md, "Shadow: try a change on live traffic").

A ``Decision`` is read from an execution: the rules that matched, the actions they hold, whom
an ``assign`` chose and the notification steps planned. The shadow's comes from a dry run on
the live trigger's issue snapshot; the live one from the live execution once it has ended. The
``ShadowVerdict`` compares them, the most telling difference first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ticket_dispatcher.domain.catalog import NOTIFICATION_ACTION_TYPES, ActionType
from ticket_dispatcher.domain.execution import Execution, RuleOutcome

_ASSIGNS = (ActionType.ASSIGN.value, ActionType.ASSIGN_L2.value)


class ShadowVerdict(StrEnum):
    AGREED = "agreed"
    NO_MATCH = "no_match"  # one of the two matched no rule at all
    OTHER_RULE = "other_rule"  # both matched, not the same rules
    OTHER_ACTIONS = "other_actions"  # same rules, other actions or notification steps
    OTHER_ASSIGNEE = "other_assignee"  # same actions, another person chosen

    @property
    def differs(self) -> bool:
        return self is not ShadowVerdict.AGREED


DIFFERENCES = tuple(v for v in ShadowVerdict if v.differs)


@dataclass(frozen=True)
class Decision:
    matched_rules: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)  # action types of the matched rules
    assignee: str | None = None  # whom the first assign or assign_l2 chose
    notification_steps: list[str] = field(default_factory=list)  # e.g. page_assignment#1
    error: str = ""  # why the evaluation ended early, if it did

    def to_json(self) -> dict:
        return {"matched_rules": list(self.matched_rules), "actions": list(self.actions),
                "assignee": self.assignee, "notification_steps": list(self.notification_steps),
                "error": self.error}

    @classmethod
    def from_json(cls, raw: dict) -> Decision:
        return cls(matched_rules=list(raw.get("matched_rules") or []),
                   actions=list(raw.get("actions") or []), assignee=raw.get("assignee"),
                   notification_steps=list(raw.get("notification_steps") or []),
                   error=raw.get("error") or "")


def decide(execution: Execution) -> Decision:
    """What ``execution`` decided: every rule it found matching, in order, and what they
    hold. Actions count as decided whether they ran or were only planned (a dry run)."""
    rules, actions, steps, assignee = [], [], [], None
    for rule in execution.rule_executions:
        if rule.outcome is not RuleOutcome.MATCHED:
            continue
        rules.append(rule.name)
        for action in rule.action_executions:
            actions.append(action.type)
            if action.type in NOTIFICATION_ACTION_TYPES:
                steps.append(_step(action.type, action.config))
            if assignee is None and action.type in _ASSIGNS:
                assignee = (action.context.get("assign") or {}).get("assignee") or None
    return Decision(matched_rules=rules, actions=actions, assignee=assignee,
                    notification_steps=steps, error=execution.failure_reason or "")


def judge(live: Decision, shadow: Decision) -> ShadowVerdict:
    if bool(live.matched_rules) != bool(shadow.matched_rules):
        return ShadowVerdict.NO_MATCH
    if live.matched_rules != shadow.matched_rules:
        return ShadowVerdict.OTHER_RULE
    if live.actions != shadow.actions or live.notification_steps != shadow.notification_steps:
        return ShadowVerdict.OTHER_ACTIONS
    if live.assignee != shadow.assignee:
        return ShadowVerdict.OTHER_ASSIGNEE
    return ShadowVerdict.AGREED


def _step(action_type: str, config: dict) -> str:
    attempt = config.get("attempt") if isinstance(config, dict) else None
    return f"{action_type}#{attempt}" if attempt is not None else action_type
