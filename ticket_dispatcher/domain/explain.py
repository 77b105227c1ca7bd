"""Offline dry run of a policy's rules for ``ticket-dispatcher policy test`` (docs/policies.md,
"2. Test it against an issue (offline)").

It walks the rules the way the execution behavior does (docs/design.md, "The life of an
execution"): ``(priority, index)`` order, a non-matching rule continues, a matching one runs its
actions and then follows ``on_success``. Actions are only listed, never planned: whether a real
action would end the execution early (an ACK found by ``page_assignment``) depends on live
systems.

A condition that cannot be evaluated (the validator reports it too) is what a dry run of the
draft would meet: the rule's outcome is ``condition_error`` with the problems as its reason,
and the rules after it are not evaluated, as the execution would fail there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.conditions import ConditionError, evaluate
from ticket_dispatcher.domain.model import Issue, PolicySpec


@dataclass(frozen=True)
class RuleReport:
    name: str
    priority: int
    outcome: str  # matched | not_matched | not_evaluated as a rule execution's; condition_error
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
    """One report per rule, in run order; an invalid condition is a ``condition_error``
    report that ends the walk."""
    ordered = sorted(enumerate(spec.rules), key=lambda item: (item[1].priority, item[0]))
    reports: list[RuleReport] = []
    stopped: str | None = None  # why the rules left are not evaluated
    for _, rule in ordered:
        if stopped is not None:
            reports.append(RuleReport(rule.name, rule.priority, "not_evaluated", stopped))
            continue
        try:
            matched, reason = evaluate(rule.when, issue, now)
        except ConditionError as exc:
            reports.append(RuleReport(rule.name, rule.priority, "condition_error",
                                      _condition_error(exc)))
            stopped = (f"not evaluated: the execution fails at rule {rule.name!r} "
                       "(condition_error)")
            continue
        if not matched:
            reports.append(RuleReport(rule.name, rule.priority, "not_matched", reason))
            continue
        reports.append(RuleReport(rule.name, rule.priority, "matched", reason, list(rule.then)))
        if rule.on_success == OnSuccess.TERMINATE:
            stopped = f"not evaluated: rule {rule.name!r} matched and terminates"
    return reports


def _condition_error(exc: ConditionError) -> str:
    details = "; ".join(f"{p.path}: {p.message}" if p.path else p.message
                        for p in exc.problems) or exc.message
    return f"the condition cannot be evaluated: {details}"
