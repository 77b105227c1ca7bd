"""Jira Cloud REST v2 (the platform API, whose approximate count is served under v2 as under v3)
and the Service Desk comment API."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from requests.auth import HTTPBasicAuth

from ticket_dispatcher.clock import Clock, SystemClock
from ticket_dispatcher.config import JiraConfig
from ticket_dispatcher.domain.issues import issue_from_jira
from ticket_dispatcher.domain.jql import jql_string
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.domain.ports import Answer, TriageChange, answer_each
from ticket_dispatcher.errors import IntegrationError, InvalidInput
from ticket_dispatcher.integrations.call_policy import RateGate
from ticket_dispatcher.integrations.http import HttpClient, IntegrationRejected, segment

SERVICE = "jira"
# Everything the issue snapshot (``model.Issue``) reads, plus the two configured custom fields.
ISSUE_FIELDS = ("summary", "project", "environment", "reporter", "assignee", "created",
                "components", "labels", "priority", "status")
# Jira Cloud's count of a JQL's issues: body {"jql": ...}, answer {"count": n}. It replaces the
# ``total`` the deprecated ``/search`` used to give; the JQL must be bounded (restricted by a
# field such as the assignee).
APPROXIMATE_COUNT = "/rest/api/2/search/approximate-count"
# Jira Cloud's issue search (``searchAndReconsileIssuesUsingJqlPost``): body {"jql", "fields",
# "maxResults"}, answer {"issues": [...], "nextPageToken"?}. The ACK watcher reads its parked
# waits' issues with it, up to ``SEARCH_KEYS`` keys per request.
SEARCH = "/rest/api/2/search/jql"
SEARCH_KEYS = 100
# What Jira's 400 says of a field an edit names that the project's edit screen does not have:
# "Field 'assignee' cannot be set. It is not on the appropriate screen, or unknown."
NOT_ON_SCREEN = "not on the appropriate screen"
# How long a project's refusal is remembered: its screens change seldom, and meanwhile each
# ticket of it goes straight to the writes one by one instead of paying for the refusal.
SCREEN_REFUSAL_MEMORY = timedelta(hours=1)


class ScreenRefusals:
    """The projects whose edit screen refused an edit of the assignee (or of the L2 field)
    with the labels, each for ``SCREEN_REFUSAL_MEMORY``. Kept in this process's memory, shared
    by its Jira clients (thread-safe): each replica learns it on its own, and a restart
    forgets it."""

    def __init__(self, clock: Clock, remember_for: timedelta = SCREEN_REFUSAL_MEMORY):
        self._clock = clock
        self._remember_for = remember_for
        self._lock = threading.Lock()
        self._until: dict[str, datetime] = {}  # project key -> when its refusal is forgotten

    def refused(self, project: str) -> bool:
        with self._lock:
            until = self._until.get(project)
            if until is not None and self._clock.now() >= until:
                del self._until[project]
                until = None
            return until is not None

    def note(self, project: str) -> None:
        with self._lock:
            self._until[project] = self._clock.now() + self._remember_for


class JiraClient:
    """The ``Jira`` port (domain/ports.py) over HTTP."""

    def __init__(
        self,
        config: JiraConfig,
        *,
        connect_timeout: float = 3,
        read_timeout: float = 10,
        sleep: Callable[[float], None] = time.sleep,
        clock: Clock | None = None,
        gate: RateGate | None = None,
        refusals: ScreenRefusals | None = None,
    ):
        """``refusals``: the projects whose edit screen refused the one edit, shared by the
        process's clients (a client of its own keeps its own)."""
        self.l2_field_id = config.l2_field_id
        self.refusals = refusals or ScreenRefusals(clock or SystemClock())
        self.severity_field_id = config.severity_field_id
        self.http = HttpClient(
            SERVICE, config.base_url, auth=HTTPBasicAuth(config.email, config.api_token),
            connect_timeout=connect_timeout, read_timeout=read_timeout, sleep=sleep, clock=clock,
            secrets=(config.api_token, config.basic_credential()), gate=gate)

    def close(self) -> None:
        self.http.close()

    def load_issue(self, key: str) -> Issue:
        """The live issue (a 404 is an ``IntegrationError`` with status 404)."""
        path = f"/rest/api/2/issue/{segment(key)}"
        fields = ",".join((*ISSUE_FIELDS, self.l2_field_id, self.severity_field_id))
        # With its recent changelog: a status-change ACK is timed by the change itself.
        raw = self.http.request_json("GET", path, params={"fields": fields,
                                                          "expand": "changelog"})
        try:
            return issue_from_jira(raw, l2_field_id=self.l2_field_id,
                                   severity_field_id=self.severity_field_id)
        except InvalidInput as exc:  # the message quotes what Jira sent: mask it too
            raise IntegrationError(f"jira GET {path}: {self.http.safe(exc.message)}",
                                   status=200, service=SERVICE) from None

    def load_issues(self, keys: Sequence[str]) -> dict[str, Issue]:
        """The live issues of up to ``SEARCH_KEYS`` keys in one search, by key. A key Jira
        does not answer for (deleted, moved, not visible) is missing from the result; the
        caller reads those one by one. Jira may answer in pages, fewer issues a page than
        asked when many fields are asked for: each next page is read too.

        Jira refuses the whole search (400) when the JQL names an issue that does not exist
        any more ("An issue with key 'TCID-7' does not exist for field 'key'."): the keys its
        answer names are left out and the rest searched again. A 400 that names none of them
        is raised."""
        if not keys:
            return {}
        if len(keys) > SEARCH_KEYS:
            raise ValueError(f"at most {SEARCH_KEYS} keys per search")
        remaining = list(keys)
        while remaining:
            try:
                return self._search_keys(remaining)
            except IntegrationRejected as exc:
                named = [key for key in remaining if f"'{key}'" in exc.detail]
                if exc.status != 400 or not named:
                    raise
                remaining = [key for key in remaining if key not in named]
        return {}

    def _search_keys(self, keys: Sequence[str]) -> dict[str, Issue]:
        quoted = ", ".join(jql_string(key) for key in keys)
        body = {"jql": f"key in ({quoted})", "maxResults": len(keys),
                "fields": [*ISSUE_FIELDS, self.l2_field_id, self.severity_field_id],
                "expand": "changelog"}  # a comma-separated string on this endpoint
        wanted, issues = set(keys), dict[str, Issue]()
        for _ in keys:  # a page holds one issue at least: never more pages than keys
            found = self.http.request_json("POST", SEARCH, json=body, repeatable=True)
            raw = found.get("issues") if isinstance(found, dict) else None
            if not isinstance(raw, list):
                raise IntegrationError(f"jira POST {SEARCH}: the answer has no issues",
                                       status=200, service=SERVICE)
            issues.update((issue.key, issue) for issue in map(self._searched, raw)
                          if issue.key in wanted)
            token = found.get("nextPageToken")
            if not raw or not isinstance(token, str) or not token or found.get("isLast"):
                break
            body = {**body, "nextPageToken": token}
        return issues

    def _searched(self, raw: Any) -> Issue:
        try:
            return issue_from_jira(raw, l2_field_id=self.l2_field_id,
                                   severity_field_id=self.severity_field_id)
        except InvalidInput as exc:
            raise IntegrationError(f"jira POST {SEARCH}: {self.http.safe(exc.message)}",
                                   status=200, service=SERVICE) from None

    def assign(self, key: str, account_id: str | None) -> None:
        """Set the Assignee (None unassigns)."""
        self.http.request("PUT", f"/rest/api/2/issue/{segment(key)}/assignee",
                          json={"accountId": account_id}, expected=(204,))

    def set_l2_assignee(self, key: str, account_id: str | None) -> None:
        """Set the L2 single-user picker (``jira.l2_field_id``)."""
        value = None if account_id is None else {"accountId": account_id}
        self._edit(key, {"fields": {self.l2_field_id: value}})

    def assign_and_label(self, key: str, account_id: str, remove_labels: Iterable[str] = (),
                         *, l2: bool = False) -> bool:
        """Set the Assignee (with ``l2`` the L2 user picker) and remove ``remove_labels`` in
        one edit of the issue: ``fields`` sets the user, ``update.labels`` removes. Whether the
        edit was made: False when Jira refused it (a 400: nothing was written), or when the
        project's edit screen refused the field within the last hour (a 400 saying it "is not
        on the appropriate screen", remembered in ``ScreenRefusals``); the caller then writes
        them one by one
        (``assign`` or ``set_l2_assignee``, then ``edit_labels``)."""
        project = key.rsplit("-", 1)[0]
        if self.refusals.refused(project):
            return False
        field = self.l2_field_id if l2 else "assignee"
        body: dict[str, Any] = {"fields": {field: {"accountId": account_id}}}
        labels = _label_operations((), remove_labels)
        if labels:
            body["update"] = {"labels": labels}
        try:
            self._edit(key, body)
        except IntegrationRejected as exc:
            if exc.status != 400 or not labels:
                raise
            # Refused, so nothing was written. One by one, the user and the labels each meet
            # their own answer: a label Jira refuses no longer stops the assignment.
            if NOT_ON_SCREEN in exc.detail:
                self.refusals.note(project)
            return False
        return True

    def edit_labels(self, key: str, add: Iterable[str] = (), remove: Iterable[str] = ()) -> None:
        """Add and remove labels in one edit; the other labels stay untouched."""
        operations = _label_operations(add, remove)
        if operations:
            self._edit(key, {"update": {"labels": operations}})

    def apply_triage(self, key: str, change: TriageChange) -> None:
        """The whole triage change in one edit: priority, components and raw
        fields are set under ``fields``, labels added and removed under ``update``."""
        fields = dict(change.fields)
        if change.priority is not None:
            fields["priority"] = {"name": change.priority}
        if change.components is not None:
            fields["components"] = [{"name": name} for name in change.components]
        body: dict[str, Any] = {"fields": fields}
        labels = _label_operations(change.labels_add, change.labels_remove)
        if labels:
            body["update"] = {"labels": labels}
        self._edit(key, body)

    def find_user_by_email(self, email: str) -> JiraUser | None:
        """The account whose email matches exactly (case-insensitive); Jira's search is fuzzy,
        so a prefix or display-name hit never counts. Several exact hits: the first
        active one."""
        wanted = email.strip().lower()
        if not wanted:
            return None
        found = self.http.request_json("GET", "/rest/api/2/user/search",
                                       params={"query": wanted})
        if not isinstance(found, list):
            raise IntegrationError("jira GET /rest/api/2/user/search: the answer is not a list",
                                   status=200, service=SERVICE)
        exact = [user for raw in found if _email_of(raw) == wanted
                 if (user := _user(raw)) is not None]
        active = [user for user in exact if user.active]
        return (active or exact)[0] if exact else None

    def add_internal_comment(self, key: str, text: str) -> None:
        """A comment agents see and customers do not (``public: false``)."""
        self.http.request("POST", f"/rest/servicedeskapi/request/{segment(key)}/comment",
                          json={"body": text, "public": False}, expected=(201,))

    def approximate_count(self, jql: str) -> int:
        """How many issues ``jql`` matches (Jira's approximate count: a change made seconds
        ago may not show yet). A JQL Jira cannot parse is its 400, an ``IntegrationError``."""
        found = self.http.request_json("POST", APPROXIMATE_COUNT, json={"jql": jql},
                                       repeatable=True)
        count = found.get("count") if isinstance(found, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise IntegrationError(f"jira POST {APPROXIMATE_COUNT}: the answer has no count",
                                   status=200, service=SERVICE)
        return count

    def count_issues(self, jqls: Sequence[str]) -> list[Answer[int]]:
        """``approximate_count`` of each JQL, one after another (``JiraPool`` runs them
        concurrently, each on one of its clients)."""
        return answer_each(self.approximate_count, jqls)

    def find_users_by_email(self, emails: Sequence[str]) -> list[Answer[JiraUser | None]]:
        """``find_user_by_email`` of each email, one after another."""
        return answer_each(self.find_user_by_email, emails)

    def _edit(self, key: str, body: dict[str, Any]) -> None:
        self.http.request("PUT", f"/rest/api/2/issue/{segment(key)}", json=body,
                          expected=(204,))


def _label_operations(add: Iterable[str], remove: Iterable[str]) -> list[dict[str, str]]:
    return [{"add": label} for label in add] + [{"remove": label} for label in remove]


def _email_of(raw: Any) -> str:
    if not isinstance(raw, dict) or not isinstance(raw.get("emailAddress"), str):
        return ""
    return raw["emailAddress"].strip().lower()


def _user(raw: dict) -> JiraUser | None:
    account_id = raw.get("accountId")
    if not isinstance(account_id, str) or not account_id:
        return None
    return JiraUser(
        account_id=account_id,
        email=_email_of(raw),
        display_name=str(raw.get("displayName") or ""),
        active=raw.get("active", True) is not False,
        account_type=str(raw.get("accountType") or "atlassian"),
    )
