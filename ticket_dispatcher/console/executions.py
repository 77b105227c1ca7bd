"""Executions: the list with the API's filters, one execution's life as a timeline, and
cancelling one that still runs.

The timeline reads what the execution stored, nothing more: the trigger, the policy version it
froze, each rule's condition evaluated leaf by leaf (``evaluation.tree``; a rule evaluated by an
older release has only its one-line reason), and each action's typed state from its context
(whom an assignment chose and why, a card, a page and its ACK wait, an escalation). A context
this page does not know is shown as stored, masked. While the execution runs, the page says
which replica holds it and refreshes itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import falcon

from ticket_dispatcher.actors.messages import CancelOutcome
from ticket_dispatcher.console.actions import Action, Done, console_author
from ticket_dispatcher.console.triggers import replay_done, replay_question
from ticket_dispatcher.console.web import Console, Page, Query, url
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.conditions import MAX_CONDITION_DEPTH
from ticket_dispatcher.domain.execution import (
    ActionExecution,
    ActionStatus,
    Execution,
    ExecutionMode,
    ExecutionStatus,
    RuleExecution,
)
from ticket_dispatcher.domain.replay import Replay, replay_of_execution
from ticket_dispatcher.errors import Conflict, NotFound
from ticket_dispatcher.http.binding import paging
from ticket_dispatcher.http.dispatch import execution_filters, post_replay

FILTERS = ("issue_key", "status", "mode", "policy_id", "trigger_id", "limit")

# The state each action type keeps under its key of the context (domain/actions/*_state).
STATE_KEYS = {
    ActionType.ASSIGN.value: "assign",
    ActionType.ASSIGN_L2.value: "assign",
    ActionType.SEND_ASSIGNMENT_NOTIFICATION.value: "notification",
    ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT.value: "urgent",
    ActionType.PAGE_ASSIGNMENT.value: "page",
    ActionType.ESCALATE_ASSIGNMENT_TO_LEADER.value: "escalation",
}
# The external calls a notification action makes at most once, stored as
# ``<name>_phase`` / ``<name>_status`` (domain/actions/state.py, ``CallRecord``).
CALLS = {
    "card": "Lark card",
    "urgent": "Lark App-urgent",
    "page": "Oncall page",
    "notification_comment": "Jira comment",
    "ack_comment": "Jira ACK comment",
}
# What a guard's saved reason means, as a reader would say it (notification_guard.py).
ACK_REASONS = {
    "read": "the target read the card in Lark",
    "status": "the issue left the ACK-pending statuses",
    "button": "the target pressed Acknowledge on the card",
}


def routes(console: Console, ID: str) -> list[tuple[str, Page]]:
    item = f"/executions/{{execution_id:{ID}}}"
    return [
        ("/executions", ExecutionList(console)),
        (item, ExecutionView(console)),
        (item + "/cancel", ExecutionCancelAction(console)),
        (item + "/replay", ExecutionReplayAction(console)),
    ]


# --- the list -----------------------------------------------------------------------------------


class ExecutionList(Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        query = Query(req)
        limit, offset = paging(query)
        chosen = execution_filters(query)
        items, total = self.services.store.executions.page(**chosen, limit=limit,
                                                           offset=offset)
        # The executions of one trigger (a replay's or a dry run's result page) appear once
        # the trigger is processed: until then the page says so and refreshes itself.
        trigger = (self.services.store.triggers.get(chosen["trigger_id"])
                   if chosen["trigger_id"] is not None else None)
        filters = query.values(*FILTERS)
        self.console.render(
            req, resp, "executions.html", items=items, total=total, limit=limit,
            trigger=trigger,
            offset=offset, filters=dict.fromkeys(FILTERS, "") | filters, page_query=filters,
            statuses=list(ExecutionStatus), modes=list(ExecutionMode))


# --- one execution ------------------------------------------------------------------------------


@dataclass
class ActionView:
    """One action as the timeline shows it: ``kind`` names the template part for its state
    (``assign``, ``notification``, ``urgent``, ``page``, ``escalation``; ``other`` shows the
    context as stored)."""

    action: ActionExecution
    kind: str
    state: dict = field(default_factory=dict)  # the action's own key of the context
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (what, phase, status)
    waiting: bool = False  # a page's ACK wait that is still counting down


@dataclass
class RuleView:
    rule: RuleExecution
    tree: dict | None  # the evaluated condition, ready to show; None: only the reason
    reason: str
    evaluated_at: str | None
    actions: list[ActionView]


def action_view(action: ActionExecution, running: bool) -> ActionView:
    key = STATE_KEYS.get(action.type)
    state = action.context.get(key) if key else None
    if not key or not isinstance(state, dict):
        return ActionView(action, "other")
    calls = [(label, str(state.get(f"{name}_phase") or ""),
              str(state.get(f"{name}_status") or ""))
             for name, label in CALLS.items()
             if state.get(f"{name}_status") or state.get(f"{name}_phase")]
    waiting = (key == "page" and running and action.status is ActionStatus.EXECUTING
               and not state.get("outcome") and bool(state.get("deadline")))
    return ActionView(action, key, state, calls, waiting)


def tree_view(node: Any, depth: int = 0) -> dict:
    """A stored evaluation tree as the template walks it: ``kind`` (``always``, ``all``,
    ``any``, ``not``, ``leaf``, or ``unreadable`` for what this release cannot read), its
    ``children``, and a leaf's operand and value as text. Stored JSON may be older or newer
    than this code, so every key is optional here."""
    if not isinstance(node, dict) or depth > MAX_CONDITION_DEPTH + 1:
        return {"kind": "unreadable", "matched": None, "raw": node}
    matched = node.get("matched") if isinstance(node.get("matched"), bool) else None
    for kind in ("all", "any", "not"):
        if isinstance(node.get(kind), list):
            return {"kind": kind, "matched": matched,
                    "children": [tree_view(child, depth + 1) for child in node[kind]]}
    if "always" in node:
        return {"kind": "always", "matched": matched}
    if "field" in node:
        return {"kind": "leaf", "matched": matched, "field": str(node.get("field")),
                "operator": str(node.get("operator")),
                "expected": _expected_text(node.get("operator"), node.get("expected")),
                "actual": node.get("actual") if isinstance(node.get("actual"), str) else None,
                "reason": str(node.get("reason") or ""),
                "ignore_case": node.get("ignore_case") is True}
    return {"kind": "unreadable", "matched": matched, "raw": node}


def _expected_text(operator: Any, expected: Any) -> str | None:
    """The rule's operand as its reason writes it: JSON for values (so ``""`` shows), a
    pattern between slashes, a moment or a window as written."""
    if expected is None:
        return None
    if operator == "regex" and isinstance(expected, str):
        return f"/{expected}/"
    if operator in ("before", "after", "time_window") and isinstance(expected, str):
        return expected
    return json.dumps(expected, ensure_ascii=False, separators=(",", ":"))


def rule_view(rule: RuleExecution, running: bool) -> RuleView:
    evaluation = rule.evaluation if isinstance(rule.evaluation, dict) else {}
    tree = evaluation.get("tree")
    return RuleView(rule, tree_view(tree) if tree is not None else None,
                    str(evaluation.get("reason") or ""), evaluation.get("evaluated_at"),
                    [action_view(action, running) for action in rule.action_executions])


class ExecutionView(Page):
    """One execution's life. A bounded number of reads whatever its size: the execution and
    its rules (two), its trigger, its policy version (two), and its lease while it runs."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, execution_id: int) -> None:
        store = self.services.store
        execution = store.executions.get(execution_id)
        running = not execution.status.terminal
        try:
            trigger = store.triggers.get(execution.trigger_id)
        except NotFound:
            trigger = None
        try:
            policy = store.policies.get(execution.policy_id)
        except NotFound:
            policy = None
        holder = store.executions.holder(execution_id) if running else None
        self.console.render(
            req, resp, "execution.html", execution=execution, trigger=trigger, policy=policy,
            running=running, holder=holder,
            rules=[rule_view(rule, running) for rule in execution.rule_executions],
            ack_reasons=ACK_REASONS)


class ExecutionCancelAction(Action):
    title = "Cancel execution"
    danger = True

    def _running(self, execution_id: int) -> Execution:
        execution = self.services.store.executions.get(execution_id)
        if execution.status.terminal:
            raise Conflict(f"execution {execution_id} has already finished "
                           f"({execution.status.value}); only a running one is cancelled")
        return execution

    def back(self, req: falcon.Request, execution_id: int) -> str:
        return url(f"/executions/{execution_id}")

    def question(self, req: falcon.Request, execution_id: int) -> str:
        execution = self._running(execution_id)
        return (f"Cancel execution {execution.id} of {execution.issue_key} (policy "
                f"{execution.policy_id}, version {execution.policy_version}), now "
                f"{execution.status.value}? It fails with the code cancelled: the actions "
                "still to come are skipped, and what was already done (an assignment, a card, "
                "a page) stays done.")

    def apply(self, req: falcon.Request, execution_id: int) -> Done:
        execution = self._running(execution_id)
        who = req.context.viewer.name if req.context.viewer else "an operator"
        outcome = self.services.running().cancel(
            execution_id, f"cancelled by {who} from the console", by=console_author(req))
        if outcome is CancelOutcome.APPLIED:
            message = (f"Execution {execution_id} of {execution.issue_key} is cancelled: it "
                       "was waiting (queued or parked), and it is failed now.")
        else:
            message = (f"Execution {execution_id} of {execution.issue_key} is being cancelled: "
                       "it was running, and its actor was told to stop at its next step.")
        return Done(message, url(f"/executions/{execution_id}"),
                    f"See execution {execution_id}")


class ExecutionReplayAction(Action):
    title = "Replay execution"

    def _replay(self, execution_id: int) -> Replay:
        store = self.services.store
        execution = store.executions.get(execution_id)
        return replay_of_execution(execution, store.triggers.get(execution.trigger_id))

    def back(self, req: falcon.Request, execution_id: int) -> str:
        return url(f"/executions/{execution_id}")

    def question(self, req: falcon.Request, execution_id: int) -> str:
        return replay_question(self._replay(execution_id))

    def apply(self, req: falcon.Request, execution_id: int) -> Done:
        trigger = post_replay(self.services, self._replay(execution_id), console_author(req),
                              ("execution", execution_id))
        return replay_done(trigger, f"execution {execution_id}")
