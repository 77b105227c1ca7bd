"""The typed domain model.

Policies keep their conditions (``when``) and actions (``then``) as the JSON the operator wrote:
they are frozen into executions verbatim, and ``conditions.compile_condition`` turns a ``when``
into a typed tree where it is evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypedDict

from ticket_dispatcher.domain.catalog import WEEKDAYS, OnSuccess
from ticket_dispatcher.timeutil import format_time


@dataclass(frozen=True)
class JiraUser:
    account_id: str
    email: str  # lower-cased; empty when Jira hides it
    display_name: str = ""
    active: bool = True
    account_type: str = "atlassian"

    def to_json(self) -> dict:
        return {
            "account_id": self.account_id,
            "email": self.email,
            "display_name": self.display_name,
            "active": self.active,
            "account_type": self.account_type,
        }

    @classmethod
    def from_json(cls, raw: dict) -> JiraUser:
        return cls(
            account_id=str(raw.get("account_id") or ""),
            email=str(raw.get("email") or "").lower(),
            display_name=str(raw.get("display_name") or ""),
            active=bool(raw.get("active", True)),
            account_type=str(raw.get("account_type") or "atlassian"),
        )


@dataclass(frozen=True)
class Issue:
    """The live Jira issue as the IssueLoader returns it."""

    key: str
    project_key: str
    summary: str = ""
    environment: str | None = None
    reporter: JiraUser | None = None
    assignee: JiraUser | None = None
    l2_assignee: JiraUser | None = None
    created_at: datetime | None = None
    components: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    priority: str | None = None
    status: str | None = None
    severity: str | None = None  # custom_fields.severity
    # When the status last changed, by the changelog Jira sent with the issue (None when it
    # sent none): the time of a status-change ACK. Not part of the issue's JSON.
    status_changed_at: datetime | None = field(default=None, compare=False)

    def to_json(self) -> dict:
        def user(value: JiraUser | None) -> dict | None:
            return value.to_json() if value else None

        return {
            "key": self.key,
            "project_key": self.project_key,
            "summary": self.summary,
            "environment": self.environment,
            "reporter": user(self.reporter),
            "assignee": user(self.assignee),
            "l2_assignee": user(self.l2_assignee),
            "created_at": format_time(self.created_at),
            "components": list(self.components),
            "labels": list(self.labels),
            "priority": self.priority,
            "status": self.status,
            "custom_fields": {"severity": self.severity},
        }


class PolicyStatus(StrEnum):
    DRAFT = "draft"
    ACTIVE = "active"
    INACTIVE = "inactive"
    SUPERSEDED = "superseded"


@dataclass(frozen=True)
class PolicyTrigger:
    enable: bool = True
    source_in: tuple[str, ...] = ()
    project_key_in: tuple[str, ...] = ()
    issue_label_all: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "enable": self.enable,
            "source_in": list(self.source_in),
            "project_key_in": list(self.project_key_in),
            "issue_label_all": list(self.issue_label_all),
        }

    @classmethod
    def from_json(cls, raw: dict) -> PolicyTrigger:
        return cls(
            enable=bool(raw.get("enable", True)),
            source_in=tuple(raw.get("source_in") or ()),
            project_key_in=tuple(raw.get("project_key_in") or ()),
            issue_label_all=tuple(raw.get("issue_label_all") or ()),
        )


@dataclass(frozen=True)
class RuleSpec:
    """A rule as written by the operator; ``Rule`` adds the server-assigned id."""

    name: str
    priority: int
    when: dict
    then: list[dict]
    on_success: OnSuccess = OnSuccess.TERMINATE

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "priority": self.priority,
            "when": self.when,
            "then": self.then,
            "transition": {"on_success": self.on_success.value},
        }

    @classmethod
    def from_json(cls, raw: dict) -> RuleSpec:
        transition = raw.get("transition") or {}
        return cls(
            name=raw.get("name", ""),
            priority=int(raw.get("priority", 0)),
            when=raw.get("when") or {},
            then=list(raw.get("then") or []),
            on_success=OnSuccess(transition.get("on_success", OnSuccess.TERMINATE)),
        )


@dataclass(frozen=True)
class Rule(RuleSpec):
    id: int = 0

    def to_json(self) -> dict:
        return {"id": self.id, **super().to_json()}


@dataclass(frozen=True)
class PolicySpec:
    """The body of a policy create, edit or replacement: everything the operator chooses."""

    name: str
    description: str = ""
    trigger: PolicyTrigger = field(default_factory=PolicyTrigger)
    rules: tuple[RuleSpec, ...] = ()

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "trigger": self.trigger.to_json(),
            "rules": [rule.to_json() for rule in self.rules],
        }

    @classmethod
    def from_json(cls, raw: dict) -> PolicySpec:
        """Build from a body that passed ``validation.shape_problems`` (no shape errors)."""
        return cls(
            name=raw.get("name", ""),
            description=raw.get("description", "") or "",
            trigger=PolicyTrigger.from_json(raw.get("trigger") or {}),
            rules=tuple(RuleSpec.from_json(rule) for rule in raw.get("rules") or ()),
        )


@dataclass(frozen=True)
class Policy:
    id: int
    family_id: str
    version: int
    status: PolicyStatus
    name: str
    description: str
    trigger: PolicyTrigger
    rules: tuple[Rule, ...]
    created_at: datetime
    updated_at: datetime
    activated_at: datetime | None = None
    # How this version was made: "api", "console", "cli", or "apply" (``policy apply``);
    # "" for a version made before the service kept it.
    origin: str = ""

    @property
    def spec(self) -> PolicySpec:
        return PolicySpec(
            name=self.name,
            description=self.description,
            trigger=self.trigger,
            rules=tuple(
                RuleSpec(r.name, r.priority, r.when, r.then, r.on_success) for r in self.rules
            ),
        )

    @property
    def ordered_rules(self) -> list[Rule]:
        """Rules in run order: ``(priority, id)``."""
        return sorted(self.rules, key=lambda r: (r.priority, r.id))

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "family_id": self.family_id,
            "version": self.version,
            "status": self.status.value,
            "name": self.name,
            "description": self.description,
            "trigger": self.trigger.to_json(),
            "rules": [rule.to_json() for rule in self.ordered_rules],
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
            "activated_at": format_time(self.activated_at),
            "origin": self.origin or None,
        }


# An engineer's name is shown in cards, lists and sentences; their Jira account id is sent to
# Jira as it is, and Jira Cloud writes one in at most 128 characters.
MAX_DISPLAY_NAME = 200
MAX_ACCOUNT_ID = 128


def _weekday_index(day: str) -> int:
    return WEEKDAYS.index(day) if day in WEEKDAYS else len(WEEKDAYS)


class EngineerJson(TypedDict):
    """An engineer's record as the API and the command line show it (``Engineer.to_json``)."""

    email: str
    display_name: str
    jira_account_id: str
    dispatch_enabled: bool
    timezone: str
    working_hours: dict[str, list[str]] | None
    max_open_issues: int | None
    last_dispatched_at: str | None
    last_dispatched_issue: str
    created_at: str | None
    updated_at: str | None


@dataclass(frozen=True)
class Engineer:
    email: str
    display_name: str = ""
    jira_account_id: str = ""
    dispatch_enabled: bool = True
    last_dispatched_at: datetime | None = None
    last_dispatched_issue: str = ""
    timezone: str = ""  # an IANA name; "" reads as UTC
    # weekday key ("mon" … "sun") -> local "HH:MM-HH:MM" spans; None: any time
    working_hours: dict[str, list[str]] | None = None
    max_open_issues: int | None = None  # None: no cap of its own
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def __post_init__(self) -> None:
        # Monday first, whatever order the store gave (PostgreSQL's jsonb orders an object's
        # keys by their length, then bytes).
        hours = self.working_hours
        if hours is not None and list(hours) != sorted(hours, key=_weekday_index):
            object.__setattr__(self, "working_hours",
                               {day: hours[day] for day in sorted(hours, key=_weekday_index)})

    def to_json(self) -> EngineerJson:
        return {
            "email": self.email,
            "display_name": self.display_name,
            "jira_account_id": self.jira_account_id,
            "dispatch_enabled": self.dispatch_enabled,
            "timezone": self.timezone or "UTC",
            "working_hours": self.working_hours,
            "max_open_issues": self.max_open_issues,
            "last_dispatched_at": format_time(self.last_dispatched_at),
            "last_dispatched_issue": self.last_dispatched_issue,
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
        }


@dataclass(frozen=True)
class DispatchContext:
    """Per-issue dispatch memory, with the escalation slots.

    See docs/design.md, "The escalation slot".
    """

    issue_key: str
    assignee: str = ""
    assignee_l2: str = ""
    assignment_notification_state: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def holds_notification_state(self) -> bool:
        """True while any role slot has an escalation intent or marker."""
        for slot in self.assignment_notification_state.values():
            if slot and (slot.get("escalation_intent") or slot.get("auto_escalated_to_account_id")):
                return True
        return False

    def to_json(self) -> dict:
        return {
            "issue_key": self.issue_key,
            "assignee": self.assignee,
            "assignee_l2": self.assignee_l2,
            "assignment_notification_state": self.assignment_notification_state,
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
        }
