"""Matching a presented ``X-API-KEY`` and what each role may call (docs/operations.md, "API keys").

The keys themselves are read by the configuration (tests/test_config.py).
"""

from __future__ import annotations

import hashlib
import hmac

import pytest

from ticket_dispatcher.config import AccessRole, ApiKey, AuthConfig, load_config
from ticket_dispatcher.http.auth import allowed, authenticate, role_allows


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def auth_with_keys() -> AuthConfig:
    environ = {"TICKET_DISPATCHER_AUTH_API_KEYS": "jira:automation:plain-key-0123456789abcdef"}
    path_keys = (ApiKey("ops", AccessRole.OPERATOR, sha256("hashed-key")),)
    return AuthConfig(api_keys=path_keys + load_config(None, environ=environ).auth.api_keys)


def test_authenticate_accepts_a_key_configured_as_sha256():
    assert authenticate(auth_with_keys(), "hashed-key") == ApiKey(
        "ops", AccessRole.OPERATOR, sha256("hashed-key")
    )


def test_authenticate_accepts_a_plain_key_from_the_environment():
    key = authenticate(auth_with_keys(), "plain-key-0123456789abcdef")

    assert key is not None and (key.name, key.role) == ("jira", AccessRole.AUTOMATION)


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
        (AccessRole.OPERATOR, AccessRole.OPERATOR, True),
        (AccessRole.OPERATOR, AccessRole.VIEWER, True),
        (AccessRole.OPERATOR, AccessRole.AUTOMATION, False),
        (AccessRole.VIEWER, AccessRole.VIEWER, True),
        (AccessRole.VIEWER, AccessRole.OPERATOR, False),
        (AccessRole.VIEWER, AccessRole.AUTOMATION, False),
        (AccessRole.AUTOMATION, AccessRole.AUTOMATION, True),
        (AccessRole.AUTOMATION, AccessRole.VIEWER, False),
        (AccessRole.AUTOMATION, AccessRole.OPERATOR, False),
    ],
)
def test_role_allows_operator_over_viewer_only(have, need, expected):
    assert role_allows(have, need) is expected


def test_endpoint_roles_follow_spec_table():
    post_trigger = {AccessRole.AUTOMATION, AccessRole.OPERATOR}
    get_trigger = {AccessRole.AUTOMATION, AccessRole.VIEWER}

    assert [allowed(role, post_trigger) for role in AccessRole] == [True, False, True]
    assert [allowed(role, get_trigger) for role in AccessRole] == [True, True, True]
    assert not allowed(AccessRole.VIEWER, {AccessRole.OPERATOR})
    assert not allowed(AccessRole.OPERATOR, set())
