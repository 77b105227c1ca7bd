"""The fake Lark: tenant tokens, open_ids, idempotent cards, urgents, read receipts."""

from __future__ import annotations

import threading

import pytest

from tests.sandbox.calls import CONTROL, LARK, lark_token, send_card


def test_lark_token_answer_is_flat(client):
    result = client.simulate_post(f"{LARK}/auth/v3/tenant_access_token/internal",
                                  json={"app_id": "cli_x", "app_secret": "s3cret"})

    assert result.status_code == 200
    assert result.json["code"] == 0 and result.json["expire"] == 7200
    assert result.json["tenant_access_token"].startswith("t-")
    assert "data" not in result.json


@pytest.mark.parametrize("body", [{"app_id": "cli_x"}, {"app_id": "", "app_secret": "s"}, [1]])
def test_lark_token_needs_app_id_and_secret(client, body):
    result = client.simulate_post(f"{LARK}/auth/v3/tenant_access_token/internal", json=body)

    assert result.status_code == 400 and result.json["code"] != 0


@pytest.mark.parametrize("headers,code", [
    ({}, 99991661), ({"Authorization": "Bearer t-not-issued"}, 99991663),
])
def test_lark_calls_need_a_token_it_issued(client, headers, code):
    result = send_card(client, headers)

    assert result.status_code == 400
    assert result.json["code"] == code


def test_lark_token_expires_after_two_hours(client, clock):
    auth = lark_token(client)
    clock.advance(7199)
    assert send_card(client, auth, uuid="a").json["code"] == 0

    clock.advance(1)

    assert send_card(client, auth, uuid="b").json["code"] == 99991663


def test_lark_revoked_tokens_are_refused(client):
    auth = lark_token(client)

    revoked = client.simulate_delete(f"{CONTROL}/lark/tokens")

    assert revoked.json == {"revoked": 1}
    assert send_card(client, auth).json["code"] == 99991663


def test_lark_batch_get_id_maps_known_emails_only(client):
    result = client.simulate_post(
        f"{LARK}/contact/v3/users/batch_get_id", params={"user_id_type": "open_id"},
        json={"emails": ["Alice@Example.com", "ivan@example.com", "who@example.com"]},
        headers=lark_token(client))

    assert result.json == {"code": 0, "msg": "ok", "data": {"user_list": [
        {"email": "Alice@Example.com", "user_id": "ou_alice"},
        {"email": "ivan@example.com"},
        {"email": "who@example.com"},
    ]}}


def test_lark_batch_get_id_refuses_bad_input(client):
    auth = lark_token(client)
    url = f"{LARK}/contact/v3/users/batch_get_id"

    no_type = client.simulate_post(url, json={"emails": []}, headers=auth)
    bad_emails = client.simulate_post(url, params={"user_id_type": "open_id"},
                                      json={"emails": "a@b"}, headers=auth)

    assert no_type.status_code == 400 and no_type.json["code"] != 0
    assert bad_emails.status_code == 400 and bad_emails.json["code"] != 0


def test_lark_send_answers_a_message_id_and_records_the_card(client, sandbox):
    result = send_card(client, lark_token(client))

    assert result.json["code"] == 0
    message_id = result.json["data"]["message_id"]
    [message] = sandbox.lark.messages()
    assert (message.message_id, message.receive_id, message.msg_type) == \
        (message_id, "ou_alice", "interactive")


def test_lark_same_uuid_is_one_message(client, sandbox):
    auth = lark_token(client)

    first = send_card(client, auth, uuid="exec-7-action-2")
    again = send_card(client, auth, uuid="exec-7-action-2")
    other = send_card(client, auth, uuid="exec-7-action-3")

    assert first.json["data"]["message_id"] == again.json["data"]["message_id"]
    assert other.json["data"]["message_id"] != first.json["data"]["message_id"]
    assert len(sandbox.lark.messages()) == 2


def test_lark_same_uuid_from_many_threads_is_one_message(sandbox):
    ids = []

    def send():
        ids.append(sandbox.lark.send_message("ou_alice", "interactive", "{}", "same")[0])

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(set(ids)) == 1 and len(sandbox.lark.messages()) == 1


@pytest.mark.parametrize("change", [
    {"receive_id": "ou_nobody"}, {"content": "not json"}, {"msg_type": "video"},
    {"uuid": "x" * 51},
])
def test_lark_send_refuses_bad_cards(client, sandbox, change):
    body = {"receive_id": "ou_alice", "msg_type": "interactive", "content": "{}", **change}

    result = client.simulate_post(f"{LARK}/im/v1/messages", json=body,
                                  params={"receive_id_type": "open_id"},
                                  headers=lark_token(client))

    assert result.status_code == 400 and result.json["code"] != 0
    assert sandbox.lark.messages() == []


def test_lark_urgent_reports_invalid_user_ids(client, sandbox):
    auth = lark_token(client)
    message_id = send_card(client, auth).json["data"]["message_id"]

    result = client.simulate_patch(f"{LARK}/im/v1/messages/{message_id}/urgent_app",
                                   params={"user_id_type": "open_id"},
                                   json={"user_id_list": ["ou_alice", "ou_ghost"]}, headers=auth)

    assert result.json == {"code": 0, "msg": "ok",
                           "data": {"invalid_user_id_list": ["ou_ghost"]}}
    [urgent] = sandbox.lark.urgents()
    assert urgent.user_ids == ("ou_alice", "ou_ghost")


def test_lark_urgent_on_unknown_message_fails(client):
    result = client.simulate_patch(f"{LARK}/im/v1/messages/om_nope/urgent_app",
                                   params={"user_id_type": "open_id"},
                                   json={"user_id_list": ["ou_alice"]}, headers=lark_token(client))

    assert result.status_code == 400 and result.json["code"] != 0


def test_lark_read_users_paginate_by_page_size(client, sandbox, clock):
    auth = lark_token(client)
    message_id = send_card(client, auth).json["data"]["message_id"]
    for open_id in ("ou_alice", "ou_bob", "ou_dora"):
        clock.advance(1)
        sandbox.lark.mark_read(message_id, open_id)
    url = f"{LARK}/im/v1/messages/{message_id}/read_users"

    first = client.simulate_get(url, params={"user_id_type": "open_id", "page_size": "2"},
                                headers=auth).json["data"]
    second = client.simulate_get(url, headers=auth, params={
        "user_id_type": "open_id", "page_size": "2", "page_token": first["page_token"]},
    ).json["data"]

    assert [item["user_id"] for item in first["items"]] == ["ou_alice", "ou_bob"]
    assert first["has_more"] is True
    assert second == {"items": [{"user_id_type": "open_id", "user_id": "ou_dora",
                                 "timestamp": str(int(clock.now().timestamp() * 1000))}],
                      "has_more": False, "page_token": ""}


@pytest.mark.parametrize("params", [{"page_size": "0"}, {"page_size": "101"},
                                    {"page_token": "abc"}, {"user_id_type": "union_id"}])
def test_lark_read_users_refuses_bad_paging(client, sandbox, params):
    auth = lark_token(client)
    message_id = send_card(client, auth).json["data"]["message_id"]

    result = client.simulate_get(f"{LARK}/im/v1/messages/{message_id}/read_users",
                                 params={"user_id_type": "open_id", **params}, headers=auth)

    assert result.status_code == 400 and result.json["code"] != 0
