"""The Lark client: tenant token, envelope, cards, urgent, read users."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import responses
from responses import matchers

from tests.clocks import ManualClock
from ticket_dispatcher.config import LarkConfig
from ticket_dispatcher.domain.ports import read_time
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.http import IntegrationRejected, IntegrationTimeout
from ticket_dispatcher.integrations.lark import LarkClient

BASE = "https://open.feishu.example"
APP_SECRET = "lark-app-secret-value"
TOKEN_URL = f"{BASE}/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES_URL = f"{BASE}/open-apis/im/v1/messages"
BATCH_URL = f"{BASE}/open-apis/contact/v3/users/batch_get_id"
READ_URL = f"{BASE}/open-apis/im/v1/messages/om_1/read_users"


class Waits(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def waits():
    return Waits()


@pytest.fixture
def lark(clock, waits):
    client = LarkClient(LarkConfig(base_url=BASE, app_id="cli_app", app_secret=APP_SECRET),
                        connect_timeout=1, read_timeout=2, clock=clock, sleep=waits)
    yield client
    client.close()


def token(mocked, value: str = "t-first", expire: int = 7200) -> None:
    mocked.post(TOKEN_URL, json={"code": 0, "msg": "ok", "tenant_access_token": value,
                                 "expire": expire},
                match=[matchers.json_params_matcher({"app_id": "cli_app",
                                                     "app_secret": APP_SECRET})])


def envelope(data: dict | None = None, code: int = 0, msg: str = "ok") -> dict:
    return {"code": code, "msg": msg, "data": data or {}}


def bearer(value: str) -> list:
    return [matchers.header_matcher({"Authorization": f"Bearer {value}"})]


def calls_to(mocked, url: str) -> list:
    return [c for c in mocked.calls if c.request.url.split("?")[0] == url]


def test_send_card_posts_an_interactive_message_with_its_uuid(mocked, lark):
    token(mocked)
    card = {"header": {"title": {"tag": "plain_text", "content": "TCOC-7 分配给你"}}}
    mocked.post(MESSAGES_URL, json=envelope({"message_id": "om_1"}), match=[
        *bearer("t-first"),
        matchers.query_param_matcher({"receive_id_type": "open_id"}),
        matchers.json_params_matcher({"receive_id": "ou_1", "msg_type": "interactive",
                                      "content": json.dumps(card, ensure_ascii=False),
                                      "uuid": "exec-7-action-1"}),
    ])

    assert lark.send_card("ou_1", card, "exec-7-action-1") == "om_1"
    assert "Authorization" not in calls_to(mocked, TOKEN_URL)[0].request.headers


def test_tenant_token_is_cached_across_calls(mocked, lark):
    token(mocked)
    mocked.post(MESSAGES_URL, json=envelope({"message_id": "om_1"}), match=bearer("t-first"))

    lark.send_card("ou_1", {}, "u1")
    lark.send_card("ou_2", {}, "u2")

    assert len(calls_to(mocked, TOKEN_URL)) == 1
    assert len(calls_to(mocked, MESSAGES_URL)) == 2


def test_tenant_token_is_refreshed_before_it_expires(mocked, lark, clock):
    token(mocked, "t-first", expire=7200)
    mocked.post(MESSAGES_URL, json=envelope({"message_id": "om_1"}), match=bearer("t-first"))
    lark.send_card("ou_1", {}, "u1")

    clock.advance(minutes=115)  # still 5 minutes before expiry: time to refresh
    mocked.replace(responses.POST, TOKEN_URL, json={"code": 0, "tenant_access_token": "t-second",
                                                    "expire": 7200})
    mocked.replace(responses.POST, MESSAGES_URL, json=envelope({"message_id": "om_2"}),
                   match=bearer("t-second"))

    assert lark.send_card("ou_1", {}, "u2") == "om_2"
    assert len(calls_to(mocked, TOKEN_URL)) == 2


def test_tenant_token_is_not_refreshed_earlier(mocked, lark, clock):
    token(mocked)
    mocked.post(MESSAGES_URL, json=envelope({"message_id": "om_1"}))
    lark.send_card("ou_1", {}, "u1")

    clock.advance(minutes=114)
    lark.send_card("ou_1", {}, "u2")

    assert len(calls_to(mocked, TOKEN_URL)) == 1


def test_invalid_token_code_refreshes_the_token_and_repeats_the_call_once(mocked, lark):
    token(mocked, "t-first")
    token(mocked, "t-second")
    mocked.post(MESSAGES_URL, status=400, json={"code": 99991663, "msg": "token invalid"},
                match=bearer("t-first"))
    mocked.post(MESSAGES_URL, json=envelope({"message_id": "om_9"}), match=bearer("t-second"))

    assert lark.send_card("ou_1", {}, "u1") == "om_9"
    assert len(calls_to(mocked, TOKEN_URL)) == 2


def test_invalid_token_code_twice_is_an_error(mocked, lark):
    token(mocked, "t-first")
    token(mocked, "t-second")
    mocked.post(MESSAGES_URL, json={"code": 99991663, "msg": "token invalid"})

    with pytest.raises(IntegrationRejected) as caught:
        lark.send_card("ou_1", {}, "u1")

    assert caught.value.code == 99991663
    assert len(calls_to(mocked, MESSAGES_URL)) == 2


def test_token_failure_is_an_error_without_the_app_secret(mocked, lark):
    mocked.post(TOKEN_URL, json={"code": 10014, "msg": f"app secret {APP_SECRET} invalid"})

    with pytest.raises(IntegrationRejected) as caught:
        lark.send_card("ou_1", {}, "u1")

    assert caught.value.code == 10014
    assert APP_SECRET not in caught.value.message
    assert len(calls_to(mocked, MESSAGES_URL)) == 0


def test_non_zero_code_in_a_200_envelope_is_an_error(mocked, lark):
    token(mocked)
    mocked.post(MESSAGES_URL, json=envelope(code=230002, msg="The bot is not in the chat"))

    with pytest.raises(IntegrationRejected) as caught:
        lark.send_card("ou_1", {}, "u1")

    assert (caught.value.status, caught.value.code) == (200, 230002)
    assert "The bot is not in the chat" in caught.value.message


def test_rate_limit_with_retry_after_is_retried(mocked, lark, waits):
    token(mocked)
    mocked.post(MESSAGES_URL, status=429, headers={"Retry-After": "1"},
                json={"code": 99991400, "msg": "request trigger frequency limit"})
    mocked.post(MESSAGES_URL, json=envelope({"message_id": "om_1"}))

    assert lark.send_card("ou_1", {}, "u1") == "om_1"
    assert waits == [1.0]


def test_rate_limit_without_retry_after_is_an_error(mocked, lark, waits):
    token(mocked)
    mocked.post(MESSAGES_URL, status=429,
                json={"code": 99991400, "msg": "request trigger frequency limit"})

    with pytest.raises(IntegrationRejected) as caught:
        lark.send_card("ou_1", {}, "u1")

    assert (caught.value.status, caught.value.code) == (429, 99991400)
    assert waits == []


def test_server_error_malformed_json_and_timeout_are_errors(mocked, lark):
    token(mocked)
    mocked.post(MESSAGES_URL, status=500, body="oops")
    mocked.post(MESSAGES_URL, body="{not json")
    mocked.post(MESSAGES_URL, body=requests.exceptions.ReadTimeout("slow"))

    with pytest.raises(IntegrationError) as server_error:
        lark.send_card("ou_1", {}, "u1")
    with pytest.raises(IntegrationError) as malformed:
        lark.send_card("ou_1", {}, "u1")
    with pytest.raises(IntegrationTimeout):
        lark.send_card("ou_1", {}, "u1")

    assert server_error.value.status == 500
    assert "not JSON" in malformed.value.message


def test_open_ids_by_email_omits_unknown_emails(mocked, lark):
    token(mocked)
    mocked.post(BATCH_URL, json=envelope({"user_list": [
        {"email": "alice@example.com", "user_id": "ou_a"},
        {"email": "ghost@example.com"}]}), match=[
        *bearer("t-first"),
        matchers.query_param_matcher({"user_id_type": "open_id"}),
        matchers.json_params_matcher({"emails": ["alice@example.com", "ghost@example.com"]})])

    found = lark.open_ids_by_email(["Alice@Example.com", "ghost@example.com"])

    assert found == {"alice@example.com": "ou_a"}


def test_open_ids_by_email_with_no_emails_makes_no_call(mocked, lark):
    assert lark.open_ids_by_email([]) == {}
    assert len(mocked.calls) == 0


def test_urgent_app_patches_our_message_and_returns_invalid_ids(mocked, lark):
    token(mocked)
    mocked.patch(f"{MESSAGES_URL}/om_1/urgent_app",
                 json=envelope({"invalid_user_id_list": ["ou_gone"]}), match=[
                     *bearer("t-first"),
                     matchers.query_param_matcher({"user_id_type": "open_id"}),
                     matchers.json_params_matcher({"user_id_list": ["ou_gone"]})])

    assert lark.urgent_app("om_1", "ou_gone") == ["ou_gone"]


def test_read_user_ids_follows_every_page(mocked, lark):
    token(mocked)
    mocked.get(READ_URL, json=envelope({"items": [
        {"user_id_type": "open_id", "user_id": "ou_1", "timestamp": "1"}],
        "has_more": True, "page_token": "p2"}),
        match=[matchers.query_param_matcher({"user_id_type": "open_id", "page_size": "100"})])
    mocked.get(READ_URL, json=envelope({"items": [
        {"user_id_type": "open_id", "user_id": "ou_2", "timestamp": "2"}],
        "has_more": False, "page_token": ""}),
        match=[matchers.query_param_matcher({"user_id_type": "open_id", "page_size": "100",
                                             "page_token": "p2"})])

    readers = lark.read_user_ids("om_1")
    assert readers == ["ou_1", "ou_2"]
    assert read_time(readers, "ou_2") == datetime(1970, 1, 1, 0, 0, 0, 2000, tzinfo=UTC)
    pages = [parse_qs(urlsplit(c.request.url).query) for c in calls_to(mocked, READ_URL)]
    assert [p.get("page_token") for p in pages] == [None, ["p2"]]


def test_read_users_saying_has_more_without_a_page_token_is_an_error(mocked, lark):
    token(mocked)
    mocked.get(READ_URL, json=envelope({"items": [], "has_more": True}))

    with pytest.raises(IntegrationError):
        lark.read_user_ids("om_1")


def test_secrets_and_tenant_token_never_reach_errors_or_logs(mocked, lark, caplog):
    caplog.set_level(logging.DEBUG)
    token(mocked, "t-tenant-token-xyz")
    mocked.post(MESSAGES_URL, status=403,
                json={"code": 99991672, "msg": "t-tenant-token-xyz lacks im:message scope"})

    with pytest.raises(IntegrationRejected) as caught:
        lark.send_card("ou_1", {}, "u1")

    for text in [caught.value.message] + [r.getMessage() for r in caplog.records]:
        assert "t-tenant-token-xyz" not in text
        assert APP_SECRET not in text
