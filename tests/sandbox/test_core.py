"""The fake Core directory: group members, users, direct leaders."""

from __future__ import annotations

import pytest

from tests.sandbox.calls import BEARER, CORE


def test_core_group_members_carry_active(client):
    result = client.simulate_get(f"{CORE}/groups/l1/members", headers=BEARER)

    assert result.json == {"members": [{"email": "alice@example.com", "active": True},
                                       {"email": "bob@example.com", "active": True},
                                       {"email": "ivan@example.com", "active": False}]}


def test_core_user_by_email_with_open_id_when_on_lark(client):
    alice = client.simulate_get(f"{CORE}/users/Alice@example.com", headers=BEARER)
    ivan = client.simulate_get(f"{CORE}/users/ivan@example.com", headers=BEARER)

    assert alice.json == {"email": "alice@example.com", "name": "Alice Wang", "active": True,
                          "open_id": "ou_alice"}
    assert ivan.json == {"email": "ivan@example.com", "name": "Ivan Old", "active": False}


def test_core_leader_is_the_direct_leader(client):
    result = client.simulate_get(f"{CORE}/users/alice@example.com/leader", headers=BEARER)

    assert result.json["email"] == "dora@example.com"


@pytest.mark.parametrize("path", ["/groups/none/members", "/users/who@example.com",
                                  "/users/dora@example.com/leader",
                                  "/users/who@example.com/leader"])
def test_core_unknown_things_are_404(client, path):
    result = client.simulate_get(f"{CORE}{path}", headers=BEARER)

    assert result.status_code == 404 and "error" in result.json
