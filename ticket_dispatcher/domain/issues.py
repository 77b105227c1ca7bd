"""Build the issue snapshot (``model.Issue``) from Jira REST v2 JSON or from its own JSON form.

Pure parsing: the Jira client fetches, this module reads, so ``policy test`` can read a saved
``GET /rest/api/2/issue/{key}`` answer offline.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ticket_dispatcher.domain.catalog import PROJECT_KEY
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.timeutil import parse_rfc3339

# A Jira issue key as every entry point accepts it (the API, the sandbox): project, dash, number.
# Use it with ``fullmatch``; the \A..\Z anchors keep even ``match`` whole (``$`` would let
# "TCID-1\n" through, and Jira would be asked for "TCID-1%0A").
# The project part is ``catalog.PROJECT_KEY``, the rule ``project_key_in`` is validated by.
ISSUE_KEY = re.compile(rf"\A(?:{PROJECT_KEY.pattern})-[1-9][0-9]{{0,12}}\Z")

# The ``[jira]`` defaults (docs/operations.md, "Every key"), written once for config, actions
# and sandbox.
DEFAULT_L2_FIELD_ID = "customfield_10053"  # jira.l2_field_id
DEFAULT_SEVERITY_FIELD_ID = "customfield_10076"  # jira.severity_field_id
DEFAULT_AUTO_ASSIGN_LABEL = "auto-dispatch"  # removed after an assignment


# What neither PostgreSQL's text and jsonb nor UTF-8 can hold: a NUL, an unpaired surrogate
# (JSON's "\ud800" escape reads as one). Only a malformed answer or delivery carries them.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(text: str) -> str:
    """``text`` with each NUL and unpaired surrogate made U+FFFD, so that storing an issue's
    text (a trigger's input, an execution's context) and answering it as JSON never fail."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub("\ufffd", text)


def _malformed(what: str, path: str, message: str) -> InvalidInput:
    return InvalidInput(f"{what} is malformed: {path} {message}",
                        [Problem(path, message, "shape")])


def issue_from_any(raw: Any, **field_ids: str) -> Issue:
    """A Jira issue when it carries a ``fields`` object, otherwise an issue snapshot."""
    if isinstance(raw, dict) and isinstance(raw.get("fields"), dict):
        return issue_from_jira(raw, **field_ids)
    return issue_from_snapshot(raw)


# --- Jira REST v2 ---------------------------------------------------------------------------


def issue_from_jira(
    raw: Any,
    *,
    l2_field_id: str = DEFAULT_L2_FIELD_ID,
    severity_field_id: str = DEFAULT_SEVERITY_FIELD_ID,
) -> Issue:
    reader = _Reader("Jira issue", raw)
    key = reader.text(raw, "key")
    fields = reader.mapping(raw, "fields")
    project = reader.mapping(fields, "project", "fields.project")
    created = reader.optional_text(fields, "created", "fields.created")
    return Issue(
        key=key,
        project_key=reader.text(project, "key", "fields.project.key"),
        summary=reader.optional_text(fields, "summary", "fields.summary") or "",
        environment=reader.optional_text(fields, "environment", "fields.environment"),
        reporter=reader.jira_user(fields, "reporter"),
        assignee=reader.jira_user(fields, "assignee"),
        l2_assignee=reader.jira_user(fields, l2_field_id),
        created_at=reader.time(created, "fields.created") if created is not None else None,
        components=tuple(reader.named_list(fields, "components")),
        labels=tuple(reader.text_list(fields, "labels", "fields.labels")),
        priority=reader.named(fields, "priority", "name"),
        status=reader.named(fields, "status", "name"),
        severity=reader.named(fields, severity_field_id, "value"),
        status_changed_at=status_changed_at(raw.get("changelog")),
    )


def status_changed_at(changelog: Any) -> datetime | None:
    """The newest time a history of ``changelog`` (an issue's ``expand=changelog``) changed
    the status; None when there is none, or it does not read: it only times an ACK."""
    histories = changelog.get("histories") if isinstance(changelog, dict) else None
    newest: datetime | None = None
    for history in histories if isinstance(histories, list) else ():
        items = history.get("items") if isinstance(history, dict) else None
        if not isinstance(items, list) or not any(
                isinstance(item, dict) and item.get("field") == "status" for item in items):
            continue
        try:
            moment = parse_rfc3339(str(history.get("created")))
        except ValueError:
            continue
        newest = moment if newest is None or moment > newest else newest
    return newest


class _Reader:
    """Typed reads that fail with the JSON path of the first thing out of shape."""

    def __init__(self, what: str, raw: Any):
        self.what = what
        if not isinstance(raw, dict):
            raise _malformed(what, "$", "must be a JSON object")

    def fail(self, path: str, message: str) -> InvalidInput:
        return _malformed(self.what, path, message)

    def mapping(self, parent: dict, key: str, path: str | None = None) -> dict:
        value = parent.get(key)
        if not isinstance(value, dict):
            raise self.fail(path or key, "must be a JSON object")
        return value

    def text(self, parent: dict, key: str, path: str | None = None) -> str:
        value = parent.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(path or key, "must be a non-empty string")
        return _storable(value)

    def optional_text(self, parent: dict, key: str, path: str) -> str | None:
        value = parent.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(path, "must be a string or null")
        return _storable(value)

    def text_list(self, parent: dict, key: str, path: str) -> list[str]:
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.fail(path, "must be a list of strings")
        return [_storable(item) for item in value]

    def time(self, text: str, path: str) -> datetime:
        try:
            # Python 3.11 reads Jira's "+0000" offset (no colon) as well as RFC 3339.
            return parse_rfc3339(text)
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None

    def named(self, fields: dict, key: str, attribute: str) -> str | None:
        """``{"name": "P1"}`` / ``{"value": "S1"}`` or null → the text or None."""
        value = fields.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(f"fields.{key}", f'must be an object with "{attribute}" or null')
        return self.optional_text(value, attribute, f"fields.{key}.{attribute}")

    def named_list(self, fields: dict, key: str) -> list[str]:
        value = fields.get(key) or []
        if not isinstance(value, list):
            raise self.fail(f"fields.{key}", "must be a list")
        names = []
        for index, item in enumerate(value):
            path = f"fields.{key}[{index}]"
            if not isinstance(item, dict):
                raise self.fail(path, 'must be an object with "name"')
            names.append(self.text(item, "name", f"{path}.name"))
        return names

    def jira_user(self, fields: dict, key: str) -> JiraUser | None:
        value = fields.get(key)
        if value is None:
            return None
        path = f"fields.{key}"
        if not isinstance(value, dict):
            raise self.fail(path, "must be a Jira user object or null")
        active = value.get("active", True)
        if not isinstance(active, bool):
            raise self.fail(f"{path}.active", "must be true or false")
        return JiraUser(
            account_id=self.text(value, "accountId", f"{path}.accountId"),
            email=(self.optional_text(value, "emailAddress", f"{path}.emailAddress") or "").lower(),
            display_name=self.optional_text(value, "displayName", f"{path}.displayName") or "",
            active=active,
            account_type=self.optional_text(value, "accountType", f"{path}.accountType")
            or "atlassian",
        )


# --- the snapshot's own JSON (Issue.to_json) ------------------------------------------------


def issue_from_snapshot(raw: Any) -> Issue:
    """The inverse of ``Issue.to_json`` (round-trips exactly)."""
    reader = _Reader("issue snapshot", raw)
    custom = raw.get("custom_fields")
    custom = {} if custom is None else custom
    if not isinstance(custom, dict):
        raise reader.fail("custom_fields", "must be a JSON object")
    created = reader.optional_text(raw, "created_at", "created_at")
    return Issue(
        key=reader.text(raw, "key"),
        project_key=reader.text(raw, "project_key"),
        summary=reader.optional_text(raw, "summary", "summary") or "",
        environment=reader.optional_text(raw, "environment", "environment"),
        reporter=_snapshot_user(reader, raw, "reporter"),
        assignee=_snapshot_user(reader, raw, "assignee"),
        l2_assignee=_snapshot_user(reader, raw, "l2_assignee"),
        created_at=reader.time(created, "created_at") if created is not None else None,
        components=tuple(reader.text_list(raw, "components", "components")),
        labels=tuple(reader.text_list(raw, "labels", "labels")),
        priority=reader.optional_text(raw, "priority", "priority"),
        status=reader.optional_text(raw, "status", "status"),
        severity=reader.optional_text(custom, "severity", "custom_fields.severity"),
    )


def _snapshot_user(reader: _Reader, raw: dict, key: str) -> JiraUser | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise reader.fail(key, "must be a user object or null")
    return JiraUser.from_json(value)
