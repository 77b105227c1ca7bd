"""What a Jira webhook delivery asks of the service (docs/jira-webhooks.md): the triggers the
Jira Automation rules of docs/jira-automation.md would have posted for the same change.

- ``jira:issue_created``: one ordinary trigger of source ``jira_issue_created``.
- ``jira:issue_updated``, per notification role (the Assignee, the L2 Assignee): the role's
  person changed to someone, or the priority or severity rose from a value the role's policies
  do not call urgent to one they do while the person is set. Either makes one trigger of the
  role's reserved source that first adds the role's label, and only when an active policy of
  the role could match the issue once the label is on it.

Urgency is the active policies' own: the values of their urgent rule (one ``in`` leaf on the
priority or the severity), evaluated on the value before the change and after it.

What such a trigger then adds to the live issue, before it matches policies, is decided here
too (``role_label_step``, ``required_label``); the trigger writes it through its Jira port
(actors/trigger.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ticket_dispatcher.domain.catalog import NOTIFICATION_ROLES, URGENCY_FIELDS, NotificationRole
from ticket_dispatcher.domain.conditions import evaluate
from ticket_dispatcher.domain.execution import TriggerInput
from ticket_dispatcher.domain.issues import ISSUE_KEY, issue_from_jira
from ticket_dispatcher.domain.matching import match_policies, policy_matches
from ticket_dispatcher.domain.model import Issue, JiraUser, Policy
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.timeutil import format_time, parse_rfc3339

# The Jira fields behind each condition field of the catalog (domain/catalog.py); the
# severity's is configured, and ``now`` reads no field.
_CONDITION_FIELDS = {
    "issue.project_key": "project", "issue.environment": "environment",
    "issue.reporter_email": "reporter", "issue.summary": "summary",
    "issue.primary_component": "components", "issue.components": "components",
    "issue.component": "components", "issue.priority": "priority", "issue.status": "status",
    "issue.labels": "labels", "issue.created_at": "created",
}
_SEVERITY_PATH = "issue.custom_fields.severity"
# What a snapshot carries whatever the policies read: who holds the issue (the Assignee, the L2
# Assignee), its project, its status and its labels.
_ALWAYS_READ = ("project", "assignee", "status", "labels")

ISSUE_CREATED = "jira:issue_created"
ISSUE_UPDATED = "jira:issue_updated"
EVENTS = (ISSUE_CREATED, ISSUE_UPDATED)
# The source of the ordinary trigger a created issue becomes.
CREATED_SOURCE = "jira_issue_created"

_PRIORITY, _SEVERITY = URGENCY_FIELDS  # the urgent rule's field paths
# An urgent rule tests one field of the issue, never the time: any time will do.
_NO_TIME = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Change:
    """One item of an update's changelog: the field's id, its value after the change as an id
    (``to``: an account id, an option id), and its value before and after as text
    (``fromString``, ``toString``)."""

    field_id: str
    after: str | None
    before_text: str | None
    after_text: str | None


@dataclass(frozen=True)
class Delivery:
    event: str
    issue: Issue
    changes: tuple[Change, ...]
    at: datetime | None  # when Jira says the change happened

    @property
    def created(self) -> bool:
        return self.event == ISSUE_CREATED


@dataclass(frozen=True)
class WebhookTrigger:
    """A trigger a delivery makes. A created issue's adds ``label`` (the auto-assign label)
    where a policy needs it. A role's trigger first adds ``label`` to the issue, when
    the live issue still shows ``account_id`` in the role and, for a rise in urgency, a value
    that ``urgent`` (the urgent rule's condition) calls urgent; else a later change has
    taken over."""

    source: str
    label: str | None = None
    role: str | None = None
    account_id: str | None = None
    urgent: dict | None = None  # the urgent rule's condition, for a rise in urgency
    changed_at: datetime | None = None  # when Jira says the change happened

    def to_input(self, issue_key: str, delivery_id: str,
                 snapshot: dict | None = None) -> TriggerInput:
        """The trigger's stored ``input``; ``snapshot``: the delivery's issue, when it arrived
        fresh (``snapshot_of``)."""
        shown: TriggerInput = {"issue_key": issue_key, "webhook_delivery": delivery_id}
        if snapshot is not None:
            shown["snapshot"] = snapshot
        if self.label is not None:
            shown["add_label"] = {"label": self.label, "role": self.role,
                                  "account_id": self.account_id}
            if self.changed_at is not None:
                shown["add_label"]["changed_at"] = format_time(self.changed_at)
            if self.urgent is not None:
                shown["add_label"]["urgent"] = self.urgent
        return shown


def parse_delivery(raw: Any, *, l2_field_id: str, severity_field_id: str) -> Delivery | None:
    """The delivery in a webhook's body; None for a Jira event this service does not take
    (``jira:issue_deleted``, a comment); ``InvalidInput`` naming what is missing when the body
    is no Jira issue delivery."""
    if not isinstance(raw, dict) or not isinstance(raw.get("webhookEvent"), str):
        raise InvalidInput("the body is not a Jira webhook delivery: it has no webhookEvent",
                           [Problem("webhookEvent", "is required")])
    event = raw["webhookEvent"]
    if event not in EVENTS:
        return None
    issue = issue_from_jira(raw.get("issue"), l2_field_id=l2_field_id,
                            severity_field_id=severity_field_id)
    if not ISSUE_KEY.fullmatch(issue.key):  # as a posted trigger's key is checked
        raise InvalidInput("the delivery's issue key is not a Jira issue key like TCID-12345",
                           [Problem("issue.key", "must be a Jira issue key like TCID-12345")])
    changes: list[Change] = []
    changelog = raw.get("changelog")
    items = changelog.get("items") if isinstance(changelog, dict) else None
    if changelog is not None and not isinstance(items, list):
        raise InvalidInput("the delivery's changelog has no list of items",
                           [Problem("changelog.items", "must be a list")])
    for k, item in enumerate(items or ()):
        if not isinstance(item, dict):
            raise InvalidInput("a changelog item is not an object",
                               [Problem(f"changelog.items[{k}]", "must be an object")])
        field_id = item.get("fieldId") or item.get("field")
        if not isinstance(field_id, str):
            continue  # an item this service has no use for
        changes.append(Change(field_id, _text(item.get("to")),
                              _text(item.get("fromString")), _text(item.get("toString"))))
    stamp = raw.get("timestamp")
    return Delivery(event, issue, tuple(changes), _moment(stamp))


def _moment(stamp: Any) -> datetime | None:
    """The delivery's ``timestamp`` (milliseconds since the epoch) as a time; None when it is
    missing or no time a calendar holds (not after 1970, or past the year 9999)."""
    if not isinstance(stamp, int) or isinstance(stamp, bool) or stamp <= 0:
        return None
    try:
        return datetime.fromtimestamp(stamp / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


def triggers_for(delivery: Delivery, policies: Iterable[Policy], *, l2_field_id: str,
                 severity_field_id: str, auto_assign_label: str = "") -> list[WebhookTrigger]:
    """The triggers ``delivery`` makes against the active ``policies``: for a created issue
    one, which adds ``auto_assign_label`` where a policy takes the issue only with it (the
    trigger decides, on the live issue); for an update at most one per role, in the order of
    ``NOTIFICATION_ROLES``."""
    if delivery.created:
        return [WebhookTrigger(CREATED_SOURCE, auto_assign_label or None)]
    policies = list(policies)
    urgency_fields = {"priority": _PRIORITY, severity_field_id: _SEVERITY}
    person_fields = {"assignee": "assignee", l2_field_id: "l2_assignee"}
    made: list[WebhookTrigger] = []
    for role in NOTIFICATION_ROLES:
        person = _person(delivery.issue, role)
        candidates = _could_match(policies, role, delivery.issue)
        if person is None or not candidates:
            continue
        assigned = any(person_fields.get(c.field_id) == role.role and c.after is not None
                       for c in delivery.changes)
        if assigned:
            made.append(WebhookTrigger(role.source, role.label, role.role, person.account_id,
                                       changed_at=delivery.at))
            continue
        for change in delivery.changes:
            path = urgency_fields.get(change.field_id)
            urgent = _rise(candidates, delivery.issue, path, change) if path else None
            if urgent is not None:
                made.append(WebhookTrigger(role.source, role.label, role.role,
                                           person.account_id, urgent, delivery.at))
                break
    return made


def _person(issue: Issue, role: NotificationRole) -> JiraUser | None:
    person = issue.assignee if role.role == "assignee" else issue.l2_assignee
    return person if person is not None and person.account_id else None


def _could_match(policies: Sequence[Policy], role: NotificationRole,
                 issue: Issue) -> list[Policy]:
    """The active policies of the role's source that would take the issue once the role's
    label is on it."""
    labelled = dataclasses.replace(issue, labels=(*issue.labels, role.label))
    return [p for p in policies if policy_matches(p, role.source, labelled)]


def _rise(policies: Sequence[Policy], issue: Issue, path: str,
          change: Change) -> dict | None:
    """The urgent rule's condition of the first policy that calls the value after ``change``
    urgent and the value before it not; None when none does."""
    for policy in policies:
        for rule in policy.rules:
            when = rule.when
            if when.get("field") != path or when.get("operator") != "in":
                continue
            if _urgent(when, issue, path, change.after_text) and not _urgent(
                    when, issue, path, change.before_text):
                return when
    return None


def _urgent(when: dict, issue: Issue, path: str, value: str | None) -> bool:
    """Whether the urgent rule's condition holds with ``value`` in the field ``path``."""
    if path == _PRIORITY:
        issue = dataclasses.replace(issue, priority=value)
    else:
        issue = dataclasses.replace(issue, severity=value)
    return evaluate(when, issue, _NO_TIME)[0]


def superseded(issue: Issue, trigger_input: TriggerInput) -> str:
    """Why the live ``issue`` no longer shows what a role trigger's delivery saw (a later
    change took over, and its own delivery handles it), or "" when it still does."""
    wanted = trigger_input.get("add_label") or {}
    role = next((r for r in NOTIFICATION_ROLES if r.role == wanted.get("role")), None)
    if role is None:
        return ""
    person = _person(issue, role)
    if person is None or person.account_id != wanted.get("account_id"):
        return f"the {role.role.replace('_', ' ')} changed since the delivery"
    urgent = wanted.get("urgent")
    if urgent and not evaluate(urgent, issue, _NO_TIME)[0]:
        return "the issue is no longer urgent"
    return ""


def changed_at(trigger_input: TriggerInput) -> datetime | None:
    """When the change behind a role trigger happened, as its delivery said; None when it did
    not say."""
    text = (trigger_input.get("add_label") or {}).get("changed_at")
    try:
        return parse_rfc3339(text) if isinstance(text, str) else None
    except ValueError:
        return None


# -- the label step: what a webhook's trigger adds to the live issue before matching ----------

STARTED_ALREADY = "the role's workflow was started for this change already"


@dataclass(frozen=True)
class LabelStep:
    """What a role trigger does before matching: add ``label`` to the live issue, or nothing
    (None); ``ends``: the trigger ends here, completed, and why."""

    label: str | None = None
    ends: str = ""


def role_label_step(issue: Issue, trigger_input: TriggerInput,
                    started_since: Callable[[datetime], bool]) -> LabelStep:
    """A role trigger adds the role's label to the live ``issue`` first, as the Automation
    rule did, while the issue still shows what the delivery saw (else a later change took
    over, and its own delivery acts on it), and while no workflow of the role was started
    since the change (by an Automation rule's trigger, while both run): ``started_since``
    answers that from the store, asked only when all else says to add. Nothing for any other
    trigger, nor when the label is there already."""
    wanted = trigger_input.get("add_label") or {}
    label = wanted.get("label")
    if not wanted.get("role") or label in issue.labels:
        return LabelStep()
    stale = superseded(issue, trigger_input)
    since = changed_at(trigger_input)
    if not stale and since is not None and started_since(since):
        stale = STARTED_ALREADY
    if stale:
        return LabelStep(ends=f"{stale}; the label {label} was not added")
    return LabelStep(label=label)


def required_label(issue: Issue, trigger_input: TriggerInput, source: str,
                   active: Sequence[Policy]) -> str | None:
    """A created issue's trigger that no ``active`` policy matched: the auto-assign label to
    add, as the Automation rule did, when an active policy takes the issue only with it and
    nobody is assigned yet; else None."""
    wanted = trigger_input.get("add_label") or {}
    label = wanted.get("label")
    if not label or wanted.get("role") or label in issue.labels or issue.assignee is not None:
        return None
    labelled = dataclasses.replace(issue, labels=(*issue.labels, label))
    return label if match_policies(active, source, labelled) else None


# -- the delivery's issue as the dispatch's snapshot (docs/design.md, "The life of a trigger") --


def snapshot_of(raw: Any, delivery: Delivery, received_at: datetime, max_age: timedelta, *,
                l2_field_id: str, severity_field_id: str) -> dict | None:
    """What a delivery's trigger carries of its issue: the key, the fields of the raw delivery
    that a dispatch may read (no others: a delivery holds every field of the issue), and when
    the event happened. None when the delivery did not arrive within ``max_age`` of its
    event's timestamp, or has none."""
    fields = {*_ALWAYS_READ, *_CONDITION_FIELDS.values(), l2_field_id, severity_field_id}
    if delivery.at is None or abs(received_at - delivery.at) > max_age:
        return None
    issue = raw.get("issue") if isinstance(raw, dict) else None
    carried = issue.get("fields") if isinstance(issue, dict) else None
    if not isinstance(carried, dict):
        return None
    return {"at": format_time(delivery.at), "issue": {
        "key": delivery.issue.key,
        "fields": {name: carried[name] for name in sorted(fields) if name in carried}}}


def fields_read(policies: Iterable[Policy], *, l2_field_id: str,
                severity_field_id: str) -> set[str]:
    """The Jira fields a dispatch reads of its snapshot under ``policies``: those their
    conditions test, and always the project, the Assignee, the L2 Assignee, the status and
    the labels."""
    paths: set[str] = set()
    for policy in policies:
        for rule in policy.rules:
            _condition_paths(rule.when, paths)
    read = {_CONDITION_FIELDS[path] for path in paths if path in _CONDITION_FIELDS}
    if _SEVERITY_PATH in paths:
        read.add(severity_field_id)
    return read | {*_ALWAYS_READ, l2_field_id}


def _condition_paths(node: Any, paths: set[str]) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("field"), str):
            paths.add(node["field"])
        for value in node.values():
            _condition_paths(value, paths)
    elif isinstance(node, list):
        for value in node:
            _condition_paths(value, paths)


def snapshot_at(trigger_input: TriggerInput) -> datetime | None:
    """When the event of the trigger's snapshot happened; None without a snapshot."""
    snapshot = trigger_input.get("snapshot")
    stamp = snapshot.get("at") if isinstance(snapshot, dict) else None
    try:
        return parse_rfc3339(stamp) if isinstance(stamp, str) else None
    except ValueError:
        return None


def fresh_snapshot(trigger_input: TriggerInput, policies: Iterable[Policy], now: datetime,
                   max_age: timedelta, *, l2_field_id: str,
                   severity_field_id: str) -> Issue | None:
    """The issue a webhook's trigger matches without reading it, or None (it is read): the
    trigger carries its delivery's issue (which arrived within ``max_age`` of the event), the
    trigger is processed within ``max_age`` of the event too, and the snapshot has every
    field ``fields_read`` names."""
    snapshot = trigger_input.get("snapshot")
    at = snapshot_at(trigger_input)
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("issue"), dict):
        return None
    if at is None or abs(now - at) > max_age:
        return None
    carried = snapshot["issue"].get("fields")
    wanted = fields_read(policies, l2_field_id=l2_field_id, severity_field_id=severity_field_id)
    if not isinstance(carried, dict) or not wanted <= carried.keys():
        return None
    try:
        return issue_from_jira(snapshot["issue"], l2_field_id=l2_field_id,
                               severity_field_id=severity_field_id)
    except InvalidInput:
        return None
