"""``triage``: bring the issue's triage fields to the configured values (docs/policies.md,
"triage").

``plan`` computes only the real changes against the snapshot into ``context.triage.changes``
(nothing to change → ``skipped_reason``); ``execute`` hands them to the Jira writer as one
``TriageChange``, which ``JiraClient.apply_triage`` sends as one edit. Never assigns. Port used:
``jira`` (``JiraWriter.apply_triage``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ticket_dispatcher.domain.actions.base import (
    ActionError,
    ActionResult,
    ActionRun,
    config_problems,
)
from ticket_dispatcher.domain.actions.retrying import (
    DEFAULT_RETRY_BUDGET,
    RetryingState,
    park_for_next_try,
)
from ticket_dispatcher.domain.catalog import LABEL
from ticket_dispatcher.domain.checks import (
    Problems,
    check_keys,
    check_names,
    check_object,
    check_text,
    check_text_list,
    quote,
    quoted,
)
from ticket_dispatcher.domain.model import DispatchContext, Issue
from ticket_dispatcher.domain.ports import TriageChange
from ticket_dispatcher.errors import DispatcherError, Problem, fault_of

_KEYS = ("priority", "components", "labels_add", "labels_remove", "fields")


@dataclass
class TriageState(RetryingState):
    """What ``triage`` keeps: the fields before, the planned changes, and whether they were
    applied."""

    KEY = "triage"

    before: dict | None = None  # priority, components and labels at creation
    # what will change: priority and components {from, to}, labels {add, remove}, raw fields
    changes: dict | None = None
    skipped_reason: str | None = None  # why nothing changes; "" when something does
    applied: bool | None = None


class TriageExecutor:
    type = "triage"

    def __init__(self, retry_budget: timedelta = DEFAULT_RETRY_BUDGET):
        """``retry_budget``: how long an edit refused by a passing fault is tried again (the
        edit sets values, so applying it twice leaves the issue as once)."""
        self._retry_budget = retry_budget

    def validate_config(self, config: Any, path: str) -> list[Problem]:
        """At least one of the keys; a label is not both added and removed."""
        return config_problems(config, path, _check_triage)

    def build_context(self, issue: Issue, dispatch_context: DispatchContext | None,
                      config: dict) -> dict:
        before = {"priority": issue.priority, "components": list(issue.components),
                  "labels": list(issue.labels)}
        return {TriageState.KEY: TriageState(before=before, changes={},
                                             skipped_reason="").dump()}

    def plan(self, run: ActionRun) -> None:
        issue, config = run.issue, run.config
        changes: dict = {}
        if config.get("priority") and config["priority"] != issue.priority:
            changes["priority"] = {"from": issue.priority, "to": config["priority"]}
        wanted = config.get("components")
        if wanted is not None and set(wanted) != set(issue.components):
            changes["components"] = {"from": list(issue.components), "to": list(wanted)}
        add = [label for label in config.get("labels_add", ()) if label not in issue.labels]
        remove = [label for label in config.get("labels_remove", ()) if label in issue.labels]
        if add or remove:
            changes["labels"] = {"add": add, "remove": remove}
        if config.get("fields"):  # raw Jira values: the snapshot cannot compare them
            changes["fields"] = dict(config["fields"])
        with TriageState.editing(run) as state:
            state.changes = changes
            state.skipped_reason = "" if changes else "the issue already has these values"

    def execute(self, run: ActionRun) -> ActionResult:
        with TriageState.editing(run) as state:
            if not state.changes:
                return ActionResult.proceed()
            try:
                run.ports.jira.apply_triage(run.issue.key, _triage_change(state.changes))
            except DispatcherError as exc:
                if fault_of(exc).passing:  # it sets values: made twice, it leaves them as once
                    return park_for_next_try(run, state, exc, "the triage edit",
                                             self._retry_budget)
                raise ActionError(f"Jira refused the triage edit: {exc.message}") from None
            state.applied = True
            return ActionResult.proceed()


def _check_triage(config: dict, path: str, problems: Problems) -> None:
    check_keys(config, path, _KEYS, problems)
    if not any(key in config for key in _KEYS):
        problems.rule(path, f"triage needs at least one of {', '.join(_KEYS)}")
    if "priority" in config:
        check_text(config["priority"], f"{path}.priority", problems)
    lists = {
        key: check_text_list(config[key], f"{path}.{key}", problems)
        for key in ("components", "labels_add", "labels_remove")
        if key in config
    }
    for key in ("labels_add", "labels_remove"):  # Jira refuses the whole edit otherwise
        check_names(lists.get(key), f"{path}.{key}", LABEL, problems)
    both = set(lists.get("labels_add") or ()) & set(lists.get("labels_remove") or ())
    if both:
        problems.rule(f"{path}.labels_remove", f"labels both added and removed: "
                      f"{quoted(sorted(both))}")
    if "fields" in config and check_object(config["fields"], f"{path}.fields", problems):
        for key in config["fields"]:
            if not key.strip():
                problems.rule(f"{path}.fields", f"field id {quote(key)} must not be empty")
            elif owners := [own for own in _SET_BY.get(key, ()) if own in config]:
                problems.rule(f"{path}.fields.{key}", f"{quote(key)} is already set by "
                              f"{' and '.join(owners)}: name it once")


# The raw fields the other keys of a triage write themselves. Jira refuses an edit that names a
# field both under ``fields`` and under ``update`` (the labels); a raw priority or components
# would be overwritten by the key's own value without a word.
_SET_BY = {"priority": ("priority",), "components": ("components",),
           "labels": ("labels_add", "labels_remove")}


def _triage_change(changes: dict) -> TriageChange:
    """The planned ``context.triage.changes`` as the change the Jira writer applies."""
    labels = changes.get("labels", {})
    return TriageChange(
        priority=changes["priority"]["to"] if "priority" in changes else None,
        components=tuple(changes["components"]["to"]) if "components" in changes else None,
        labels_add=tuple(labels.get("add", ())),
        labels_remove=tuple(labels.get("remove", ())),
        fields=dict(changes.get("fields", {})),
    )
