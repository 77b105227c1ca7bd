"""The product's action registry: only the real action types (tests register their own)."""

from __future__ import annotations

from ticket_dispatcher.domain.actions.assign import AssignExecutor
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.actions.triage import TriageExecutor
from ticket_dispatcher.domain.catalog import ActionType


def product_registry(auto_assign_label: str = "auto-dispatch") -> ActionRegistry:
    # The assignment-notification family (SPEC §8.2) registers here when it lands; until then
    # an action type without an executor fails its execution with ``plan_failed``.
    return ActionRegistry([
        AssignExecutor(ActionType.ASSIGN, auto_assign_label),
        AssignExecutor(ActionType.ASSIGN_L2, auto_assign_label),
        TriageExecutor(),
    ])
