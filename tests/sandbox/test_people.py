"""The shared directory of people: no phone number can be held."""

from __future__ import annotations

import pytest

from tests.sandbox.calls import (
    BEARER,
    CONTROL,
    CORE,
    JIRA,
    JIRA_AUTH,
    LARK,
    assert_project_error,
    lark_token,
    page,
)


def test_the_sandbox_cannot_hold_a_phone_number(client, sandbox):
    result = client.simulate_post(f"{CONTROL}/users", json={
        "email": "zed@example.com", "phone": "+86 138 0000 0000"})

    assert_project_error(result, 400)
    assert sandbox.people.user("zed@example.com") is None
    with pytest.raises(TypeError):
        sandbox.people.put_user("zed@example.com", phone="+86 138 0000 0000")


def test_one_person_added_once_is_known_to_all_four_services(client):
    client.simulate_post(f"{CONTROL}/users", json={
        "email": "zed@example.com", "display_name": "Zed", "account_id": "acc-zed",
        "open_id": "ou_zed", "has_phone": True, "leader_email": "dora@example.com"})

    jira = client.simulate_get(f"{JIRA}/user/search", params={"query": "zed@example.com"},
                               headers=JIRA_AUTH).json
    lark = client.simulate_post(f"{LARK}/contact/v3/users/batch_get_id",
                                params={"user_id_type": "open_id"},
                                json={"emails": ["zed@example.com"]}, headers=lark_token(client))
    paged = page(client, "zed@example.com").json
    leader = client.simulate_get(f"{CORE}/users/zed@example.com/leader", headers=BEARER).json

    assert [user["accountId"] for user in jira] == ["acc-zed"]
    assert lark.json["data"]["user_list"] == [{"email": "zed@example.com", "user_id": "ou_zed"}]
    assert paged["accepted"] is True
    assert leader["email"] == "dora@example.com"
