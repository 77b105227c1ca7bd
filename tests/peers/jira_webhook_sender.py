"""Jira's side of an admin webhook: a delivery signed and posted the way Jira Cloud posts it,
and posted again the way Jira retries it. Written from Atlassian's webhook documentation
(Jira Cloud platform, "Webhooks": "Secure admin webhooks" and "Retry policy") and WebSub's
``method=signature`` format; it shares no code with the product, so a test that drives a
real ``ticket-dispatcher serve`` process with it checks the product against Jira, not against
itself.

- The body is sent as raw bytes, ``Content-Type: application/json``, signed with
  ``X-Hub-Signature: sha256=<hex HMAC-SHA256 of exactly those bytes under the secret>``.
- ``X-Atlassian-Webhook-Identifier`` names the delivery and stays the same on every retry;
  a retry also carries ``X-Atlassian-Webhook-Retry: <how many retries so far>``.
- A delivery answered 408, 409, 425, 429 or 5xx, or not answered at all, is sent again; any
  other answer ends it. Jira retries for about half an hour; here the attempts are bounded
  (``max_attempts``) and a ``Retry-After`` is honoured when it is at most ``max_wait``
  seconds (a longer one ends the delivery: the sender never sends before the peer said).

Besides sending one delivery, it sends the same delivery several times at the same moment
(``send_together``: one thread per copy behind a barrier) and lays out a run in which every
delivery is repeated and the order is shuffled (``repeated``), as Jira may deliver.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import requests
from requests.structures import CaseInsensitiveDict

SIGNATURE_HEADER = "X-Hub-Signature"
IDENTIFIER_HEADER = "X-Atlassian-Webhook-Identifier"
RETRY_HEADER = "X-Atlassian-Webhook-Retry"
FLOW_HEADER = "X-Atlassian-Webhook-Flow"
RETRIED_STATUSES = frozenset({408, 409, 425, 429})  # and every 5xx


def hub_signature(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature`` of ``body`` under ``secret``: WebSub's ``method=signature``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def retried(status: int) -> bool:
    """Whether Jira sends a delivery answered ``status`` again."""
    return status in RETRIED_STATUSES or 500 <= status <= 599


@dataclass(frozen=True)
class Delivery:
    """One webhook delivery: its identifier and the exact bytes that are signed and sent."""

    identifier: str
    body: bytes

    @classmethod
    def of(cls, payload: Any, identifier: str | None = None) -> Delivery:
        """``payload`` as Jira writes it (compact JSON, UTF-8) under a new identifier."""
        raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return cls(identifier or str(uuid.uuid4()), raw)

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Attempt:
    """One POST of a delivery; ``status`` None when no answer came (a connection error)."""

    retry: int  # 0 for the first attempt
    sent_at: float  # time.monotonic()
    answered_at: float
    status: int | None
    headers: Mapping[str, str]  # case-insensitive, as HTTP's
    answer: Any  # the JSON answer, its text when not JSON, or the error when none came


@dataclass
class Sent:
    """A delivery and every attempt made to deliver it, oldest first."""

    delivery: Delivery
    url: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]

    @property
    def status(self) -> int | None:
        return self.final.status

    @property
    def answer(self) -> Any:
        return self.final.answer


class JiraWebhookSender:
    """Posts deliveries to ``url`` signed with ``secret``, retrying as Jira does.

    ``on_attempt`` is called (from the sending thread) after every attempt, so a test can act
    between a refused attempt and its retry without waiting for a fixed time."""

    def __init__(self, url: str, secret: str, *, max_attempts: int = 4, max_wait: float = 3.0,
                 backoff: float = 0.1, timeout: float = 15,
                 on_attempt: Callable[[Sent, Attempt], None] | None = None):
        self.url = url
        self.secret = secret
        self.max_attempts = max_attempts
        self.max_wait = max_wait
        self.backoff = backoff
        self.timeout = timeout
        self.on_attempt = on_attempt

    # -- one delivery -------------------------------------------------------------------------

    def headers(self, delivery: Delivery, *, secret: str | None = None, signed: bool = True,
                retry: int = 0) -> dict[str, str]:
        """The headers Jira sends with ``delivery``; unsigned, or signed with another
        ``secret``, for a delivery the receiver must refuse."""
        sent = {"Content-Type": "application/json",
                IDENTIFIER_HEADER: delivery.identifier,
                FLOW_HEADER: "Primary"}
        if signed:
            sent[SIGNATURE_HEADER] = hub_signature(secret or self.secret, delivery.body)
        if retry:
            sent[RETRY_HEADER] = str(retry)
        return sent

    def send(self, delivery: Delivery, *, url: str | None = None, secret: str | None = None,
             signed: bool = True, max_attempts: int | None = None) -> Sent:
        """Post ``delivery`` until it is answered with something Jira does not retry, the
        attempts run out, or the peer asks for a longer wait than ``max_wait``."""
        sent = Sent(delivery, url or self.url)
        attempts = max_attempts or self.max_attempts
        pause = threading.Event()  # never set: its bounded wait is the pause between attempts
        for retry in range(attempts):
            attempt = self._post(sent.url, delivery,
                                 self.headers(delivery, secret=secret, signed=signed,
                                              retry=retry), retry)
            sent.attempts.append(attempt)
            if self.on_attempt is not None:
                self.on_attempt(sent, attempt)
            if attempt.status is not None and not retried(attempt.status):
                break
            wait = self._wait_before_retry(attempt)
            if wait is None or retry + 1 == attempts:
                break
            pause.wait(max(0.0, attempt.answered_at + wait - time.monotonic()))
        return sent

    def _post(self, url: str, delivery: Delivery, headers: dict[str, str],
              retry: int) -> Attempt:
        started = time.monotonic()
        try:
            # No shared session: deliveries are sent from many threads at once.
            response = requests.post(url, data=delivery.body, headers=headers,
                                     timeout=self.timeout)
        except requests.RequestException as exc:
            return Attempt(retry, started, time.monotonic(), None, CaseInsensitiveDict(),
                           repr(exc))
        try:
            answer = response.json() if response.content else None
        except ValueError:
            answer = response.text
        return Attempt(retry, started, time.monotonic(), response.status_code,
                       CaseInsensitiveDict(response.headers), answer)

    def _wait_before_retry(self, attempt: Attempt) -> float | None:
        """Seconds before the next attempt; None when the peer asks for more than
        ``max_wait`` (the delivery ends with this answer)."""
        given = _retry_after(attempt.headers.get("Retry-After"))
        if given is None:
            return min(self.max_wait, self.backoff * 2 ** attempt.retry)
        return given if given <= self.max_wait else None

    # -- many deliveries ----------------------------------------------------------------------

    def send_together(self, delivery: Delivery, urls: Sequence[str]) -> list[Sent]:
        """The same delivery (same identifier) posted to each of ``urls`` at the same moment:
        one thread per copy, released together by a barrier."""
        start = threading.Barrier(len(urls))

        def copy(url: str) -> Sent:
            start.wait(timeout=self.timeout)
            return self.send(delivery, url=url)

        with ThreadPoolExecutor(max_workers=len(urls)) as pool:
            return list(pool.map(copy, urls))

    def send_all(self, deliveries: Iterable[Delivery], *, workers: int = 16) -> list[Sent]:
        """Each delivery posted once, in the given order, ``workers`` at a time."""
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(self.send, deliveries))


def repeated(deliveries: Iterable[Delivery], copies: int, rng: random.Random) -> list[Delivery]:
    """Every delivery ``copies`` times (same identifier, same bytes), in a shuffled order."""
    run = [delivery for delivery in deliveries for _ in range(copies)]
    rng.shuffle(run)
    return run


def _retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (delta-seconds or an HTTP date); None when absent or
    unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())
