"""Feishu/Lark open platform: tenant token, user lookup, cards, App urgent, read users.

Every answer is an envelope ``{"code": 0, "msg": "ok", "data": {...}}``; a non-zero ``code`` is a
failure whatever the HTTP status. The tenant token is cached, refreshed a little before it
expires, and once more when Lark calls it invalid (code 99991663).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ticket_dispatcher.clock import Clock, SystemClock
from ticket_dispatcher.config import LarkConfig
from ticket_dispatcher.domain.ports import Answer, Readers, answer_each
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.http import HttpClient, IntegrationRejected, segment

SERVICE = "lark"
TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
TOKEN_INVALID = 99991663  # the tenant access token is invalid or expired
TOKEN_REFRESH_EARLY = timedelta(minutes=5)
EMAILS_PER_LOOKUP = 50  # batch_get_id accepts at most 50 emails per call
READ_USERS_PAGE_SIZE = 100
MAX_READ_USER_PAGES = 100  # a bound against a server that never stops saying has_more


class LarkClient:
    """The ``Messenger`` port (domain/ports.py) over HTTP."""

    def __init__(
        self,
        config: LarkConfig,
        *,
        connect_timeout: float = 3,
        read_timeout: float = 10,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._app_id = config.app_id
        self._app_secret = config.app_secret
        self._clock = clock or SystemClock()
        self._token: str | None = None
        self._token_expires_at: datetime | None = None
        self.http = HttpClient(
            SERVICE, config.base_url, auth=self._auth_headers, connect_timeout=connect_timeout,
            read_timeout=read_timeout, sleep=sleep, clock=self._clock,
            secrets=(config.app_secret,))

    def close(self) -> None:
        self.http.close()

    # --- operations -------------------------------------------------------------------------

    def open_ids_by_email(self, emails: Iterable[str]) -> dict[str, str]:
        """``{email (lower-cased): open_id}``; emails Lark does not know are left out."""
        wanted = list(dict.fromkeys(e.strip().lower() for e in emails if e and e.strip()))
        found: dict[str, str] = {}
        for start in range(0, len(wanted), EMAILS_PER_LOOKUP):
            data = self._call("POST", "/open-apis/contact/v3/users/batch_get_id",
                              params={"user_id_type": "open_id"},
                              json={"emails": wanted[start:start + EMAILS_PER_LOOKUP]},
                              repeatable=True)  # a lookup
            for entry in _list(data, "user_list"):
                email, user_id = entry.get("email"), entry.get("user_id")
                if isinstance(email, str) and isinstance(user_id, str) and user_id:
                    found[email.strip().lower()] = user_id
        return found

    def send_card(self, open_id: str, card: dict, uuid: str) -> str:
        """Send an interactive card; ``uuid`` makes a retried send the same message."""
        path = "/open-apis/im/v1/messages"
        data = self._call("POST", path, params={"receive_id_type": "open_id"}, json={
            "receive_id": open_id,
            "msg_type": "interactive",
            "content": json.dumps(card, ensure_ascii=False),
            "uuid": uuid,
        })
        message_id = data.get("message_id")
        if not isinstance(message_id, str) or not message_id:
            raise IntegrationError(f"lark POST {path}: the answer has no message_id",
                                   status=200, service=SERVICE)
        return message_id

    def urgent_app(self, message_id: str, open_id: str) -> list[str]:
        """App-urgent our own card for ``open_id``; the user IDs Lark rejected."""
        data = self._call("PATCH", f"/open-apis/im/v1/messages/{segment(message_id)}/urgent_app",
                          params={"user_id_type": "open_id"}, json={"user_id_list": [open_id]})
        return [item for item in data.get("invalid_user_id_list") or [] if isinstance(item, str)]

    def read_user_ids_each(self, message_ids: Sequence[str],
                           at_once: int | None = None) -> list[Answer[list[str]]]:
        """``read_user_ids`` of each message, one after another (``LarkPool`` runs them
        concurrently, each on one of its clients)."""
        return answer_each(self.read_user_ids, message_ids)

    def read_user_ids(self, message_id: str) -> list[str]:
        """Open IDs of everyone who read the message, across all pages (a read by the
        target is an ACK)."""
        path = f"/open-apis/im/v1/messages/{segment(message_id)}/read_users"
        readers: list[str] = []
        read_at: dict[str, datetime] = {}
        token = ""
        for _ in range(MAX_READ_USER_PAGES):
            params = {"user_id_type": "open_id", "page_size": READ_USERS_PAGE_SIZE}
            if token:
                params["page_token"] = token
            data = self._call("GET", path, params=params)
            for item in _list(data, "items"):
                if isinstance(item.get("user_id"), str):
                    readers.append(item["user_id"])
                    moment = _read_moment(item.get("timestamp"))
                    if moment is not None:
                        read_at.setdefault(item["user_id"], moment)
            if not data.get("has_more"):
                return Readers(dict.fromkeys(readers), read_at)
            token = data.get("page_token") or ""
            if not token:
                raise IntegrationError(f"lark GET {path}: has_more without a page_token",
                                       status=200, service=SERVICE)
        raise IntegrationError(f"lark GET {path}: more than {MAX_READ_USER_PAGES} pages",
                               status=200, service=SERVICE)

    # --- envelope and token -----------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> dict:
        """``data`` of a successful envelope; an invalid token is refreshed and the call
        repeated once."""
        try:
            return self._call_once(method, path, **kwargs)
        except IntegrationRejected as exc:
            if exc.code != TOKEN_INVALID:
                raise
        self._token = None
        return self._call_once(method, path, **kwargs)

    def _call_once(self, method: str, path: str, **kwargs: Any) -> dict:
        self._tenant_token()  # fetch before the call, so its latency and errors are its own
        body = self.http.request_json(method, path, **kwargs)
        if not isinstance(body, dict):
            raise IntegrationError(f"lark {method} {path}: the answer is not an object",
                                   status=200, service=SERVICE)
        if body.get("code") != 0:
            raise self.http.failure(method, path, 200, str(body.get("msg") or ""),
                                    body.get("code"))
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._tenant_token()}"}

    def _tenant_token(self) -> str:
        now = self._clock.now()
        if self._token is None or self._token_expires_at is None or now >= self._token_expires_at:
            self._fetch_token(now)
        assert self._token is not None
        return self._token

    def _fetch_token(self, now: datetime) -> None:
        body = self.http.request_json(
            "POST", TOKEN_PATH, json={"app_id": self._app_id, "app_secret": self._app_secret},
            authenticate=False, repeatable=True)  # a token, the same while it lasts
        if not isinstance(body, dict) or body.get("code") != 0:
            code = body.get("code") if isinstance(body, dict) else None
            msg = str(body.get("msg") or "") if isinstance(body, dict) else ""
            raise self.http.failure("POST", TOKEN_PATH, 200, msg, code)
        token, expire = body.get("tenant_access_token"), body.get("expire")
        if not isinstance(token, str) or not token or not isinstance(expire, int | float):
            raise IntegrationError(f"lark POST {TOKEN_PATH}: the answer has no token",
                                   status=200, service=SERVICE)
        self.http.add_secret(token)
        lifetime = timedelta(seconds=expire)
        # Refresh 5 minutes early; a token that lives less than that is used for half its life.
        self._token_expires_at = now + max(lifetime - TOKEN_REFRESH_EARLY, lifetime / 2)
        self._token = token


def _list(data: dict, key: str) -> list[dict]:
    value = data.get(key)
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _read_moment(raw: Any) -> datetime | None:
    """A read item's ``timestamp``: milliseconds since the epoch, as a string; None when it
    is missing or does not read."""
    try:
        return datetime.fromtimestamp(int(raw) / 1000, UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
