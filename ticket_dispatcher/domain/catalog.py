"""The one whitelist of what a policy may say (docs/policies.md, "Conditions" and "Actions").

The validator, the evaluator and ``GET /dispatch/options`` all read this module, so a field or
operator exists everywhere or nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class FieldKind(StrEnum):
    STRING = "string"
    COLLECTION = "collection"
    TIME = "time"


FIELDS: dict[str, FieldKind] = {
    "issue.project_key": FieldKind.STRING,
    "issue.environment": FieldKind.STRING,
    "issue.reporter_email": FieldKind.STRING,
    "issue.summary": FieldKind.STRING,
    "issue.primary_component": FieldKind.STRING,
    "issue.priority": FieldKind.STRING,
    "issue.status": FieldKind.STRING,
    "issue.custom_fields.severity": FieldKind.STRING,
    "issue.components": FieldKind.COLLECTION,
    "issue.component": FieldKind.COLLECTION,  # alias of issue.components
    "issue.labels": FieldKind.COLLECTION,
    "issue.created_at": FieldKind.TIME,
    "now": FieldKind.TIME,
}

_TEXT_OPERATORS = (
    "eq", "ne", "in", "not_in", "contains", "not_contains", "regex", "exists", "not_exists",
)
OPERATORS: dict[FieldKind, tuple[str, ...]] = {
    FieldKind.STRING: _TEXT_OPERATORS,
    FieldKind.COLLECTION: _TEXT_OPERATORS,
    FieldKind.TIME: ("before", "after", "time_window", "exists"),
}

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class ActionType(StrEnum):
    ASSIGN = "assign"
    ASSIGN_L2 = "assign_l2"
    TRIAGE = "triage"
    SEND_ASSIGNMENT_NOTIFICATION = "send_assignment_notification"
    MARK_ASSIGNMENT_MESSAGE_URGENT = "mark_assignment_message_urgent"
    PAGE_ASSIGNMENT = "page_assignment"
    ESCALATE_ASSIGNMENT_TO_LEADER = "escalate_assignment_to_leader"


NOTIFICATION_ACTION_TYPES = frozenset({
    ActionType.SEND_ASSIGNMENT_NOTIFICATION,
    ActionType.MARK_ASSIGNMENT_MESSAGE_URGENT,
    ActionType.PAGE_ASSIGNMENT,
    ActionType.ESCALATE_ASSIGNMENT_TO_LEADER,
})


class ReceiverType(StrEnum):
    USER = "user"
    USERS = "users"
    GROUP = "group"
    ONCALL_TEAM = "oncall_team"


class Strategy(StrEnum):
    FIRST = "first"
    ROUND_ROBIN = "round_robin"
    BALANCED = "balanced"  # fewest open issues in Jira, ties in round-robin order
    RANDOM = "random"  # a uniform draw, taken once when the action plans


class OnSuccess(StrEnum):
    CONTINUE = "continue"
    TERMINATE = "terminate"


@dataclass(frozen=True)
class NotificationRole:
    """One reserved source with the role and pending-marker label it must be paired with."""

    source: str
    role: str
    label: str


NOTIFICATION_ROLES: tuple[NotificationRole, ...] = (
    NotificationRole("jira_assignment_assignee", "assignee", "notify-assignee"),
    NotificationRole("jira_assignment_l2_assignee", "l2_assignee", "notify-l2-assignee"),
)
RESERVED_SOURCES = frozenset(role.source for role in NOTIFICATION_ROLES)

# Rule 2 of an assignment-notification policy may test only these fields, with ``in``
# (docs/policies.md, "Assignment-notification policies").
URGENCY_FIELDS = ("issue.priority", "issue.custom_fields.severity")


# --- names: one rule each, for every place that reads them -----------------------------------
# A policy may only name what the service can ever see: a trigger source the intake accepts
# (http/dispatch.py), a project key an issue key can carry (domain/issues.py), a label Jira can
# hold, an email an engineer record can have (http/engineers.py), a group or team name the Core
# and Oncall clients can put into one URL path segment. Anything else would pass validation and
# then never match, or fail at run time. Patterns are used with ``fullmatch``: "$" would let a
# final "\n" through.

SOURCE_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
PROJECT_KEY = re.compile(r"[A-Z][A-Z0-9_]{0,31}")
# No blanks, control characters or U+FFFD, the mark of bytes that were not UTF-8 (a request's
# path is decoded with it in their place).
_EMAIL_PART = r"[^@\s\x00-\x1f\x7f\ufffd]+"
EMAIL = re.compile(rf"{_EMAIL_PART}@{_EMAIL_PART}\.{_EMAIL_PART}")
MAX_EMAIL_LENGTH = 254
MAX_LABEL_LENGTH = 255  # Jira refuses longer labels
# "." and ".." are dot segments: an HTTP client resolves ``/groups/../members`` to another path.
_DOT_SEGMENTS = frozenset({".", ".."})


@dataclass(frozen=True)
class NameRule:
    """What one kind of name must look like: ``accepts`` decides; a refusal reads
    ``"<value>" is not <what> (<hint>)``."""

    what: str
    hint: str
    accepts: Callable[[str], bool]

    def __call__(self, value: Any) -> bool:
        return isinstance(value, str) and self.accepts(value)


SOURCE = NameRule(
    "a lower-case source name like jira_automation",
    "1 to 64 characters of a-z, 0-9, _, . and -, starting with a letter",
    lambda text: SOURCE_NAME.fullmatch(text) is not None,
)
PROJECT = NameRule(
    "a Jira project key like TCID",
    "upper-case letters, digits and _, starting with a letter, at most 32",
    lambda text: PROJECT_KEY.fullmatch(text) is not None,
)
LABEL = NameRule(
    "a Jira label",
    f"no spaces, at most {MAX_LABEL_LENGTH} characters",
    lambda text: 0 < len(text) <= MAX_LABEL_LENGTH and not any(c.isspace() for c in text),
)
ENGINEER_EMAIL = NameRule(
    "an email address",
    "",
    lambda text: len(text) <= MAX_EMAIL_LENGTH and EMAIL.fullmatch(text) is not None,
)
DIRECTORY_NAME = NameRule(
    "a group or team name",
    "not . or .., and no spaces around it",
    lambda text: text != "" and text.strip() == text and text not in _DOT_SEGMENTS,
)


def options(runnable: Iterable[str] | None = None) -> dict:
    """What ``GET /dispatch/options`` answers: the whole whitelist, nothing else.

    ``runnable``: the action types this build has executors for (``ActionRegistry.types()``);
    only the catalog types that can run are listed. ``None`` lists every type the policy
    format knows (the OpenAPI document describes the format, not one build).
    """
    can_run = None if runnable is None else set(runnable)
    return {
        "fields": [{"name": name, "kind": kind.value} for name, kind in FIELDS.items()],
        "operators": {kind.value: list(ops) for kind, ops in OPERATORS.items()},
        "weekdays": list(WEEKDAYS),
        "action_types": [t.value for t in ActionType if can_run is None or t.value in can_run],
        "receiver_types": [t.value for t in ReceiverType],
        "strategies": [s.value for s in Strategy],
        "transitions": [t.value for t in OnSuccess],
        "reserved_sources": [
            {"source": r.source, "role": r.role, "label": r.label} for r in NOTIFICATION_ROLES
        ],
    }
