"""The fake Feishu/Lark open platform (SPEC §11): tenant token, email → open_id, interactive
cards (idempotent by ``uuid``), in-app urgents and read receipts (paginated).

Every answer is the envelope ``{"code", "msg", "data"}`` (the token answer is flat); a non-zero
``code`` is a failure. Calls other than the token one need ``Authorization: Bearer`` with a
tenant token this sandbox issued and that has not expired or been revoked.
"""

from __future__ import annotations

import json

import falcon

from ticket_dispatcher.http.auth import PUBLIC
from ticket_dispatcher.integrations.sandbox.base import (
    ServiceError,
    ServiceResource,
    bearer_token,
    guard,
)
from ticket_dispatcher.integrations.sandbox.state import UnknownMessage, UnknownUser

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
        """The sandbox speaks only open_id, as the clients do (SPEC §11)."""
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


def routes(state) -> list[tuple[str, object]]:
    """Paths relative to the service's base URL."""
    return [
        ("/open-apis/auth/v3/tenant_access_token/internal", TenantTokenResource(state)),
        ("/open-apis/contact/v3/users/batch_get_id", BatchGetIdResource(state)),
        ("/open-apis/im/v1/messages", MessagesResource(state)),
        ("/open-apis/im/v1/messages/{message_id}/urgent_app", UrgentAppResource(state)),
        ("/open-apis/im/v1/messages/{message_id}/read_users", ReadUsersResource(state)),
    ]
