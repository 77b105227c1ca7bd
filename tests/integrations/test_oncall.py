"""The Oncall client: responders and pages; every page outcome consumes the attempt."""

from __future__ import annotations

import logging

import pytest
import requests
from responses import matchers

from ticket_dispatcher.config import OncallConfig
from ticket_dispatcher.domain.ports import PageResult, Responder
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.integrations.oncall import OncallClient
from ticket_dispatcher.integrations.transport import AnswerLost

BASE = "https://oncall.internal.example"
TOKEN = "oncall-bearer-secret"
PAGE_URL = f"{BASE}/api/v1/page"
PAGE = dict(email="alice@example.com", title="TCOC-7 needs you", message="P1 checkout down",
            issue_key="TCOC-7", dedup_key="exec-7-page-1")


@pytest.fixture
def oncall():
    client = OncallClient(OncallConfig(base_url=BASE, token=TOKEN), connect_timeout=1,
                          read_timeout=2, sleep=lambda _: None)
    yield client
    client.close()


def test_responders_are_lower_cased_and_keep_primary_first(mocked, oncall):
    mocked.get(f"{BASE}/api/v1/teams/checkout%20team/responders", json={"responders": [
        {"email": "Primary@Example.com", "name": "Pri"}, {"email": "second@example.com",
                                                        "name": "Sec"}]},
        match=[matchers.header_matcher({"Authorization": f"Bearer {TOKEN}"})])

    assert oncall.responders("checkout team") == [Responder("primary@example.com", "Pri"),
                                                  Responder("second@example.com", "Sec")]


def test_responders_answer_without_a_list_is_an_error(mocked, oncall):
    mocked.get(f"{BASE}/api/v1/teams/t/responders", json={"people": []})

    with pytest.raises(IntegrationError):
        oncall.responders("t")


def test_unknown_team_is_an_error_with_its_status(mocked, oncall):
    mocked.get(f"{BASE}/api/v1/teams/nope/responders", status=404, json={"error": "no team"})

    with pytest.raises(IntegrationError) as caught:
        oncall.responders("nope")

    assert (caught.value.status, caught.value.service) == (404, "oncall")
    assert "no team" in caught.value.message


def test_accepted_page_returns_the_call_id(mocked, oncall):
    mocked.post(PAGE_URL, json={"accepted": True, "call_id": "call-1", "call_error": ""},
                match=[matchers.json_params_matcher(PAGE),
                       matchers.header_matcher({"Authorization": f"Bearer {TOKEN}"})])

    assert oncall.page(**PAGE) == PageResult("accepted", call_id="call-1")


def test_page_without_phone_number_is_failed(mocked, oncall):
    mocked.post(PAGE_URL, json={"accepted": False, "call_error": "no_phone_number"})

    result = oncall.page(**PAGE)

    assert (result.outcome, result.call_error) == ("failed", "no_phone_number")


def test_accepted_page_with_a_call_error_is_failed(mocked, oncall):
    mocked.post(PAGE_URL, json={"accepted": True, "call_id": "c", "call_error": "line busy"})

    assert oncall.page(**PAGE).outcome == "failed"


def test_page_timeout_is_unknown_and_does_not_raise(mocked, oncall):
    mocked.post(PAGE_URL, body=requests.exceptions.ReadTimeout("slow"))

    result = oncall.page(**PAGE)

    assert result.outcome == "unknown"
    assert "no answer" in result.call_error


def test_page_http_error_is_failed_with_a_safe_error(mocked, oncall):
    mocked.post(PAGE_URL, status=500, json={"error": "dialer down for +8613800138000"})

    result = oncall.page(**PAGE)

    assert result.outcome == "failed"
    assert "HTTP 500" in result.call_error
    assert "13800138000" not in result.call_error


def test_page_connection_failure_is_failed(mocked, oncall):
    mocked.post(PAGE_URL, body=requests.exceptions.ConnectionError("refused"))

    assert oncall.page(**PAGE).outcome == "failed"


def test_page_whose_connection_broke_after_it_was_sent_is_unknown(mocked, oncall):
    # sent, and the dialer may already ring: never failed, so never paged again
    mocked.post(PAGE_URL, body=AnswerLost("reset by peer"))

    assert oncall.page(**PAGE).outcome == "unknown"


def test_page_answered_503_is_sent_once_and_failed(mocked, oncall):
    mocked.post(PAGE_URL, status=503, headers={"Retry-After": "1"})

    assert oncall.page(**PAGE).outcome == "failed"
    assert len(mocked.calls) == 1


def test_page_with_unreadable_success_body_is_unknown(mocked, oncall):
    mocked.post(PAGE_URL, body="<html>ok</html>")

    assert oncall.page(**PAGE).outcome == "unknown"


def test_phone_numbers_in_call_error_are_masked(mocked, oncall):
    mocked.post(PAGE_URL, json={"accepted": False, "call_error": "busy: +86 138 0013 8000"})

    assert "8000" not in oncall.page(**PAGE).call_error


def test_bearer_token_never_reaches_errors_or_logs(mocked, oncall, caplog):
    caplog.set_level(logging.DEBUG)
    mocked.get(f"{BASE}/api/v1/teams/t/responders", status=401,
               json={"error": f"token {TOKEN} expired"})
    mocked.post(PAGE_URL, status=401, json={"error": f"Bearer {TOKEN} expired"})

    with pytest.raises(IntegrationError) as caught:
        oncall.responders("t")
    result = oncall.page(**PAGE)

    for text in [caught.value.message, result.call_error] + [r.getMessage()
                                                             for r in caplog.records]:
        assert TOKEN not in text
