"""The Core client: group members, users and direct leaders."""

from __future__ import annotations

import logging

import pytest
import requests
from responses import matchers

from ticket_dispatcher.config import CoreConfig
from ticket_dispatcher.domain.ports import DirectoryUser, GroupMember
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.core import CoreClient
from ticket_dispatcher.integrations.http import IntegrationTimeout

BASE = "https://core.internal.example"
TOKEN = "core-bearer-secret"
AUTH = [matchers.header_matcher({"Authorization": f"Bearer {TOKEN}"})]


@pytest.fixture
def core():
    client = CoreClient(CoreConfig(base_url=BASE, token=TOKEN), connect_timeout=1,
                        read_timeout=2, sleep=lambda _: None)
    yield client
    client.close()


def test_group_members_are_lower_cased_with_their_active_flag(mocked, core):
    mocked.get(f"{BASE}/api/v1/groups/tcoc-l1/members", match=AUTH, json={"members": [
        {"email": "Alice@Example.com", "active": True},
        {"email": "bob@example.com", "active": False}]})

    assert core.group_members("tcoc-l1") == [GroupMember("alice@example.com", True),
                                             GroupMember("bob@example.com", False)]


def test_group_name_is_quoted_in_the_path(mocked, core):
    mocked.get(f"{BASE}/api/v1/groups/a%2Fb/members", json={"members": []})

    assert core.group_members("a/b") == []


def test_user_is_read_with_its_open_id(mocked, core):
    mocked.get(f"{BASE}/api/v1/users/alice@example.com", match=AUTH, json={
        "email": "Alice@Example.com", "name": "Alice", "active": True, "open_id": "ou_a"})

    assert core.user("ALICE@example.com") == DirectoryUser("alice@example.com", "Alice", True,
                                                           "ou_a")


def test_user_without_open_id_has_none(mocked, core):
    mocked.get(f"{BASE}/api/v1/users/bob@example.com",
               json={"email": "bob@example.com", "name": "Bob", "active": False})

    assert core.user("bob@example.com") == DirectoryUser("bob@example.com", "Bob", False, None)


def test_unknown_user_is_none(mocked, core):
    mocked.get(f"{BASE}/api/v1/users/ghost@example.com", status=404, json={"error": "no user"})

    assert core.user("ghost@example.com") is None


def test_leader_is_the_direct_leader(mocked, core):
    mocked.get(f"{BASE}/api/v1/users/alice@example.com/leader", match=AUTH,
               json={"email": "boss@example.com", "name": "Boss", "active": True})

    assert core.leader("alice@example.com").email == "boss@example.com"


def test_user_without_leader_is_none(mocked, core):
    mocked.get(f"{BASE}/api/v1/users/boss@example.com/leader", status=404)

    assert core.leader("boss@example.com") is None


def test_server_error_malformed_answer_and_timeout_are_errors(mocked, core):
    mocked.get(f"{BASE}/api/v1/users/a@example.com", status=503, json={"error": "maintenance"})
    mocked.get(f"{BASE}/api/v1/users/b@example.com", body="{nope")
    mocked.get(f"{BASE}/api/v1/users/c@example.com",
               body=requests.exceptions.ConnectTimeout("connect"))
    mocked.get(f"{BASE}/api/v1/groups/g/members", json=[])

    with pytest.raises(IntegrationError) as unavailable:
        core.user("a@example.com")
    with pytest.raises(IntegrationError) as malformed:
        core.user("b@example.com")
    with pytest.raises(IntegrationError) as unreachable:
        core.user("c@example.com")
    with pytest.raises(IntegrationError):
        core.group_members("g")

    assert unavailable.value.status == 503 and "maintenance" in unavailable.value.message
    assert "not a user" in malformed.value.message
    # A connect timeout never reached Core: a connection failure, not an unknown outcome.
    assert not isinstance(unreachable.value, IntegrationTimeout)


def test_bearer_token_never_reaches_errors_or_logs(mocked, core, caplog):
    caplog.set_level(logging.DEBUG)
    mocked.get(f"{BASE}/api/v1/groups/g/members", status=403,
               json={"error": f"token {TOKEN} lacks scope"})

    with pytest.raises(IntegrationError) as caught:
        core.group_members("g")

    for text in [caught.value.message] + [r.getMessage() for r in caplog.records]:
        assert TOKEN not in text
