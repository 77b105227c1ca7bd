"""Lark calling back a card's button, as Lark's open platform does: written from Lark's
published definitions (the ``card.action.trigger`` callback, schema 2.0; the encrypt key's
AES-256-CBC body and ``X-Lark-Signature``), not from the service's code, so the tests check the
service against Lark rather than against itself."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

ROUTE = "/api/v1/ticketmanager/lark/card-actions"


def lark_encrypt(encrypt_key: str, plaintext: bytes) -> str:
    """``{"encrypt": …}``'s value: base64(IV + AES-256-CBC(SHA-256(key)) of the padded JSON)."""
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    key = hashlib.sha256(encrypt_key.encode()).digest()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def lark_signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


def card_action(execution_id: int, action: str, operator: str, message_id: str, *,
                token: str = "", event_id: str | None = None) -> dict:
    return {
        "schema": "2.0",
        "header": {"event_id": event_id or uuid.uuid4().hex, "token": token,
                   "create_time": str(int(time.time() * 1_000_000)),
                   "event_type": "card.action.trigger", "tenant_key": "tenant",
                   "app_id": "cli_app"},
        "event": {"operator": {"tenant_key": "tenant", "user_id": "u1", "open_id": operator,
                               "union_id": "on_1"},
                  "token": "c-" + uuid.uuid4().hex,
                  "action": {"value": {"action": action, "execution_id": execution_id},
                             "tag": "button"},
                  "host": "im_message",
                  "context": {"open_message_id": message_id, "open_chat_id": "oc_1"}},
    }


class LarkCallbacks:
    """Builds the request Lark sends: the raw body and its headers. With ``encrypt_key`` the
    body is encrypted and signed; the token is in the body either way."""

    def __init__(self, *, encrypt_key: str = "", token: str = ""):
        self.encrypt_key = encrypt_key
        self.token = token

    def request(self, payload: dict, *, timestamp: int | None = None,
                encrypt_key: str | None = None) -> tuple[bytes, dict[str, str]]:
        key = self.encrypt_key if encrypt_key is None else encrypt_key
        body = json.dumps(payload).encode()
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        nonce = uuid.uuid4().hex[:16]
        headers = {"Content-Type": "application/json", "X-Lark-Request-Timestamp": stamp,
                   "X-Lark-Request-Nonce": nonce}
        if key:
            body = json.dumps({"encrypt": lark_encrypt(key, body)}).encode()
            headers["X-Lark-Signature"] = lark_signature(stamp, nonce, key, body)
        return body, headers

    def press(self, execution_id: int, action: str, operator: str, message_id: str, *,
              event_id: str | None = None, **kw) -> tuple[bytes, dict[str, str]]:
        return self.request(card_action(execution_id, action, operator, message_id,
                                        token=self.token, event_id=event_id), **kw)

    def url_check(self, challenge: str, **kw) -> tuple[bytes, dict[str, str]]:
        return self.request({"challenge": challenge, "token": self.token,
                             "type": "url_verification"}, **kw)
