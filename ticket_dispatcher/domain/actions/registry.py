"""The product's action registry: only the real action types (tests register their own)."""

from __future__ import annotations

from ticket_dispatcher.domain.actions.assign import AssignExecutor
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.actions.triage import TriageExecutor
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.issues import DEFAULT_AUTO_ASSIGN_LABEL


def product_registry(auto_assign_label: str = DEFAULT_AUTO_ASSIGN_LABEL) -> ActionRegistry:
    # The assignment-notification family (SPEC §8.2) registers here when it lands; until then
    # a policy naming one of its types is invalid ("no executor", SPEC §6) and cannot be
    # activated, and GET /dispatch/options does not list them.
    return ActionRegistry([
        AssignExecutor(ActionType.ASSIGN, auto_assign_label),
        AssignExecutor(ActionType.ASSIGN_L2, auto_assign_label),
        TriageExecutor(),
    ])
