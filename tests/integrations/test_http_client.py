"""The client base: the request as a client shapes it, its errors, safe logs."""

from __future__ import annotations

import base64
import logging

import pytest
import requests
from responses import matchers

from tests.integrations.http_clients import BASE, TOKEN, client
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown
from ticket_dispatcher.integrations.http import (
    BearerAuth,
    IntegrationRejected,
    IntegrationTimeout,
    segment,
)


def test_request_sends_method_path_query_body_and_bearer_auth(mocked):
    mocked.post(f"{BASE}/api/v1/things", json={"ok": True}, match=[
        matchers.query_param_matcher({"kind": "a,b"}),
        matchers.json_params_matcher({"name": "x"}),
        matchers.header_matcher({"Authorization": f"Bearer {TOKEN}"}),
    ])

    answer = client().request_json("POST", "/api/v1/things", params={"kind": "a,b"},
                                   json={"name": "x"})

    assert answer == {"ok": True}


@pytest.mark.parametrize("method,path,params,body", [
    ("GET", "/rest/api/2/issue/TCID-1", {"fields": "summary,labels", "expand": None}, None),
    ("GET", "/rest/api/2/user/search", {"query": "ann+o'neil@example.com"}, None),
    ("GET", "/open-apis/contact/v3/users/batch", [("user_ids", "ou_1"), ("user_ids", "ou_2")],
     None),
    ("GET", "/teams", {"ids": ["a b", "ç/d"], "limit": 10, "active": True}, None),
    ("PUT", f"/rest/api/2/issue/{segment('TCID 1/ü')}/assignee", None,
     {"accountId": "acc-ü", "n": [1, 2.5, None, True]}),
    ("POST", "/token", None, None),
    ("DELETE", "/rest/api/2/issue/TCID-1/watchers", {"accountId": "x"}, None),
])
def test_a_request_is_sent_as_requests_itself_prepares_it(mocked, method, path, params, body):
    # The sender builds the request without requests' own preparation: URL, query, body and
    # headers must still be exactly what requests would have sent.
    mocked.add(method, f"{BASE}{path.split('?')[0]}")
    auth = ("bot@example.com", "pw")

    client(auth=auth).request(method, path, params=params, json=body)

    sent = mocked.calls[0].request
    expected = requests.Request(method, BASE + path, params=params, json=body,
                                auth=auth, headers=requests.Session().headers).prepare()
    assert sent.method == expected.method
    assert sent.url == expected.url
    assert sent.body == expected.body
    assert dict(sent.headers) == dict(expected.headers)


def test_basic_auth_tuple_and_header_callable_are_both_accepted(mocked):
    basic = base64.b64encode(b"bot@example.com:pw").decode()
    mocked.get(f"{BASE}/basic", match=[
        matchers.header_matcher({"Authorization": f"Basic {basic}"})])
    mocked.get(f"{BASE}/headers", match=[matchers.header_matcher({"X-Token": "t"})])

    client(auth=("bot@example.com", "pw")).request("GET", "/basic")
    client(auth=lambda: {"X-Token": "t"}).request("GET", "/headers")

    assert len(mocked.calls) == 2


def test_unauthenticated_request_sends_no_authorization_header(mocked):
    mocked.post(f"{BASE}/token")

    client().request("POST", "/token", authenticate=False)

    assert "Authorization" not in mocked.calls[0].request.headers


def test_timeouts_are_passed_to_requests(mocked):
    mocked.get(f"{BASE}/x")

    client(connect_timeout=1.5, read_timeout=7).request("GET", "/x")

    assert mocked.calls[0].request.req_kwargs["timeout"] == (1.5, 7)


def test_jira_error_body_is_in_the_message_with_status_and_service(mocked):
    mocked.put(f"{BASE}/rest/api/2/issue/TCID-1", status=400, json={
        "errorMessages": ["Field cannot be set"], "errors": {"customfield_10053": "bad user"}})

    with pytest.raises(IntegrationRejected) as caught:
        client().request("PUT", "/rest/api/2/issue/TCID-1", json={}, expected=(204,))

    error = caught.value
    assert (error.status, error.service, error.timeout) == (400, "svc", False)
    assert error.message == ("svc PUT /rest/api/2/issue/TCID-1 failed: HTTP 400: "
                             "Field cannot be set; customfield_10053: bad user")


def test_lark_style_error_carries_its_code(mocked):
    mocked.post(f"{BASE}/open-apis/x", status=400, json={"code": 99991663, "msg": "bad token"})

    with pytest.raises(IntegrationRejected) as caught:
        client().request("POST", "/open-apis/x")

    assert caught.value.code == 99991663
    assert "code 99991663: bad token" in caught.value.message


def test_server_error_with_html_body_does_not_echo_the_body(mocked):
    mocked.get(f"{BASE}/x", status=500, body="<html>Authorization: Bearer leaked</html>")

    with pytest.raises(IntegrationRejected) as caught:
        client().request("GET", "/x")

    assert caught.value.status == 500
    assert caught.value.message == "svc GET /x failed: HTTP 500"


def test_long_service_error_text_is_truncated(mocked):
    mocked.get(f"{BASE}/x", status=422, json={"message": "y" * 5000})

    with pytest.raises(IntegrationRejected) as caught:
        client().request("GET", "/x")

    assert len(caught.value.message) < 300


def test_secret_echoed_by_the_service_is_masked(mocked):
    mocked.get(f"{BASE}/x", status=401, json={"message": f"token {TOKEN} is revoked"})

    with pytest.raises(IntegrationRejected) as caught:
        client().request("GET", "/x")

    assert TOKEN not in caught.value.message
    assert "***" in caught.value.message


def test_malformed_json_is_an_integration_error(mocked):
    mocked.get(f"{BASE}/x", body="not json{")

    with pytest.raises(IntegrationError) as caught:
        client().request_json("GET", "/x")

    assert caught.value.status == 200
    assert "not JSON" in caught.value.message


def test_read_timeout_is_an_unknown_outcome_without_status(mocked):
    mocked.get(f"{BASE}/x",
               body=requests.exceptions.ReadTimeout(f"{BASE}/x?email=a@example.com timed out"))

    with pytest.raises(IntegrationTimeout) as caught:
        client().request("GET", "/x", params={"email": "a@example.com"})

    error = caught.value
    # Sent, but unanswered: the peer may have acted.
    assert isinstance(error, OutcomeUnknown)
    assert (error.status, error.service, error.timeout) == (None, "svc", True)
    assert error.__cause__ is None and error.__suppress_context__
    assert "a@example.com" not in error.message


def test_connect_timeout_is_a_plain_connection_failure(mocked):
    # The request never reached the peer, so nothing can have happened there.
    mocked.get(f"{BASE}/x",
               body=requests.exceptions.ConnectTimeout(f"{BASE}/x?email=a@example.com"))

    with pytest.raises(IntegrationError) as caught:
        client().request("GET", "/x", params={"email": "a@example.com"})

    error = caught.value
    assert not isinstance(error, OutcomeUnknown)
    assert (error.status, error.service) == (None, "svc")
    assert "connection failed (ConnectTimeout)" in error.message
    assert "a@example.com" not in error.message


def test_connection_failure_is_an_error_but_not_a_timeout(mocked):
    mocked.get(f"{BASE}/x", body=requests.exceptions.ConnectionError("refused"))

    with pytest.raises(IntegrationError) as caught:
        client().request("GET", "/x")

    assert not isinstance(caught.value, IntegrationTimeout)
    assert caught.value.status is None
    assert "connection failed" in caught.value.message


def test_each_call_is_logged_at_debug_without_headers_query_or_body(mocked, caplog):
    mocked.post(f"{BASE}/api/v1/page", status=201)
    caplog.set_level(logging.DEBUG, logger="ticket_dispatcher.integrations")

    http = client()
    http.request("POST", "/api/v1/page", params={"q": "a@example.com"},
                 json={"message": "call +8613800138000"}, expected=(201,))

    [record] = [r for r in caplog.records if r.name == "ticket_dispatcher.integrations.http"]
    text = record.getMessage()
    assert record.levelno == logging.DEBUG
    assert text.startswith("svc POST /api/v1/page -> 201 in ")
    for absent in (TOKEN, "Bearer", "a@example.com", "+8613800138000"):
        assert absent not in text
    assert http.last_latency_ms is not None and http.last_latency_ms >= 0


def test_a_failed_call_is_logged_with_no_status(mocked, caplog):
    mocked.get(f"{BASE}/x", body=requests.exceptions.ReadTimeout("slow"))
    caplog.set_level(logging.DEBUG, logger="ticket_dispatcher.integrations")

    with pytest.raises(IntegrationTimeout):
        client().request("GET", "/x")

    assert any(r.getMessage().startswith("svc GET /x -> None in ") for r in caplog.records)


def test_a_redirect_is_not_followed_and_is_an_unexpected_status(mocked):
    mocked.get(f"{BASE}/rest/api/2/myself", status=302,
               headers={"Location": "https://elsewhere.example.com/steal"})

    with pytest.raises(IntegrationRejected) as raised:
        client().request("GET", "/rest/api/2/myself")

    assert raised.value.status == 302
    assert [call.request.url for call in mocked.calls] == [f"{BASE}/rest/api/2/myself"]


def test_the_answer_body_is_read_before_the_call_returns(mocked):
    mocked.get(f"{BASE}/big", body=b"x" * 100_000)

    response = client().request("GET", "/big")

    assert response._content_consumed and len(response.content) == 100_000


def test_bearer_auth_repr_hides_the_token():
    assert TOKEN not in repr(BearerAuth(TOKEN))


def test_path_segments_are_quoted():
    assert segment("TCID-1") == "TCID-1"
    assert segment("a.b@example.com") == "a.b@example.com"
    assert segment("team/one two?") == "team%2Fone%20two%3F"
