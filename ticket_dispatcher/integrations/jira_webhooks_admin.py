"""Jira's admin webhooks: the ones a Jira administrator registers, which Jira signs with their
secret (``X-Hub-Signature``). ``ticket-dispatcher jira webhook`` registers and shows the one
that feeds the service's webhook route.

The endpoint is ``/rest/webhooks/1.0/webhook`` (Atlassian's "Webhooks" page, Jira Cloud and
Data Center: the webhooks registered there are the admin webhooks): ``GET`` lists them and
``POST`` registers one, ``PUT /rest/webhooks/1.0/webhook/{id}`` replaces one; administrators
only. A webhook is ``{"name", "url", "events": [...], "filters":
{"issue-related-events-section": JQL}, "excludeBody", "secret"}``; an empty JQL means every
project's issues. Jira names a webhook by ``self``, a URL ending in its id (some versions also
give ``id``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from requests.auth import HTTPBasicAuth

from ticket_dispatcher.config import JiraConfig
from ticket_dispatcher.domain.jql import jql_string
from ticket_dispatcher.domain.model import Policy, PolicyStatus
from ticket_dispatcher.domain.webhooks import EVENTS
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.http import HttpClient, segment

SERVICE = "jira"
WEBHOOKS = "/rest/webhooks/1.0/webhook"
# The key of the JQL that narrows the issue events to some issues.
ISSUE_FILTER = "issue-related-events-section"


def taking_triggers(policies: Iterable[Policy]) -> list[Policy]:
    """The active policies whose trigger is switched on: the ones a delivery can reach."""
    return [policy for policy in policies
            if policy.status is PolicyStatus.ACTIVE and policy.trigger.enable]


def projects_jql(policies: Iterable[Policy]) -> str:
    """The JQL that keeps the issue events of the projects ``policies`` take:
    ``project in ("A", "B")``, keys sorted and quoted; "" (every project) as soon as one of
    them takes any project. Matching compares keys exactly, so they are kept as written."""
    keys: set[str] = set()
    for policy in policies:
        if not policy.trigger.project_key_in:
            return ""
        keys.update(policy.trigger.project_key_in)
    return f"project in ({', '.join(jql_string(key) for key in sorted(keys))})"


@dataclass(frozen=True)
class WebhookRegistration:
    """What ``create`` and ``update`` send. The secret never shows in a repr."""

    name: str
    url: str
    jql: str  # "" every project
    secret: str = field(repr=False)
    events: tuple[str, ...] = EVENTS

    def body(self) -> dict:
        return {"name": self.name, "url": self.url, "events": list(self.events),
                "filters": {ISSUE_FILTER: self.jql}, "excludeBody": False,
                "secret": self.secret}


@dataclass(frozen=True)
class AdminWebhook:
    """A registered admin webhook as Jira describes it; whether it has a secret, never the
    secret itself. ``enabled`` and ``secret_set`` are None when Jira's answer does not say."""

    id: str
    name: str
    url: str
    events: tuple[str, ...]
    jql: str
    enabled: bool | None
    secret_set: bool | None

    @classmethod
    def from_jira(cls, raw: dict) -> AdminWebhook:
        filters = raw.get("filters")
        jql = filters.get(ISSUE_FILTER) if isinstance(filters, dict) else None
        events = raw.get("events")
        enabled = raw.get("enabled", raw.get("active"))
        secret = raw.get("secret")
        return cls(
            id=_webhook_id(raw),
            name=_text(raw.get("name")),
            url=_text(raw.get("url")),
            events=tuple(str(e) for e in events) if isinstance(events, list) else (),
            jql=_text(jql),
            enabled=enabled if isinstance(enabled, bool) else None,
            secret_set=None if secret is None else bool(secret),
        )

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "url": self.url, "events": list(self.events),
                "jql_filter": self.jql or None, "enabled": self.enabled,
                "secret_set": self.secret_set}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _webhook_id(raw: dict) -> str:
    """The id Jira gives, else the last segment of ``self``; "" when it gives neither."""
    given = raw.get("id")
    if isinstance(given, int | str) and not isinstance(given, bool) and str(given):
        return str(given)
    link = _text(raw.get("self")).rstrip("/")
    return link.rpartition("/")[2] if "/" in link else ""


class JiraWebhookAdmin:
    """The admin-webhook endpoint over the project's ``HttpClient``, with the configured Jira
    credentials; those and the webhook secrets are masked in every error message."""

    def __init__(self, jira: JiraConfig, *, connect_timeout: float = 3,
                 read_timeout: float = 10):
        self.http = HttpClient(
            SERVICE, jira.base_url, auth=HTTPBasicAuth(jira.email, jira.api_token),
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            secrets=(jira.api_token, jira.basic_credential(), *jira.webhook_secrets))

    def close(self) -> None:
        self.http.close()

    def registered(self) -> list[AdminWebhook]:
        """Every admin webhook of the Jira site."""
        found = self.http.request_json("GET", WEBHOOKS)
        if not isinstance(found, list):
            raise IntegrationError(f"jira GET {WEBHOOKS}: the answer is not a list",
                                   status=200, service=SERVICE)
        return [AdminWebhook.from_jira(item) for item in found if isinstance(item, dict)]

    def create(self, registration: WebhookRegistration) -> AdminWebhook:
        return self._written("POST", WEBHOOKS, registration, (200, 201))

    def update(self, webhook_id: str, registration: WebhookRegistration) -> AdminWebhook:
        """Replaces the webhook's name, URL, events, filter and secret."""
        return self._written("PUT", f"{WEBHOOKS}/{segment(webhook_id)}", registration, (200,))

    def _written(self, method: str, path: str, registration: WebhookRegistration,
                 expected: tuple[int, ...]) -> AdminWebhook:
        answer = self.http.request_json(method, path, json=registration.body(),
                                        expected=expected)
        if not isinstance(answer, dict):
            raise IntegrationError(f"jira {method} {path}: the answer is not a webhook",
                                   status=200, service=SERVICE)
        return AdminWebhook.from_jira(answer)
