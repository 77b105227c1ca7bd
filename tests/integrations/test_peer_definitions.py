"""Every request the Jira and Lark clients send, checked against the peers' published
definitions rather than against fakes written to accept it.

Jira: the operations the service uses, trimmed from Atlassian's published OpenAPI documents
(tests/peers/README.md says which and when). Method, path template, query parameters and the
JSON body, with ``jsonschema``. Lark: the official SDK ``lark-oapi``, whose request builders
know each endpoint's method, URI, query parameters and body fields.

Each public method of each client is one or more rows of a table below; the real client runs
against a recording ``responses`` mock that answers like the peer, and each request it sent is
checked. A guard fails when a client has a public method no row covers, so a new call cannot
skip the check: add a row.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import responses
from lark_oapi.api.auth.v3 import InternalTenantAccessTokenRequest
from lark_oapi.api.contact.v3 import BatchGetIdUserRequest
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    ReadUsersMessageRequest,
    UrgentAppMessageRequest,
)

from tests.clocks import ManualClock
from tests.integrations.mocking import mock_http
from tests.peers.lark_requests import LarkSdk
from tests.peers.openapi_requests import OpenApiDocument
from tests.peers.sent import NO_BODY, SentRequest
from ticket_dispatcher.config import JiraConfig, LarkConfig
from ticket_dispatcher.domain.ports import TriageChange
from ticket_dispatcher.integrations.jira import JiraClient
from ticket_dispatcher.integrations.lark import LarkClient

PEERS = Path(__file__).resolve().parents[1] / "peers"
JIRA_BASE = "https://example.atlassian.net"
LARK_BASE = "https://open.feishu.example"
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True)
class Call:
    """One use of a client's public ``method``. ``deviations`` are problems the published
    definition is known to report for it, each explained where the row is written; any other
    problem, or one of these going away, fails the test."""

    method: str
    run: Callable[[Any], object]
    case: str = ""
    sends: bool = True
    deviations: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.method}-{self.case}" if self.case else self.method


# --- Jira -------------------------------------------------------------------------------------

JIRA_CALLS = (
    Call("load_issue", lambda jira: jira.load_issue("TCOC-7")),
    Call("assign", lambda jira: jira.assign("TCOC-7", "acc-1"), "someone"),
    # Atlassian's Assign issue operation says "If accountId is set to null, the issue is set to
    # unassigned", but the User schema it names for the body types accountId as a string only
    # (no "nullable"). The client follows the prose; the schema refuses the null.
    Call("assign", lambda jira: jira.assign("TCOC-7", None), "nobody", deviations=(
        "PUT /rest/api/2/issue/TCOC-7/assignee (assignIssue): body: accountId: None is not "
        "of type 'string'",)),
    Call("set_l2_assignee", lambda jira: jira.set_l2_assignee("TCOC-7", "acc-2"), "someone"),
    Call("set_l2_assignee", lambda jira: jira.set_l2_assignee("TCOC-7", None), "nobody"),
    Call("assign_and_label", lambda jira: jira.assign_and_label("TCOC-7", "acc-1", ["b"]),
         "assignee"),
    Call("assign_and_label", lambda jira: jira.assign_and_label("TCOC-7", "acc-2", ["b"],
                                                                l2=True), "l2"),
    Call("edit_labels", lambda jira: jira.edit_labels("TCOC-7", add=["a"], remove=["b"])),
    Call("apply_triage", lambda jira: jira.apply_triage("TCOC-7", TriageChange(
        priority="P1", components=("payments",), labels_add=("triaged",),
        labels_remove=("new",), fields={"customfield_20002": {"value": "S2"}}))),
    Call("find_user_by_email", lambda jira: jira.find_user_by_email("Alice@Example.com")),
    Call("add_internal_comment", lambda jira: jira.add_internal_comment("TCOC-7", "Assigned")),
    Call("approximate_count", lambda jira: jira.approximate_count(
        'assignee = "acc-1" AND statusCategory != Done')),
    Call("count_issues", lambda jira: jira.count_issues(
        ['assignee = "acc-1"', 'assignee = "acc-2"'])),
    Call("find_users_by_email", lambda jira: jira.find_users_by_email(
        ["alice@example.com", "bob@example.com"])),
    Call("load_issues", lambda jira: jira.load_issues(["TCOC-7", "TCOC-8"])),
    Call("close", lambda jira: jira.close(), sends=False),
)


def jira_documents() -> list[OpenApiDocument]:
    # Atlassian: "Both versions offer the same collection of operations"; v3 only adds the
    # Atlassian Document Format to rich-text fields. The client speaks v2, the copy is v3.
    return [OpenApiDocument(PEERS / "jira-platform-openapi.json",
                            aliases={"/rest/api/2/": "/rest/api/3/"}),
            OpenApiDocument(PEERS / "jira-service-management-openapi.json")]


def jira_problems(documents: list[OpenApiDocument], sent: SentRequest) -> list[str]:
    serving = [document for document in documents if document.serves(sent)]
    if not serving:
        return [f"{sent}: no published Jira document in tests/peers has this path"]
    return serving[0].problems(sent)


def jira_answer(request: requests.PreparedRequest) -> tuple[int, dict, str]:
    """What Jira Cloud answers, enough for the client to finish its call."""
    sent = SentRequest.from_prepared(request)
    user = {"accountId": "acc-1", "accountType": "atlassian", "active": True,
            "displayName": "Alice", "emailAddress": "alice@example.com"}
    routes: list[tuple[str, str, int, Any]] = [
        ("GET", r"/rest/api/2/issue/[^/]+", 200, {"key": "TCOC-7", "fields": {
            "summary": "Checkout fails", "project": {"key": "TCOC"}, "status": {"name": "Todo"},
            "created": "2021-01-17T12:34:00.000+0000", "labels": [], "components": []}}),
        ("GET", r"/rest/api/2/user/search", 200, [user]),
        ("POST", r"/rest/api/2/search/approximate-count", 200, {"count": 3}),
        ("POST", r"/rest/api/2/search/jql", 200, {"issues": [{"key": "TCOC-7", "fields": {
            "summary": "Checkout fails", "project": {"key": "TCOC"}, "status": {"name": "Todo"},
            "created": "2021-01-17T12:34:00.000+0000", "labels": [], "components": []}}]}),
        ("PUT", r"/rest/api/2/issue/[^/]+(/assignee)?", 204, None),
        ("POST", r"/rest/servicedeskapi/request/[^/]+/comment", 201, {"id": "1000"}),
    ]
    for method, pattern, status, body in routes:
        if sent.method == method and re.fullmatch(pattern, sent.path):
            return status, {}, "" if body is None else json.dumps(body)
    return 404, {}, json.dumps({"errorMessages": ["not found"]})


@pytest.fixture
def recorder() -> Iterator[responses.RequestsMock]:
    """Every request goes to ``responses`` and is recorded; the peer routes are answered by
    callbacks, so a call may use any of them."""
    with mock_http(assert_all_requests_are_fired=False) as mock:
        yield mock


def record(recorder: responses.RequestsMock, base: str,
           answer: Callable[[requests.PreparedRequest], tuple[int, dict, str]]) -> None:
    for method in HTTP_METHODS:
        recorder.add_callback(method, re.compile(re.escape(base) + r"/.*"), callback=answer,
                              content_type="application/json")


def sent_requests(recorder: responses.RequestsMock) -> list[SentRequest]:
    return [SentRequest.from_prepared(call.request) for call in recorder.calls]


@pytest.fixture(scope="module")
def jira_peer() -> list[OpenApiDocument]:
    return jira_documents()


@pytest.mark.parametrize("call", JIRA_CALLS, ids=lambda call: call.id)
def test_every_jira_request_is_allowed_by_the_published_api(call, recorder, jira_peer):
    record(recorder, JIRA_BASE, jira_answer)
    jira = JiraClient(JiraConfig(base_url=JIRA_BASE, email="bot@example.com", api_token="token",
                                 l2_field_id="customfield_20001",
                                 severity_field_id="customfield_20002"),
                      connect_timeout=1, read_timeout=2, sleep=lambda _: None)
    try:
        call.run(jira)
    finally:
        jira.close()

    sent = sent_requests(recorder)
    assert bool(sent) == call.sends
    assert [p for one in sent for p in jira_problems(jira_peer, one)] == list(call.deviations)


def test_every_public_jira_client_method_has_a_row():
    assert public_methods(JiraClient) == {call.method for call in JIRA_CALLS}


# --- Lark -------------------------------------------------------------------------------------

LARK_CALLS = (
    Call("open_ids_by_email", lambda lark: lark.open_ids_by_email(
        ["Alice@Example.com", "bob@example.com"])),
    Call("send_card", lambda lark: lark.send_card(
        "ou_1", {"header": {"title": {"tag": "plain_text", "content": "TCOC-7"}}}, "exec-7-1")),
    Call("urgent_app", lambda lark: lark.urgent_app("om_1", "ou_1")),
    Call("read_user_ids", lambda lark: lark.read_user_ids("om_1")),
    Call("read_user_ids_each", lambda lark: lark.read_user_ids_each(["om_1", "om_2"])),
    Call("close", lambda lark: lark.close(), sends=False),
)

# Every endpoint the client calls, as the SDK names it; a new endpoint adds its request class.
LARK_SDK_REQUESTS = (InternalTenantAccessTokenRequest, BatchGetIdUserRequest,
                     CreateMessageRequest, UrgentAppMessageRequest, ReadUsersMessageRequest)


def lark_answer(request: requests.PreparedRequest) -> tuple[int, dict, str]:
    """What Lark answers: the token, or an envelope; read users come in two pages."""
    sent = SentRequest.from_prepared(request)
    query = dict(sent.query)
    if sent.path.endswith("/tenant_access_token/internal"):
        body: dict = {"code": 0, "msg": "ok", "tenant_access_token": "t-1", "expire": 7200}
        return 200, {}, json.dumps(body)
    data: dict[str, Any] = {}
    if sent.path.endswith("/batch_get_id"):
        data = {"user_list": [{"email": email, "user_id": f"ou_{n}"}
                              for n, email in enumerate(sent.body["emails"])]}
    elif sent.path.endswith("/urgent_app"):
        data = {"invalid_user_id_list": []}
    elif sent.path.endswith("/read_users"):
        last = "page_token" in query
        data = {"items": [{"user_id": "ou_2" if last else "ou_1"}], "has_more": not last,
                "page_token": "" if last else "p-2"}
    elif sent.path == "/open-apis/im/v1/messages":
        data = {"message_id": "om_1"}
    return 200, {}, json.dumps({"code": 0, "msg": "ok", "data": data})


@pytest.fixture(scope="module")
def lark_sdk() -> LarkSdk:
    return LarkSdk(LARK_SDK_REQUESTS)


@pytest.mark.parametrize("call", LARK_CALLS, ids=lambda call: call.id)
def test_every_lark_request_is_the_sdk_request_for_its_endpoint(call, recorder, lark_sdk):
    record(recorder, LARK_BASE, lark_answer)
    lark = LarkClient(LarkConfig(base_url=LARK_BASE, app_id="cli_app", app_secret="secret"),
                      connect_timeout=1, read_timeout=2, clock=ManualClock(),
                      sleep=lambda _: None)
    try:
        call.run(lark)
    finally:
        lark.close()

    sent = sent_requests(recorder)
    assert bool(sent) == call.sends
    assert [p for one in sent for p in lark_sdk.problems(one)] == list(call.deviations)


def test_read_user_ids_is_checked_on_a_later_page_too(recorder, lark_sdk):
    record(recorder, LARK_BASE, lark_answer)
    lark = LarkClient(LarkConfig(base_url=LARK_BASE, app_id="cli_app", app_secret="secret"),
                      clock=ManualClock(), sleep=lambda _: None)

    assert lark.read_user_ids("om_1") == ["ou_1", "ou_2"]

    pages = [one for one in sent_requests(recorder) if one.path.endswith("/read_users")]
    assert [dict(one.query).get("page_token") for one in pages] == [None, "p-2"]
    assert [p for one in pages for p in lark_sdk.problems(one)] == []


def test_every_public_lark_client_method_has_a_row():
    assert public_methods(LarkClient) == {call.method for call in LARK_CALLS}


def public_methods(client: type) -> set[str]:
    return {name for name, member in inspect.getmembers(client, inspect.isfunction)
            if not name.startswith("_")}


# --- the checks catch what they should -------------------------------------------------------

JSON_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer t-1"}


@pytest.mark.parametrize("sent, problem", [
    (SentRequest("GET", "/rest/api/2/user/search", (("query", "a"), ("emailAddress", "a"))),
     "query parameter 'emailAddress' is not declared"),
    (SentRequest("GET", "/rest/api/2/user/search", (("query", "a"), ("maxResults", "many"))),
     "query parameter 'maxResults' ['many'] is not of type 'integer'"),
    (SentRequest("GET", "/rest/api/2/issue/TCOC-7", (("updateHistory", "yes"),)),
     "query parameter 'updateHistory' ['yes'] is not of type 'boolean'"),
    (SentRequest("POST", "/rest/api/2/search/approximate-count", body={"jql": 7},
                 headers=JSON_HEADERS), "body: jql: 7 is not of type 'string'"),
    (SentRequest("POST", "/rest/api/2/search/approximate-count", body={"query": "x"},
                 headers=JSON_HEADERS), "Additional properties are not allowed ('query'"),
    (SentRequest("POST", "/rest/api/2/search/approximate-count"),
     "the request body is required"),
    (SentRequest("PUT", "/rest/api/2/issue/TCOC-7/assignee",
                 body={"accountId": "a", "displayName": "A"}, headers=JSON_HEADERS),
     "body: displayName: is readOnly"),
    (SentRequest("PUT", "/rest/api/2/issue/TCOC-7",
                 body={"update": {"labels": [{"append": "x"}]}}, headers=JSON_HEADERS),
     "body: update/labels/0: Additional properties are not allowed ('append'"),
    (SentRequest("DELETE", "/rest/api/2/issue/TCOC-7/assignee"), "allows only ['PUT']"),
    (SentRequest("GET", "/rest/api/2/issues/TCOC-7"), "no published Jira document"),
    (SentRequest("POST", "/rest/servicedeskapi/request/TCOC-7/comment",
                 body={"body": "x", "public": "no"}, headers=JSON_HEADERS),
     "body: public: 'no' is not of type 'boolean'"),
], ids=lambda value: value if isinstance(value, str) else str(value))
def test_jira_check_refuses_what_the_published_api_does_not_allow(sent, problem, jira_peer):
    problems = jira_problems(jira_peer, sent)

    assert any(problem in one for one in problems), problems


@pytest.mark.parametrize("sent, problem", [
    (SentRequest("PATCH", "/open-apis/im/v1/messages/om_1/urgent_app",
                 (("user_id_type", "open_id"), ("receive_id_type", "open_id")),
                 {"user_id_list": ["ou_1"]}, JSON_HEADERS),
     "query parameter 'receive_id_type' is not one the SDK sends"),
    (SentRequest("PATCH", "/open-apis/im/v1/messages/om_1/urgent_app",
                 (("user_id_type", "open_id"),), {"user_id_list": "ou_1"}, JSON_HEADERS),
     "body.user_id_list is str, the SDK has a list"),
    (SentRequest("POST", "/open-apis/im/v1/messages", (("receive_id_type", "open_id"),),
                 {"receive_id": "ou_1", "msg_type": "interactive", "card": {}}, JSON_HEADERS),
     "body.card is not a field of CreateMessageRequestBody"),
    (SentRequest("POST", "/open-apis/im/v1/messages", (("receive_id_type", "open_id"),),
                 {"receive_id": "ou_1", "msg_type": "interactive", "content": {}},
                 JSON_HEADERS), "body.content is dict, the SDK has str"),
    (SentRequest("GET", "/open-apis/im/v1/messages/om_1/read_users",
                 (("user_id_type", "open_id"), ("page_size", "all")), NO_BODY, JSON_HEADERS),
     "query parameter 'page_size' 'all' is not of type int"),
    (SentRequest("POST", "/open-apis/im/v1/messages/om_1/read_users", (), NO_BODY,
                 JSON_HEADERS), "no operation of lark-oapi"),
    (SentRequest("POST", "/open-apis/auth/v3/tenant_access_token/internal", (),
                 {"app_id": "a", "app_secret": "s"}, JSON_HEADERS),
     "the SDK sends no Authorization here"),
    (SentRequest("PATCH", "/open-apis/im/v1/messages/om_1/urgent_app",
                 (("user_id_type", "open_id"),), {"user_id_list": ["ou_1"]},
                 {"Content-Type": "application/json"}),
     "the SDK sends a Bearer access token here"),
], ids=lambda value: value if isinstance(value, str) else str(value))
def test_lark_check_refuses_what_the_sdk_would_not_send(sent, problem, lark_sdk):
    problems = lark_sdk.problems(sent)

    assert any(problem in one for one in problems), problems
