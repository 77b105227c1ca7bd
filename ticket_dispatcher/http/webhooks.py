"""``POST /jira/webhooks``: Jira's admin webhooks, signed, straight into triggers
(docs/jira-webhooks.md; what a delivery asks for is domain/webhooks.py's).

An admin webhook cannot send an API key: a delivery is authenticated by its
``X-Hub-Signature: sha256=<HMAC-SHA256 of the raw body>`` under one of ``jira.webhook_secrets``,
checked before the body is parsed. A missing or wrong signature is a failed authentication,
throttled in the same bucket as a wrong key. A delivery is taken once: its
``X-Atlassian-Webhook-Identifier`` stays the same across Jira's retries, and a repeat answers
2xx and starts nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import re

import falcon

from ticket_dispatcher.domain.webhooks import (
    Delivery,
    WebhookTrigger,
    parse_delivery,
    snapshot_of,
    triggers_for,
)
from ticket_dispatcher.errors import (
    InvalidInput,
    Problem,
    RuntimeUnavailable,
    StoreUnavailable,
)
from ticket_dispatcher.http.auth import PUBLIC, ApiKeyAuth
from ticket_dispatcher.http.binding import read_bounded
from ticket_dispatcher.http.errors import ApiError
from ticket_dispatcher.http.services import Services
from ticket_dispatcher.safejson import parse_json

SIGNATURE_HEADER = "X-Hub-Signature"
IDENTIFIER_HEADER = "X-Atlassian-Webhook-Identifier"
SIGNATURE_SCHEME = 'HMAC-SHA256 realm="X-Hub-Signature"'
# A real issue's fields nest a few levels; the body as a whole is bounded by its size.
MAX_DEPTH = 64
_IDENTIFIER = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")


def signature(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature`` value Jira sends for ``body`` under ``secret``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def signed(secrets: tuple[str, ...], body: bytes, presented: str | None) -> bool:
    """Whether ``presented`` is the signature of ``body`` under any of ``secrets``, each
    compared in constant time, all of them every time."""
    found = _SIGNATURE.fullmatch(presented or "")
    if found is None:
        return False
    wanted = f"sha256={found[1].lower()}".encode("ascii")
    matched = False
    for secret in secrets:
        matched |= hmac.compare_digest(signature(secret, body).encode("ascii"), wanted)
    return matched


class JiraWebhooks:
    """202 with the triggers made once the delivery and its triggers are committed; 200 for
    a repeat of a delivery taken before, and for one that asks for nothing."""

    roles = {"POST": PUBLIC}
    # The connection is taken after the signature and the body are judged: a refused
    # delivery costs none.
    uses_database = False

    def __init__(self, services: Services, keys: ApiKeyAuth) -> None:
        self._services = services
        self._keys = keys

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        shown = {"event": "unknown", "outcome": "error"}  # a fault of the service's own
        try:
            self._take(req, resp, shown)
        except ApiError as exc:
            shown["outcome"] = {401: "unauthorized", 413: "too_large",
                                429: "rate_limited"}.get(exc.status_code, "invalid")
            raise
        except InvalidInput:
            shown["outcome"] = "invalid"
            raise
        except (StoreUnavailable, RuntimeUnavailable):
            shown["outcome"] = "unavailable"
            raise
        finally:
            self._services.metrics.webhook_received(shown["event"], shown["outcome"])

    def _take(self, req: falcon.Request, resp: falcon.Response, shown: dict) -> None:
        config = self._services.config.jira
        body = read_bounded(req, config.webhook_max_bytes, "jira.webhook_max_bytes")
        if not signed(config.webhook_secrets, body, req.get_header(SIGNATURE_HEADER)):
            message = ("no webhook secret is configured (jira.webhook_secrets)"
                       if not config.webhook_secrets else
                       f"the {SIGNATURE_HEADER} header is missing"
                       if req.get_header(SIGNATURE_HEADER) is None else
                       f"the {SIGNATURE_HEADER} signature does not match the body under any "
                       "configured secret")
            raise self._keys.failed(req, message, scheme=SIGNATURE_SCHEME)
        identifier = self._identifier(req, body)  # a malformed one is refused on any event
        received_at = self._services.clock.now()
        raw = parse_json(body, max_depth=MAX_DEPTH)
        delivery = parse_delivery(raw, l2_field_id=config.l2_field_id,
                                  severity_field_id=config.severity_field_id)
        if delivery is None:
            shown.update(event="other", outcome="ignored")
            self._answer(resp, falcon.HTTP_200, "ignored", "not an event this service takes")
            return
        shown["event"] = delivery.event
        snapshot = snapshot_of(raw, delivery, received_at, config.webhook_snapshot_max_age,
                               l2_field_id=config.l2_field_id,
                               severity_field_id=config.severity_field_id)
        with self._services.store.connection():  # one check-out for the reads and the insert
            made = self._triggers(delivery)
            if not made:
                shown["outcome"] = "ignored"
                self._answer(resp, falcon.HTTP_200, "ignored", "no change this service acts on")
                return
            triggers = self._services.running().accept_delivery(
                identifier, delivery.issue.key,
                [(made_one.source, made_one.to_input(delivery.issue.key, identifier, snapshot))
                 for made_one in made])
        if triggers is None:
            shown["outcome"] = "duplicate"
            self._answer(resp, falcon.HTTP_200, "duplicate",
                         "this delivery was taken before; nothing new was started")
            return
        shown["outcome"] = "accepted"
        self._answer(resp, falcon.HTTP_202, "accepted", "",
                     trigger_ids=[trigger.id for trigger in triggers])

    @staticmethod
    def _identifier(req: falcon.Request, body: bytes) -> str:
        """Jira's identifier of the delivery; without one, the body's digest (a retry sends
        the same body)."""
        identifier = req.get_header(IDENTIFIER_HEADER)
        if identifier is None:
            return "sha256:" + hashlib.sha256(body).hexdigest()
        if not _IDENTIFIER.fullmatch(identifier):
            raise InvalidInput(f"the {IDENTIFIER_HEADER} header is not an identifier",
                               [Problem(IDENTIFIER_HEADER, "must be 1 to 128 letters, digits "
                                                           "or ._:-")])
        return identifier

    def _triggers(self, delivery: Delivery) -> list[WebhookTrigger]:
        """The triggers the delivery makes; an update reads the active policies."""
        config = self._services.config.jira
        policies = [] if delivery.created else self._services.store.policies.list_active()
        return triggers_for(delivery, policies, l2_field_id=config.l2_field_id,
                            severity_field_id=config.severity_field_id,
                            auto_assign_label=config.auto_assign_label)

    @staticmethod
    def _answer(resp: falcon.Response, status: str, outcome: str, reason: str,
                **more: object) -> None:
        resp.status = status
        resp.media = {"status": outcome, **({"reason": reason} if reason else {}), **more}

