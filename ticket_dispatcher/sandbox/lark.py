"""The fake Feishu/Lark open platform: tenant tokens, cards, urgents and read
receipts (``LarkState``), and the resources for the token, email → open_id, interactive cards
(idempotent by ``uuid``), in-app urgents and read receipts (paginated).

Every answer is the envelope ``{"code", "msg", "data"}`` (the token answer is flat); a non-zero
``code`` is a failure. Calls other than the token one need ``Authorization: Bearer`` with a
tenant token this sandbox issued and that has not expired or been revoked. The people are the
shared directory (``people.py``): a person is on Lark when they have an open_id.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import falcon

from ticket_dispatcher.domain.lark_callbacks import (
    CARD_ACTION,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    CallbackKeys,
    encrypt,
    signature,
)
from ticket_dispatcher.sandbox.base import (
    PUBLIC,
    ServiceError,
    ServiceResource,
    bearer_token,
    guard,
)
from ticket_dispatcher.sandbox.people import People, SandboxError, UnknownUser, email_key
from ticket_dispatcher.sandbox.traffic import Traffic
from ticket_dispatcher.timeutil import format_time

TOKEN_TTL_SECONDS = 7200  # Lark tenant tokens live two hours


class UnknownMessage(SandboxError):
    pass


class NoButton(SandboxError):
    pass


@dataclass(frozen=True)
class CardCallbacks:
    """Where the sandbox's Lark calls the service back when a card's button is pressed, and
    what it signs the callback with (the service's ``lark.encrypt_key`` and
    ``lark.verification_token``)."""

    url: str
    keys: CallbackKeys


def card_callback(keys: CallbackKeys, message_id: str, operator_open_id: str, value: dict,
                  now: datetime) -> tuple[bytes, dict[str, str]]:
    """A ``card.action.trigger`` callback (schema 2.0) as Lark sends it: the body, encrypted
    when there is an encrypt key, and its headers, signed then."""
    event = {
        "schema": "2.0",
        "header": {"event_id": secrets.token_hex(16), "token": keys.verification_token,
                   "create_time": str(_epoch_ms(now) * 1000),
                   "event_type": CARD_ACTION, "tenant_key": "sandbox", "app_id": "sandbox"},
        "event": {"operator": {"tenant_key": "sandbox", "open_id": operator_open_id},
                  "token": "c-" + secrets.token_hex(8),
                  "action": {"value": value, "tag": "button"},
                  "host": "im_message",
                  "context": {"open_message_id": message_id, "open_chat_id": "oc_sandbox"}},
    }
    body = json.dumps(event).encode("utf-8")
    timestamp, nonce = str(int(now.timestamp())), secrets.token_hex(8)
    headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp,
               NONCE_HEADER: nonce}
    if keys.encrypt_key:
        body = json.dumps({"encrypt": encrypt(keys.encrypt_key, body,
                                              secrets.token_bytes(16))}).encode("utf-8")
        headers[SIGNATURE_HEADER] = signature(timestamp, nonce, keys.encrypt_key, body)
    return body, headers


@dataclass
class LarkMessage:
    message_id: str
    receive_id: str
    msg_type: str
    content: str
    uuid: str | None
    created_at: datetime
    reads: dict[str, int] = field(default_factory=dict)  # open_id → read time (epoch ms)

    def to_json(self) -> dict:
        return {
            "message_id": self.message_id,
            "receive_id": self.receive_id,
            "msg_type": self.msg_type,
            "content": self.content,
            "uuid": self.uuid,
            "created_at": format_time(self.created_at),
            "read_by": list(self.reads),
        }


@dataclass(frozen=True)
class Urgent:
    message_id: str
    user_ids: tuple[str, ...]
    invalid_user_ids: tuple[str, ...]
    at: datetime

    def to_json(self) -> dict:
        return {
            "message_id": self.message_id,
            "user_ids": list(self.user_ids),
            "invalid_user_ids": list(self.invalid_user_ids),
            "at": format_time(self.at),
        }


# --- the state ---------------------------------------------------------------------------------


class LarkState:
    """Tenant tokens, sent cards (with who read them) and urgents, behind one lock."""

    def __init__(self, people: People, *, now: Callable[[], datetime]):
        self.people = people
        self.now = now
        self._lock = threading.Lock()
        self._tokens: dict[str, datetime] = {}  # token → expiry
        self._messages: dict[str, LarkMessage] = {}
        self._message_by_uuid: dict[str, str] = {}
        self._urgents: list[Urgent] = []
        self._message_count = 0
        self.callbacks: CardCallbacks | None = None  # the service wires them

    def issue_token(self) -> tuple[str, int]:
        with self._lock:
            token = "t-" + secrets.token_hex(16)
            self._tokens[token] = self.now() + timedelta(seconds=TOKEN_TTL_SECONDS)
            return token, TOKEN_TTL_SECONDS

    def token_valid(self, token: str) -> bool:
        with self._lock:
            expiry = self._tokens.get(token)
            return expiry is not None and self.now() < expiry

    def revoke_tokens(self) -> int:
        """Forget every tenant token, so clients must refresh on code 99991663."""
        with self._lock:
            count = len(self._tokens)
            self._tokens.clear()
            return count

    def open_ids(self, emails: Iterable[str]) -> dict[str, str]:
        """Lower-case email → open_id, for those people who are on Lark."""
        found = {}
        for email in emails:
            user = self.people.user(email)
            if user is not None and user.open_id:
                found[user.email] = user.open_id
        return found

    def open_id_of(self, email: str) -> str | None:
        return self.open_ids([email]).get(email_key(email))

    def _on_lark(self, open_id: str) -> bool:
        return self.people.user_by_open_id(open_id) is not None

    def send_message(self, receive_id: str, msg_type: str, content: str,
                     uuid: str | None) -> tuple[str, bool]:
        """The message id and whether it was sent now; a known ``uuid`` is not sent twice."""
        with self._lock:
            if uuid and uuid in self._message_by_uuid:
                return self._message_by_uuid[uuid], False
            if not self._on_lark(receive_id):
                raise UnknownUser(f"no Lark user has the open_id {receive_id}")
            self._message_count += 1
            message_id = f"om_sbx{self._message_count:08d}"
            self._messages[message_id] = LarkMessage(
                message_id, receive_id, msg_type, content, uuid or None, self.now()
            )
            if uuid:
                self._message_by_uuid[uuid] = message_id
            return message_id, True

    def _message(self, message_id: str) -> LarkMessage:
        message = self._messages.get(message_id)
        if message is None:
            raise UnknownMessage(f"message {message_id} does not exist")
        return message

    def urgent(self, message_id: str, user_ids: Iterable[str]) -> list[str]:
        """Send an in-app urgent; the ids that are not Lark users come back invalid."""
        with self._lock:
            self._message(message_id)
            user_ids = list(user_ids)
            invalid = [uid for uid in user_ids if not self._on_lark(uid)]
            self._urgents.append(Urgent(message_id, tuple(user_ids), tuple(invalid), self.now()))
            return invalid

    def mark_read(self, message_id: str, open_id: str, at_ms: int | None = None) -> bool:
        """Record that ``open_id`` read the card; the first read counts. True when new."""
        with self._lock:
            message = self._message(message_id)
            if not self._on_lark(open_id):
                raise UnknownUser(f"no Lark user has the open_id {open_id}")
            if open_id in message.reads:
                return False
            message.reads[open_id] = at_ms if at_ms is not None else _epoch_ms(self.now())
            return True

    def read_users(self, message_id: str, offset: int, limit: int) -> tuple[list[tuple], int]:
        """One page of ``(open_id, read ms)`` in read order, and the total."""
        with self._lock:
            reads = list(self._message(message_id).reads.items())
            return reads[offset:offset + limit], len(reads)

    def messages(self) -> list[LarkMessage]:
        with self._lock:
            return [copy.deepcopy(m) for m in self._messages.values()]

    def urgents(self) -> list[Urgent]:
        with self._lock:
            return list(self._urgents)

    def button_value(self, message_id: str, action: str) -> tuple[str, dict]:
        """The receiver and the ``value`` of the card's button whose value's action is
        ``action``; ``NoButton`` when the card has none."""
        with self._lock:
            message = self._message(message_id)
            try:
                card = json.loads(message.content)
            except ValueError:
                card = {}
        for element in card.get("elements") or [] if isinstance(card, dict) else []:
            for button in element.get("actions") or [] if isinstance(element, dict) else []:
                value = button.get("value") if isinstance(button, dict) else None
                if isinstance(value, dict) and value.get("action") == action:
                    return message.receive_id, value
        raise NoButton(f"message {message_id} has no {action!r} button")

    def update_card(self, message_id: str, card: dict) -> None:
        """The card a callback's answer put in place of the message's."""
        with self._lock:
            self._message(message_id).content = json.dumps(card, ensure_ascii=False)


def _epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


# --- the resources -----------------------------------------------------------------------------


# Lark's codes; any non-zero code is a failure, these are the ones clients act on.
INVALID_PARAM = 10003  # token endpoint: missing app_id/app_secret
RATE_LIMITED = 99991400
MISSING_TOKEN = 99991661
INVALID_TOKEN = 99991663  # the client refreshes its token on this one
FIELD_INVALID = 99992402
MESSAGE_NOT_FOUND = 230001
USER_UNREACHABLE = 230013
SERVER_ERROR = 1
# Feishu answers token problems with HTTP 400 and the code in the body.
TOKEN_ERROR_STATUS = 400
MAX_EMAILS = 50
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 20
MSG_TYPES = ("interactive", "text", "post")


def lark_error(status: int, code: int, msg: str,
               headers: dict[str, str] | None = None) -> ServiceError:
    return ServiceError(status, {"code": code, "msg": msg}, headers)


def ok(data: dict) -> dict:
    return {"code": 0, "msg": "ok", "data": data}


class LarkResource(ServiceResource):
    service = "lark"
    state: LarkState

    def error(self, status: int, message: str,
              headers: dict[str, str] | None = None) -> ServiceError:
        if status == 429:
            code = RATE_LIMITED
        elif status < 500:
            code = FIELD_INVALID
        else:
            code = SERVER_ERROR
        return lark_error(status, code, message, headers)

    def authenticate(self, req: falcon.Request) -> None:
        token = bearer_token(req)
        if not token:
            raise lark_error(TOKEN_ERROR_STATUS, MISSING_TOKEN, "missing access token")
        if not self.state.token_valid(token):
            raise lark_error(TOKEN_ERROR_STATUS, INVALID_TOKEN, "invalid access token")

    def invalid(self, message: str) -> ServiceError:
        return lark_error(400, FIELD_INVALID, f"field validation failed: {message}")

    def require_open_id(self, req: falcon.Request, param: str) -> None:
        """The sandbox speaks only open_id, as the clients do."""
        if req.get_param(param) != "open_id":
            raise self.invalid(f"{param} must be open_id in the sandbox")

    def object_body(self, req: falcon.Request) -> dict:
        body = self.body(req)
        if not isinstance(body, dict):
            raise self.invalid("the body must be a JSON object")
        return body


@falcon.before(guard)
class TenantTokenResource(LarkResource):
    roles = {"POST": PUBLIC}

    def authenticate(self, req: falcon.Request) -> None:
        pass  # this is where a token comes from

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = self.object_body(req)
        if not all(isinstance(body.get(k), str) and body[k] for k in ("app_id", "app_secret")):
            raise lark_error(400, INVALID_PARAM, "invalid param: app_id and app_secret")
        token, expire = self.state.issue_token()
        resp.media = {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": expire}


@falcon.before(guard)
class BatchGetIdResource(LarkResource):
    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.require_open_id(req, "user_id_type")
        emails = self.object_body(req).get("emails")
        if not isinstance(emails, list) or not all(isinstance(e, str) for e in emails):
            raise self.invalid("emails must be a list of strings")
        if len(emails) > MAX_EMAILS:
            raise self.invalid(f"at most {MAX_EMAILS} emails per call")
        found = self.state.open_ids(emails)
        user_list = []
        for email in emails:
            open_id = found.get(email.strip().lower())
            user_list.append({"email": email, "user_id": open_id} if open_id else {"email": email})
        resp.media = ok({"user_list": user_list})


@falcon.before(guard)
class MessagesResource(LarkResource):
    roles = {"POST": PUBLIC}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.require_open_id(req, "receive_id_type")
        body = self.object_body(req)
        receive_id, msg_type, content = (body.get(k) for k in ("receive_id", "msg_type",
                                                                "content"))
        uuid = body.get("uuid")
        if not isinstance(receive_id, str) or not receive_id:
            raise self.invalid("receive_id is required")
        if msg_type not in MSG_TYPES:
            raise self.invalid(f"msg_type must be one of {', '.join(MSG_TYPES)}")
        if not isinstance(content, str) or not _is_json_object(content):
            raise self.invalid("content must be a JSON object encoded as a string")
        if uuid is not None and (not isinstance(uuid, str) or len(uuid) > 50):
            raise self.invalid("uuid must be a string of at most 50 characters")
        try:
            message_id, _ = self.state.send_message(receive_id, msg_type, content, uuid)
        except UnknownUser:
            raise lark_error(400, USER_UNREACHABLE, "Bot has NO availability to this user.") \
                from None
        resp.media = ok({"message_id": message_id, "msg_type": msg_type})


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


@falcon.before(guard)
class UrgentAppResource(LarkResource):
    roles = {"PATCH": PUBLIC}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, message_id: str) -> None:
        self.require_open_id(req, "user_id_type")
        user_ids = self.object_body(req).get("user_id_list")
        if not isinstance(user_ids, list) or not user_ids \
                or not all(isinstance(uid, str) for uid in user_ids):
            raise self.invalid("user_id_list must be a non-empty list of strings")
        try:
            invalid = self.state.urgent(message_id, user_ids)
        except UnknownMessage:
            raise lark_error(400, MESSAGE_NOT_FOUND, "message not found") from None
        resp.media = ok({"invalid_user_id_list": invalid})


@falcon.before(guard)
class ReadUsersResource(LarkResource):
    roles = {"GET": PUBLIC}

    def on_get(self, req: falcon.Request, resp: falcon.Response, message_id: str) -> None:
        self.require_open_id(req, "user_id_type")
        size = self._int(req, "page_size", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
        offset = self._int(req, "page_token", 0, 0, None)  # our page tokens are offsets
        try:
            reads, total = self.state.read_users(message_id, offset, size)
        except UnknownMessage:
            raise lark_error(400, MESSAGE_NOT_FOUND, "message not found") from None
        has_more = offset + len(reads) < total
        resp.media = ok({
            "items": [{"user_id_type": "open_id", "user_id": open_id, "timestamp": str(ms)}
                      for open_id, ms in reads],
            "has_more": has_more,
            "page_token": str(offset + len(reads)) if has_more else "",
        })

    def _int(self, req: falcon.Request, name: str, default: int, low: int,
             high: int | None) -> int:
        text = req.get_param(name)
        if not text:
            return default
        if not text.isdigit() or int(text) < low or (high is not None and int(text) > high):
            raise self.invalid(f"{name} is out of range")
        return int(text)


def routes(lark: LarkState, traffic: Traffic) -> list[tuple[str, object]]:
    """Paths relative to the service's base URL."""
    return [
        ("/open-apis/auth/v3/tenant_access_token/internal", TenantTokenResource(lark, traffic)),
        ("/open-apis/contact/v3/users/batch_get_id", BatchGetIdResource(lark, traffic)),
        ("/open-apis/im/v1/messages", MessagesResource(lark, traffic)),
        ("/open-apis/im/v1/messages/{message_id}/urgent_app", UrgentAppResource(lark, traffic)),
        ("/open-apis/im/v1/messages/{message_id}/read_users", ReadUsersResource(lark, traffic)),
    ]
