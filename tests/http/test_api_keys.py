"""Matching a presented ``X-API-KEY`` and what each role may call (docs/operations.md, "API keys").

The keys themselves are read by the configuration (tests/test_config.py).
"""

from __future__ import annotations

import hashlib
import hmac

import pytest

from ticket_dispatcher.config import ApiKey, AuthConfig, Role, load_config
from ticket_dispatcher.http.auth import allowed, authenticate, role_allows


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def auth_with_keys() -> AuthConfig:
    environ = {"TICKET_DISPATCHER_AUTH_API_KEYS": "jira:automation:plain-key-0123456789abcdef"}
    path_keys = (ApiKey("ops", Role.OPERATOR, sha256("hashed-key")),)
    return AuthConfig(api_keys=path_keys + load_config(None, environ=environ).auth.api_keys)


def test_authenticate_accepts_a_key_configured_as_sha256():
    assert authenticate(auth_with_keys(), "hashed-key") == ApiKey(
        "ops", Role.OPERATOR, sha256("hashed-key")
    )


def test_authenticate_accepts_a_plain_key_from_the_environment():
    key = authenticate(auth_with_keys(), "plain-key-0123456789abcdef")

    assert key is not None and (key.name, key.role) == ("jira", Role.AUTOMATION)


@pytest.mark.parametrize("presented", ["", "plain-key-0123456789abcdef ",
                                       "PLAIN-KEY-0123456789ABCDEF",
                                       sha256("plain-key-0123456789abcdef"), "x"])
def test_authenticate_rejects_anything_else(presented):
    assert authenticate(auth_with_keys(), presented) is None


def test_authenticate_compares_against_every_key(monkeypatch):
    compared = []
    real = hmac.compare_digest

    def spy(a, b):
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)

    assert authenticate(auth_with_keys(), "hashed-key") is not None  # matches the first key
    assert len(compared) == 2  # ... and still compared against the second


def test_authenticate_with_no_keys_configured_accepts_nothing():
    assert authenticate(AuthConfig(), "anything") is None


@pytest.mark.parametrize(
    ("have", "need", "expected"),
    [
        (Role.OPERATOR, Role.OPERATOR, True),
        (Role.OPERATOR, Role.VIEWER, True),
        (Role.OPERATOR, Role.AUTOMATION, False),
        (Role.VIEWER, Role.VIEWER, True),
        (Role.VIEWER, Role.OPERATOR, False),
        (Role.VIEWER, Role.AUTOMATION, False),
        (Role.AUTOMATION, Role.AUTOMATION, True),
        (Role.AUTOMATION, Role.VIEWER, False),
        (Role.AUTOMATION, Role.OPERATOR, False),
    ],
)
def test_role_allows_operator_over_viewer_only(have, need, expected):
    assert role_allows(have, need) is expected


def test_endpoint_roles_follow_spec_table():
    post_trigger = {Role.AUTOMATION, Role.OPERATOR}
    get_trigger = {Role.AUTOMATION, Role.VIEWER}

    assert [allowed(role, post_trigger) for role in Role] == [True, False, True]
    assert [allowed(role, get_trigger) for role in Role] == [True, True, True]
    assert not allowed(Role.VIEWER, {Role.OPERATOR})
    assert not allowed(Role.OPERATOR, set())
