"""The product's action registry: only the real action types (tests register their own)."""

from __future__ import annotations

from ticket_dispatcher.domain.actions.base import ActionRegistry


def product_registry() -> ActionRegistry:
    # The executors of SPEC §8 register here as they land (assign, assign_l2, triage, the
    # assignment-notification family); an action type without one fails with ``plan_failed``.
    return ActionRegistry()
