"""The fake Jira's admin webhooks: ``/rest/webhooks/1.0/webhook``, the endpoint that
``ticket-dispatcher jira webhook register|show`` calls (integrations/jira_webhooks_admin.py).

As Jira's: ``GET`` lists the webhooks and ``POST`` registers one (201); ``GET``, ``PUT`` and
``DELETE`` on ``/{id}`` read, replace (200) and remove (204) one. A body is ``{"name", "url",
"events": [...], "filters": {"issue-related-events-section": JQL}, "excludeBody", "secret"}``
(``enabled`` too); a webhook is answered with its ``self`` URL ending in its id, and who
changed it last and when (``lastUpdatedUser``, ``lastUpdated`` in epoch milliseconds). The
secret is kept but never answered: Jira does not give a saved secret back.

Basic auth as the rest of the fake Jira (any ``user:token``; it does not check admin rights);
a body it cannot take is Jira's 400 naming each wrong field, never echoing a value. The sandbox
keeps the registrations only: it sends no deliveries (post one by hand, README "Try it").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import falcon

from ticket_dispatcher.sandbox.base import PUBLIC, guard
from ticket_dispatcher.sandbox.jira import JiraServiceResource, basic_user, jira_error
from ticket_dispatcher.sandbox.people import SandboxError
from ticket_dispatcher.sandbox.traffic import Traffic

WEBHOOKS = "/rest/webhooks/1.0/webhook"
WEBHOOK_MISSING = "The webhook does not exist."


class UnknownWebhook(SandboxError):
    pass


@dataclass(frozen=True)
class WebhookSpec:
    """What a ``POST`` or ``PUT`` body sets; the secret never shows in a repr."""

    name: str
    url: str
    events: tuple[str, ...] = ()
    filters: dict[str, str] = field(default_factory=dict)  # e.g. the JQL of the issue events
    exclude_body: bool = False
    enabled: bool = True
    secret: str = field(default="", repr=False)


@dataclass(frozen=True)
class SandboxWebhook:
    id: int
    spec: WebhookSpec
    updated_by: str  # the Basic auth user of the last POST or PUT
    updated_at: datetime


# --- the state ---------------------------------------------------------------------------------


class AdminWebhooks:
    """The registered webhooks by id (1, 2, ... as Jira numbers them), behind one lock."""

    def __init__(self, *, now: Callable[[], datetime]):
        self.now = now
        self._lock = threading.Lock()
        self._webhooks: dict[int, SandboxWebhook] = {}
        self._next_id = 1

    def register(self, spec: WebhookSpec, user: str) -> SandboxWebhook:
        with self._lock:
            webhook = SandboxWebhook(self._next_id, spec, user, self.now())
            self._webhooks[webhook.id] = webhook
            self._next_id += 1
            return webhook

    def replace(self, webhook_id: int, spec: WebhookSpec, user: str) -> SandboxWebhook:
        with self._lock:
            self._webhook(webhook_id)
            webhook = SandboxWebhook(webhook_id, spec, user, self.now())
            self._webhooks[webhook_id] = webhook
            return webhook

    def remove(self, webhook_id: int) -> None:
        with self._lock:
            self._webhook(webhook_id)
            del self._webhooks[webhook_id]

    def webhook(self, webhook_id: int) -> SandboxWebhook:
        with self._lock:
            return self._webhook(webhook_id)

    def webhooks(self) -> list[SandboxWebhook]:
        with self._lock:
            return [self._webhooks[webhook_id] for webhook_id in sorted(self._webhooks)]

    def _webhook(self, webhook_id: int) -> SandboxWebhook:
        webhook = self._webhooks.get(webhook_id)
        if webhook is None:
            raise UnknownWebhook(f"webhook {webhook_id} does not exist")
        return webhook


# --- Jira's wire format ------------------------------------------------------------------------


def read_webhook(body: Any) -> WebhookSpec:
    """The webhook a ``POST`` or ``PUT`` body describes, or Jira's 400 naming every wrong field
    (a missing optional field, or a null one, takes its default)."""
    if not isinstance(body, dict):
        raise jira_error(400, ["The request body must be a JSON object."])
    errors: dict[str, str] = {}
    name, url = _string(body, "name"), _string(body, "url")
    if not name.strip():
        errors["name"] = "name must be a non-empty string."
    if not _is_http_url(url):
        errors["url"] = "url must be an absolute http or https URL."
    events = _given(body, "events", [])
    if not isinstance(events, list) or not all(isinstance(e, str) and e for e in events):
        errors["events"] = "events must be a list of event names."
    filters = _given(body, "filters", {})
    if not isinstance(filters, dict) or not all(isinstance(v, str) for v in filters.values()):
        errors["filters"] = ('filters must be an object of strings, such as '
                             '{"issue-related-events-section": JQL}.')
    for key, default in (("excludeBody", False), ("enabled", True)):
        if not isinstance(_given(body, key, default), bool):
            errors[key] = f"{key} must be true or false."
    secret = _given(body, "secret", "")
    if not isinstance(secret, str):
        errors["secret"] = "secret must be a string."
    if errors:
        raise jira_error(400, errors=errors)
    return WebhookSpec(name=name, url=url, events=tuple(events), filters=dict(filters),
                       exclude_body=_given(body, "excludeBody", False),
                       enabled=_given(body, "enabled", True), secret=secret)


def _string(body: dict, key: str) -> str:
    value = body.get(key)
    return value if isinstance(value, str) else ""


def _given(body: dict, key: str, default: Any) -> Any:
    value = body.get(key)
    return default if value is None else value


def _is_http_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # a malformed port or IPv6 address
        return False


def render_webhook(webhook: SandboxWebhook, collection_url: str) -> dict:
    """The webhook as Jira answers it: everything but its secret."""
    spec = webhook.spec
    return {
        "self": f"{collection_url}/{webhook.id}",
        "name": spec.name,
        "url": spec.url,
        "events": list(spec.events),
        "filters": dict(spec.filters),
        "excludeBody": spec.exclude_body,
        "enabled": spec.enabled,
        "lastUpdatedUser": webhook.updated_by,
        "lastUpdated": int(webhook.updated_at.timestamp() * 1000),
    }


# --- the resources -----------------------------------------------------------------------------


class WebhookResource(JiraServiceResource):
    state: AdminWebhooks


@falcon.before(guard)
class WebhooksResource(WebhookResource):
    """``GET`` lists, ``POST`` registers."""

    roles = {"GET": PUBLIC, "POST": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        here = req.prefix + req.path.rstrip("/")
        resp.media = [render_webhook(webhook, here) for webhook in self.state.webhooks()]

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        webhook = self.state.register(read_webhook(self.body(req)), basic_user(req))
        shown = render_webhook(webhook, req.prefix + req.path.rstrip("/"))
        resp.status = falcon.HTTP_201
        resp.location = shown["self"]
        resp.media = shown


@falcon.before(guard)
class WebhookByIdResource(WebhookResource):
    """``GET`` reads, ``PUT`` replaces, ``DELETE`` removes one webhook."""

    roles = {"GET": PUBLIC, "PUT": PUBLIC, "DELETE": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, webhook_id: str) -> None:
        resp.media = render_webhook(self._webhook(webhook_id), _collection(req))

    def on_put(self, req: falcon.Request, resp: falcon.Response, webhook_id: str) -> None:
        wanted = self._webhook(webhook_id).id  # 404 before 400
        spec = read_webhook(self.body(req))
        try:
            webhook = self.state.replace(wanted, spec, basic_user(req))
        except UnknownWebhook:  # removed meanwhile
            raise jira_error(404, [WEBHOOK_MISSING]) from None
        resp.media = render_webhook(webhook, _collection(req))

    def on_delete(self, req: falcon.Request, resp: falcon.Response, webhook_id: str) -> None:
        try:
            self.state.remove(self._webhook(webhook_id).id)
        except UnknownWebhook:
            raise jira_error(404, [WEBHOOK_MISSING]) from None
        resp.status = falcon.HTTP_204

    def _webhook(self, webhook_id: str) -> SandboxWebhook:
        """The webhook of a path segment, or Jira's 404 (anything but digits names none)."""
        if not (webhook_id.isascii() and webhook_id.isdigit()):
            raise jira_error(404, [WEBHOOK_MISSING])
        try:
            return self.state.webhook(int(webhook_id))
        except UnknownWebhook:
            raise jira_error(404, [WEBHOOK_MISSING]) from None


def _collection(req: falcon.Request) -> str:
    """The URL of the list, from a request for one of its webhooks."""
    return req.prefix + req.path.rsplit("/", 1)[0]


def routes(webhooks: AdminWebhooks, traffic: Traffic) -> list[tuple[str, object]]:
    """Paths relative to the fake Jira's base URL."""
    return [
        (WEBHOOKS, WebhooksResource(webhooks, traffic)),
        (f"{WEBHOOKS}/{{webhook_id}}", WebhookByIdResource(webhooks, traffic)),
    ]
