"""The product's action registry: only the real action types (tests register their own)."""

from __future__ import annotations

from datetime import timedelta

from ticket_dispatcher.domain.actions.assign import AssignExecutor
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.actions.notification_card import SendAssignmentNotification
from ticket_dispatcher.domain.actions.notification_escalate import EscalateAssignmentToLeader
from ticket_dispatcher.domain.actions.notification_page import PageAssignment
from ticket_dispatcher.domain.actions.notification_urgent import MarkAssignmentMessageUrgent
from ticket_dispatcher.domain.actions.retrying import DEFAULT_RETRY_BUDGET
from ticket_dispatcher.domain.actions.triage import TriageExecutor
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.issues import DEFAULT_AUTO_ASSIGN_LABEL


def product_registry(auto_assign_label: str = DEFAULT_AUTO_ASSIGN_LABEL,
                     retry_budget: timedelta = DEFAULT_RETRY_BUDGET) -> ActionRegistry:
    """``retry_budget``: how long a Jira write refused by a passing fault (or the read
    guarding it) is tried again."""
    return ActionRegistry([
        AssignExecutor(ActionType.ASSIGN, auto_assign_label, retry_budget=retry_budget),
        AssignExecutor(ActionType.ASSIGN_L2, auto_assign_label, retry_budget=retry_budget),
        TriageExecutor(retry_budget),
        SendAssignmentNotification(retry_budget),
        MarkAssignmentMessageUrgent(retry_budget),
        PageAssignment(retry_budget),
        EscalateAssignmentToLeader(retry_budget),
    ])
