"""Test data built in one place: tests build their objects here, not inline."""

from __future__ import annotations

import copy
import json
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "ops" / "examples"


def policy_body(**overrides) -> dict:
    """A valid ordinary policy: round-robin assign over two users for TCID tickets."""
    body = {
        "name": "Assign TCID tickets",
        "description": "round robin over the TCID squad",
        "trigger": {"enable": True, "source_in": [], "project_key_in": ["TCID"],
                    "issue_label_all": []},
        "rules": [
            {
                "name": "urgent",
                "priority": 10,
                "when": {"field": "issue.priority", "operator": "in", "values": ["P0", "P1"]},
                "then": [{"type": "assign", "assign": {
                    "receiver": {"type": "users", "users": ["a@example.com", "b@example.com"]},
                    "strategy": "round_robin"}}],
                "transition": {"on_success": "terminate"},
            }
        ],
    }
    body.update(copy.deepcopy(overrides))
    return body


def example_policy(name: str) -> dict:
    """One of the policies shipped in ``ops/examples/policies/`` (e.g. ``severity-assignee``)."""
    return json.loads((EXAMPLES / "policies" / f"{name}.json").read_text())
