"""Lark's callbacks as Lark sends them (docs/lark-card-buttons.md): the checks that tell a
callback from a forgery, and the card action it carries.

- **With an encrypt key** the body is ``{"encrypt": BASE64}``: a 16-byte IV, then the JSON
  under AES-256-CBC whose key is the SHA-256 of the encrypt key (PKCS#7 padding).
  ``X-Lark-Signature`` is the SHA-256 hex of the ``X-Lark-Request-Timestamp`` and
  ``X-Lark-Request-Nonce`` headers, the encrypt key and the raw body, in that order; a
  timestamp more than ``MAX_SKEW`` away from now, either way, is stale.
- **With a verification token** the token in the body (``header.token`` of a version 2.0
  callback, ``token`` of the URL check) must match it.

Lark's URL check (``"type": "url_verification"``) carries no signature: it is answered with
its challenge once it decrypts (with a key) and its token matches (with a token).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ticket_dispatcher.errors import InvalidInput, Problem
from ticket_dispatcher.safejson import parse_json

SIGNATURE_HEADER = "X-Lark-Signature"
TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
MAX_SKEW = timedelta(minutes=5)
URL_VERIFICATION = "url_verification"
CARD_ACTION = "card.action.trigger"
MAX_DEPTH = 32
_IV_BYTES = 16
_MAX_ID = 128


class Refused(Exception):
    """The callback failed a check: 401, and nothing changes. The message names the check,
    never a key, a token or the body."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class CallbackKeys:
    encrypt_key: str = ""
    verification_token: str = ""


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """The ``X-Lark-Signature`` Lark sends with ``body``."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def _cipher_key(encrypt_key: str) -> bytes:
    return hashlib.sha256(encrypt_key.encode("utf-8")).digest()


def encrypt(encrypt_key: str, plaintext: bytes, iv: bytes) -> str:
    """What Lark puts in ``{"encrypt": …}`` for ``plaintext`` (the sandbox and the tests send
    callbacks so)."""
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    encryptor = Cipher(algorithms.AES(_cipher_key(encrypt_key)), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode("ascii")


def decrypt(encrypt_key: str, encrypted: str) -> bytes:
    """The plaintext of an ``encrypt`` value; ``Refused`` when it does not decrypt."""
    try:
        raw = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError):
        raise Refused("the encrypted body is not base64") from None
    if len(raw) < 2 * _IV_BYTES or len(raw) % _IV_BYTES:
        raise Refused("the encrypted body is not whole AES blocks")
    decryptor = Cipher(algorithms.AES(_cipher_key(encrypt_key)),
                       modes.CBC(raw[:_IV_BYTES])).decryptor()
    padded = decryptor.update(raw[_IV_BYTES:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        raise Refused("the body does not decrypt under the encrypt key") from None


def stale(timestamp: str, now: datetime) -> bool:
    """Whether Lark's request timestamp (Unix seconds) is more than ``MAX_SKEW`` from now,
    either way; one that is no number is stale."""
    try:
        seconds = int(timestamp)
        sent = datetime.fromtimestamp(seconds, UTC)
    except (ValueError, OverflowError, OSError):
        return True
    return abs(sent - now) > MAX_SKEW


def open_callback(keys: CallbackKeys, body: bytes, header: Callable[[str], str | None],
                  now: datetime) -> dict:
    """The callback's JSON object once every configured check passed. ``Refused`` (401) for a
    failed check, ``InvalidInput`` (400) for a body that checks out but is no JSON object."""
    signed = False
    if keys.encrypt_key:
        presented = header(SIGNATURE_HEADER)
        if presented is not None:
            _check_signature(keys.encrypt_key, body, presented, header, now)
            signed = True
        payload = _decrypted(keys.encrypt_key, body)
    else:
        payload = parse_json(body, max_depth=MAX_DEPTH)
        if isinstance(payload, dict) and "encrypt" in payload:
            raise Refused("the body is encrypted and no encrypt key is configured "
                          "(lark.encrypt_key)")
        timestamp = header(TIMESTAMP_HEADER)
        if timestamp is not None and stale(timestamp, now):
            raise Refused(f"the {TIMESTAMP_HEADER} is more than 5 minutes from now")
    if not isinstance(payload, dict):
        raise InvalidInput("the callback is not a JSON object",
                           [Problem("", "must be an object", kind="shape")])
    if keys.verification_token and not hmac.compare_digest(
            _token_of(payload).encode("utf-8"), keys.verification_token.encode("utf-8")):
        raise Refused("the callback's token does not match lark.verification_token")
    if keys.encrypt_key and not signed and payload.get("type") != URL_VERIFICATION:
        raise Refused(f"the {SIGNATURE_HEADER} header is missing")
    return payload


def _check_signature(encrypt_key: str, body: bytes, presented: str,
                     header: Callable[[str], str | None], now: datetime) -> None:
    timestamp, nonce = header(TIMESTAMP_HEADER), header(NONCE_HEADER)
    if timestamp is None or nonce is None:
        raise Refused(f"the {TIMESTAMP_HEADER} or {NONCE_HEADER} header is missing")
    wanted = signature(timestamp, nonce, encrypt_key, body)
    if not hmac.compare_digest(wanted.encode("ascii"), presented.strip().lower().encode(
            "ascii", "replace")):
        raise Refused(f"the {SIGNATURE_HEADER} does not match the request")
    if stale(timestamp, now):
        raise Refused(f"the {TIMESTAMP_HEADER} is more than 5 minutes from now")


def _decrypted(encrypt_key: str, body: bytes) -> Any:
    try:
        outer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise Refused("the body is not the encrypted JSON Lark sends") from None
    encrypted = outer.get("encrypt") if isinstance(outer, dict) else None
    if not isinstance(encrypted, str):
        raise Refused('the body has no "encrypt" value, and lark.encrypt_key is configured')
    plaintext = decrypt(encrypt_key, encrypted)
    try:
        return parse_json(plaintext, max_depth=MAX_DEPTH, what="the decrypted callback")
    except InvalidInput:  # a wrong key decrypts to noise more often than to a padding error
        raise Refused("the body does not decrypt under the encrypt key") from None


def _token_of(payload: dict) -> str:
    header = payload.get("header")
    token = header.get("token") if isinstance(header, dict) else payload.get("token")
    return token if isinstance(token, str) else ""


# -- the card action -----------------------------------------------------------------------------


class PressAction(StrEnum):
    ACK = "ack"
    ESCALATE = "escalate"


@dataclass(frozen=True)
class CardAction:
    """A button pressed on a card: who pressed which, on which card (``card.action.trigger``,
    schema 2.0). ``execution_id`` is from the button's ``value``, which the service wrote."""

    event_id: str
    operator_open_id: str
    action: PressAction
    execution_id: int
    message_id: str  # the card's message, "" when Lark did not say


def challenge_of(payload: dict) -> str | None:
    """The challenge of Lark's URL check; None for any other callback."""
    if payload.get("type") != URL_VERIFICATION:
        return None
    challenge = payload.get("challenge")
    if not isinstance(challenge, str):
        raise InvalidInput("the URL check has no challenge",
                           [Problem("challenge", "must be a string", kind="shape")])
    return challenge


def card_action_of(payload: dict) -> CardAction:
    """The card action a verified callback carries; ``InvalidInput`` (400) for anything
    else: another event, an unknown action, a value naming nothing."""
    header, event = _object(payload, "header"), _object(payload, "event")
    if payload.get("schema") != "2.0" or header.get("event_type") != CARD_ACTION:
        raise InvalidInput("not a card action callback",
                           [Problem("header.event_type", f"must be {CARD_ACTION} (schema 2.0)")])
    event_id = header.get("event_id")
    if not isinstance(event_id, str) or not 0 < len(event_id) <= _MAX_ID:
        raise InvalidInput("the callback has no event id",
                           [Problem("header.event_id", "must be a string of 1 to 128 "
                                                       "characters", kind="shape")])
    operator = _object(event, "operator").get("open_id")
    if not isinstance(operator, str) or not operator:
        raise InvalidInput("the callback names no operator",
                           [Problem("event.operator.open_id", "must be a string", kind="shape")])
    value = _object(event, "action").get("value")
    if not isinstance(value, dict):
        raise InvalidInput("the button's value is not an object",
                           [Problem("event.action.value", "must be an object", kind="shape")])
    try:
        action = PressAction(str(value.get("action")))
    except ValueError:
        raise InvalidInput("unknown action", [Problem(
            "event.action.value.action", "must be ack or escalate")]) from None
    execution_id = value.get("execution_id")
    if not isinstance(execution_id, int) or isinstance(execution_id, bool) or execution_id <= 0:
        raise InvalidInput("the button's value names no wait", [Problem(
            "event.action.value.execution_id", "must be a positive integer")])
    message_id = _object(event, "context").get("open_message_id")
    return CardAction(event_id, operator, action, execution_id,
                      message_id if isinstance(message_id, str) else "")


def _object(raw: dict, key: str) -> dict:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}
