"""The fake Oncall (SPEC §11): responders primary first, pages and their dedup; the internal
services' Bearer token."""

from __future__ import annotations

import pytest

from tests.sandbox.calls import BEARER, CORE, ONCALL, page


def test_oncall_responders_primary_first(client):
    result = client.simulate_get(f"{ONCALL}/teams/sre/responders", headers=BEARER)

    assert result.json == {"responders": [{"email": "bob@example.com", "name": "Bob Li"},
                                          {"email": "alice@example.com", "name": "Alice Wang"}]}


def test_oncall_unknown_team_is_404(client):
    result = client.simulate_get(f"{ONCALL}/teams/nope/responders", headers=BEARER)

    assert result.status_code == 404 and "error" in result.json


def test_oncall_page_is_accepted_for_someone_with_a_phone(client, sandbox):
    result = page(client, "alice@example.com")

    assert result.json["accepted"] is True and result.json["call_error"] == ""
    assert result.json["call_id"]
    [recorded] = sandbox.oncall.pages()
    assert (recorded.email, recorded.issue_key, recorded.accepted) == \
        ("alice@example.com", "TCID-1", True)


def test_oncall_page_without_a_phone_is_not_accepted(client):
    result = page(client, "bob@example.com")

    assert result.json == {"accepted": False, "call_error": "no_phone_number"}


def test_oncall_repeated_dedup_key_keeps_its_call_and_is_recorded(client, sandbox):
    first = page(client, "alice@example.com").json
    again = page(client, "alice@example.com").json

    assert first["call_id"] == again["call_id"]
    assert [p.repeated for p in sandbox.oncall.pages()] == [False, True]


def test_oncall_page_refuses_a_bad_body(client, sandbox):
    result = client.simulate_post(f"{ONCALL}/page", headers=BEARER,
                                  json={"email": "alice@example.com"})

    assert result.status_code == 400 and "error" in result.json
    assert sandbox.oncall.pages() == []


@pytest.mark.parametrize("method,path", [("GET", f"{ONCALL}/teams/sre/responders"),
                                         ("POST", f"{ONCALL}/page"),
                                         ("GET", f"{CORE}/groups/l1/members"),
                                         ("GET", f"{CORE}/users/alice@example.com")])
def test_internal_services_need_a_bearer_token(client, method, path):
    result = client.simulate_request(method, path, json={},
                                     headers={"Authorization": "Basic abc"})

    assert result.status_code == 401 and "error" in result.json
