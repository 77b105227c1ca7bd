"""Offline dry run of a policy's rules for ``ticket-dispatcher policy test`` (SPEC §13).

It walks the rules the way the execution behavior does (SPEC §4.2, §7): ``(priority, index)``
order, a non-matching rule continues, a matching one runs its actions and then follows
``on_success``. Actions are only listed, never planned: whether a real action would end the
execution early (an ACK found by ``page_assignment``, N§6.1) depends on live systems.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.conditions import evaluate
from ticket_dispatcher.domain.model import Issue, PolicySpec


@dataclass(frozen=True)
class RuleReport:
    name: str
    priority: int
    outcome: str  # matched | not_matched | not_evaluated, as a rule execution's outcome (§4.6)
    reason: str
    actions: list[dict] = field(default_factory=list)  # the actions that would run

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "priority": self.priority,
            "outcome": self.outcome,
            "reason": self.reason,
            "actions": self.actions,
        }


def explain_policy(spec: PolicySpec, issue: Issue, now: datetime) -> list[RuleReport]:
    """One report per rule, in run order. Raises ``ConditionError`` for an invalid condition
    (validate the policy first)."""
    ordered = sorted(enumerate(spec.rules), key=lambda item: (item[1].priority, item[0]))
    reports: list[RuleReport] = []
    terminated_by: str | None = None
    for _, rule in ordered:
        if terminated_by is not None:
            reason = f"not evaluated: rule {terminated_by!r} matched and terminates"
            reports.append(RuleReport(rule.name, rule.priority, "not_evaluated", reason))
            continue
        matched, reason = evaluate(rule.when, issue, now)
        if not matched:
            reports.append(RuleReport(rule.name, rule.priority, "not_matched", reason))
            continue
        reports.append(RuleReport(rule.name, rule.priority, "matched", reason, list(rule.then)))
        if rule.on_success == OnSuccess.TERMINATE:
            terminated_by = rule.name
    return reports
