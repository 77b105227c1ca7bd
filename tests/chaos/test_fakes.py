"""The chaos soak's fakes process (tests/chaos/fakes.py): its world, its fault knobs, its call
log and its ACK actions, driven over HTTP as the soak drives them.

One process serves the module's tests (each adds issues of its own and clears the faults it
set); the last test starts a second one to check ``--world`` from a file, ``--calls-file`` and
a bounded exit on SIGTERM. The tests call the fakes as the product does (its paths, bodies and
credentials) and read what happened from the control API only.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.process import wait_until

ROOT = Path(__file__).resolve().parents[2]
READY_WAIT, EXIT_WAIT = 20, 10
EMAIL, ACCOUNT, OPEN_ID, NAME = "alice@example.com", "acc-alice", "ou_alice", "Alice Example"
LEADER = "lead@example.com"
WORLD = {
    "users": [
        {"email": EMAIL, "account_id": ACCOUNT, "name": NAME, "open_id": OPEN_ID,
         "leader": LEADER},
        {"email": LEADER, "account_id": "acc-lead", "name": "Lead", "open_id": "ou_lead",
         "phone": False},
        {"email": "bob@example.com", "account_id": "acc-bob", "active": False},
    ],
    "issues": [{"key": "PAGE-1", "assignee": EMAIL, "priority": "P0", "status": "Todo",
                "labels": ["notify-assignee"]}],
    "groups": [{"name": "sre", "members": [EMAIL, "bob@example.com"]}],
    "teams": [{"name": "primary", "responders": [EMAIL, LEADER]}],
}


class FakesProcess:
    """``python -m tests.chaos.fakes`` and what its ready file says."""

    def __init__(self, directory: Path, *options: str):
        self.ready_file = directory / "ready.json"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.fakes", "--ready-file", str(self.ready_file),
             *options], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        wait_until(lambda: self.ready_file.exists() or self.process.poll() is not None,
                   READY_WAIT, "the fakes process writes its ready file")
        assert self.ready_file.exists(), self.process.communicate(timeout=5)[1]
        self.ready = json.loads(self.ready_file.read_text())

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=EXIT_WAIT)
            raise AssertionError("the fakes process did not stop on SIGTERM") from None

    # -- the control API ----------------------------------------------------------------------

    def control(self, method: str, path: str, expected: int = 200, **kwargs: Any) -> Any:
        response = requests.request(method, self.ready["control"] + path, timeout=10, **kwargs)
        assert response.status_code == expected, (method, path, response.text)
        return response.json()

    def calls_since(self, index: int, **params: Any) -> list[dict]:
        return self.control("GET", "/calls", params={"since": index, **params})["calls"]

    def mark(self) -> int:
        """The index the next recorded call gets."""
        return self.control("GET", "/calls", params={"since": 0, "limit": 1})["total"]

    def issue(self, key: str) -> dict:
        [issue] = self.control("GET", "/state", params={"keys": key})["issues"]
        return issue

    # -- the fakes, called as the product calls them ------------------------------------------

    def jira(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.ready["jira"] + path, timeout=10, auth=(
            self.ready["jira_email"], self.ready["jira_api_token"]), **kwargs)

    def bearer(self, service: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.ready[service] + path, timeout=10, headers={
            "Authorization": f"Bearer {self.ready[f'{service}_token']}"}, **kwargs)

    def lark_token(self) -> str:
        answer = requests.post(
            self.ready["lark"] + "/open-apis/auth/v3/tenant_access_token/internal", timeout=10,
            json={"app_id": self.ready["lark_app_id"],
                  "app_secret": self.ready["lark_app_secret"]}).json()
        return answer["tenant_access_token"]

    def lark(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.ready["lark"] + path, timeout=10, headers={
            "Authorization": f"Bearer {self.lark_token()}"}, **kwargs)

    def send_card(self, issue_key: str, uuid: str, open_id: str = OPEN_ID) -> requests.Response:
        card = {"header": {"title": {"tag": "plain_text",
                                     "content": f"You are the Assignee of {issue_key}"}},
                "elements": [{"tag": "div", "text": {"tag": "lark_md",
                                                     "content": f"**{issue_key}** broken"}}]}
        return self.lark("POST", "/open-apis/im/v1/messages",
                         params={"receive_id_type": "open_id"},
                         json={"receive_id": open_id, "msg_type": "interactive",
                               "content": json.dumps(card), "uuid": uuid})


@pytest.fixture(scope="module")
def fakes(tmp_path_factory) -> Iterator[FakesProcess]:
    started = FakesProcess(tmp_path_factory.mktemp("fakes"), "--world", json.dumps(WORLD))
    try:
        yield started
    finally:
        assert started.stop() == 0


@pytest.fixture(autouse=True)
def no_faults_left(request) -> Iterator[None]:
    yield
    if "fakes" in request.fixturenames:
        request.getfixturevalue("fakes").control("DELETE", "/faults")


def add_issue(fakes: FakesProcess, key: str, **fields: Any) -> None:
    assert fakes.control("POST", "/world/issues", json=[{"key": key, **fields}])["issues"] == 1


# --- the world --------------------------------------------------------------------------------


def test_the_world_is_one_the_product_can_read_from_every_fake(fakes):
    assert {"jira", "lark", "oncall", "core", "control", "jira_email", "jira_api_token",
            "lark_app_id", "lark_app_secret", "oncall_token", "core_token"} <= set(fakes.ready)
    assert fakes.ready["settings"]["LARK_BASE_URL"] == fakes.ready["lark"]
    issue = fakes.jira("GET", "/rest/api/2/issue/PAGE-1").json()["fields"]
    assert (issue["assignee"]["emailAddress"], issue["priority"]["name"],
            issue["status"]["name"], issue["labels"]) == (EMAIL, "P0", "Todo",
                                                          ["notify-assignee"])
    [user] = fakes.jira("GET", "/rest/api/2/user/search", params={"query": EMAIL}).json()
    assert user["accountId"] == ACCOUNT
    core_user = fakes.bearer("core", "GET", f"/api/v1/users/{EMAIL}").json()
    assert (core_user["open_id"], core_user["name"]) == (OPEN_ID, NAME)
    assert fakes.bearer("core", "GET", f"/api/v1/users/{EMAIL}/leader").json()["email"] == LEADER
    assert fakes.bearer("core", "GET", "/api/v1/groups/sre/members").json()["members"] == [
        {"email": EMAIL, "active": True}, {"email": "bob@example.com", "active": False}]
    responders = fakes.bearer("oncall", "GET", "/api/v1/teams/primary/responders").json()
    assert responders["responders"] == [{"email": EMAIL, "name": NAME},
                                        {"email": LEADER, "name": "Lead"}]
    ids = fakes.lark("POST", "/open-apis/contact/v3/users/batch_get_id",
                     params={"user_id_type": "open_id"}, json={"emails": [EMAIL]}).json()
    assert ids["data"]["user_list"] == [{"email": EMAIL, "user_id": OPEN_ID}]
    page = {"email": LEADER, "title": "t", "message": "m", "issue_key": "PAGE-1",
            "dedup_key": "td-0-1-1"}
    assert fakes.bearer("oncall", "POST", "/api/v1/page", json=page).json()["call_error"] \
        == "no_phone_number"  # the leader has no phone


def test_many_issues_at_once_and_a_world_that_makes_no_sense_changes_nothing(fakes):
    keys = [f"MANY-{n}" for n in range(1, 201)]
    added = fakes.control("POST", "/world", json={"issues": [
        {"key": key, "assignee": ACCOUNT, "labels": ["auto"]} for key in keys]})
    assert added == {"users": 0, "issues": 200, "groups": 0, "teams": 0}
    assert [i["key"] for i in fakes.control("GET", "/state")["issues"] if i["key"] in keys] \
        == keys
    assert fakes.issue("MANY-200")["assignee_email"] == EMAIL
    nonsense = [{"key": "BAD-1"}, {"key": "BAD-2", "assignee": "nobody@example.com"}]
    assert "nobody@example.com" in fakes.control("POST", "/world/issues", 400,
                                                 json=nonsense)["error"]
    assert fakes.control("GET", "/state", params={"keys": "BAD-1"})["issues"] == []
    fakes.control("POST", "/world/users", 400, json=[{"email": EMAIL, "phone": "yes"}])
    fakes.control("POST", "/world", 400, json={"people": []})


# --- faults -----------------------------------------------------------------------------------


def test_a_503_with_retry_after_is_answered_and_not_applied(fakes):
    add_issue(fakes, "F503-1")
    fault = fakes.control("POST", "/faults", json={
        "service": "jira", "status": 503, "retry_after": 3, "path_contains": "/assignee"})
    mark = fakes.mark()

    refused = fakes.jira("PUT", "/rest/api/2/issue/F503-1/assignee", json={"accountId": ACCOUNT})
    assert (refused.status_code, refused.headers["Retry-After"]) == (503, "3")
    assert fakes.issue("F503-1")["assignee"] is None
    assert fakes.jira("GET", "/rest/api/2/issue/F503-1").status_code == 200  # other paths pass

    [put, get] = fakes.calls_since(mark)
    assert {k: put[k] for k in ("service", "method", "route", "status", "fault", "applied",
                                "latency_ms", "issue_key", "body")} == {
        "service": "jira", "method": "PUT", "route": "ASSIGN", "status": 503, "fault": 503,
        "applied": False, "latency_ms": 0, "issue_key": "F503-1", "body": {"accountId": ACCOUNT}}
    assert (get["status"], get["fault"], get["applied"]) == (200, None, False)
    assert [f["hits"] for f in fakes.control("GET", "/faults")["faults"]] == [1]

    assert fakes.control("DELETE", "/faults", params={"id": fault["id"]}) == {"cleared": 1}
    assert fakes.jira("PUT", "/rest/api/2/issue/F503-1/assignee",
                      json={"accountId": ACCOUNT}).status_code == 204
    assert fakes.issue("F503-1")["assignee"] == ACCOUNT
    [applied] = fakes.calls_since(mark + 2)
    assert (applied["status"], applied["fault"], applied["applied"]) == (204, None, True)


def test_a_slow_fault_delays_its_requests_and_not_the_fakes_other_ones(fakes):
    fakes.control("POST", "/faults", json={"service": "oncall", "latency_ms": 1000, "times": 1,
                                           "path_contains": "/page"})
    mark = fakes.mark()
    page = {"email": EMAIL, "title": "PAGE-1", "message": "m", "issue_key": "PAGE-1",
            "dedup_key": "td-7-2-1"}
    answers: list[requests.Response] = []
    slow = threading.Thread(target=lambda: answers.append(
        fakes.bearer("oncall", "POST", "/api/v1/page", json=page)), daemon=True)
    slow.start()
    wait_until(lambda: fakes.control("GET", "/calls", params={"since": mark})["in_flight"]
               ["oncall"] == 1, 5, "the page is held by its latency")
    assert fakes.bearer("oncall", "GET", "/api/v1/teams/primary/responders").status_code == 200
    slow.join(timeout=10)
    assert answers[0].json()["accepted"] is True

    [quick, paged] = fakes.calls_since(mark)
    assert (quick["route"], quick["latency_ms"]) == ("RESPONDERS", 0)
    assert {k: paged[k] for k in ("route", "status", "fault", "applied", "latency_ms", "key",
                                  "issue_key")} == {
        "route": "PAGE", "status": 200, "fault": None, "applied": True, "latency_ms": 1000,
        "key": "td-7-2-1", "issue_key": "PAGE-1"}
    assert paged["t_end"] - paged["t"] >= 1.0
    assert quick["t"] > paged["t"] and quick["t_end"] < paged["t_end"]
    assert fakes.control("GET", "/faults")["faults"] == []  # ``times: 1`` is used up
    assert [p["dedup_key"] for p in fakes.control("GET", "/state")["pages"]].count(
        "td-7-2-1") == 1


def test_a_429_for_one_request_then_the_send_goes_through_once(fakes):
    fakes.control("POST", "/faults", json={"service": "lark", "status": 429, "retry_after": 1,
                                           "times": 1, "path_contains": "/im/v1/messages"})
    mark = fakes.mark()
    limited = fakes.send_card("CARD-1", "td-9-1-1")  # its token call passes: another path
    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "1")
    assert limited.json()["code"] != 0
    first = fakes.send_card("CARD-1", "td-9-1-1").json()["data"]["message_id"]
    again = fakes.send_card("CARD-1", "td-9-1-1").json()["data"]["message_id"]
    assert first == again  # Lark deduplicates by uuid

    sends = fakes.calls_since(mark, service="lark")
    assert [(c["route"], c["status"], c["fault"], c["applied"], c["key"]) for c in sends] == [
        ("TOKEN", 200, None, True, None), ("SEND", 429, 429, False, "td-9-1-1"),
        ("TOKEN", 200, None, True, None), ("SEND", 200, None, True, "td-9-1-1"),
        ("TOKEN", 200, None, True, None), ("SEND", 200, None, False, "td-9-1-1")]
    [card] = [m for m in fakes.control("GET", "/state")["messages"] if m["uuid"] == "td-9-1-1"]
    assert (card["message_id"], card["issue_key"], card["read_by"]) == (first, "CARD-1", [])


def test_faults_are_listed_and_cleared_per_service(fakes):
    add_issue(fakes, "CLEAR-1")
    fakes.control("POST", "/faults", json={"service": "core", "status": 500,
                                           "until": time.time() + 60})
    fakes.control("POST", "/faults", json={"service": "jira", "status": 502})
    assert sorted(f["service"] for f in fakes.control("GET", "/faults")["faults"]) == [
        "core", "jira"]
    assert fakes.bearer("core", "GET", f"/api/v1/users/{EMAIL}").status_code == 500
    assert fakes.control("DELETE", "/faults", params={"service": "core"}) == {"cleared": 1}
    assert fakes.bearer("core", "GET", f"/api/v1/users/{EMAIL}").status_code == 200
    assert fakes.jira("GET", "/rest/api/2/issue/CLEAR-1").status_code == 502
    assert fakes.control("DELETE", "/faults") == {"cleared": 1}
    assert fakes.jira("GET", "/rest/api/2/issue/CLEAR-1").status_code == 200
    assert fakes.control("GET", "/faults")["faults"] == []


@pytest.mark.parametrize("body", [
    {"service": "mail", "status": 503},
    {"service": "jira"},
    {"service": "jira", "status": 200},
    {"service": "jira", "status": "503"},
    {"service": "jira", "status": 500, "retry_after": 5},
    {"service": "jira", "status": 503, "retry_after": -1},
    {"service": "jira", "status": 503, "times": 0},
    {"service": "jira", "status": 503, "times": 2, "until": 4_102_444_800},
    {"service": "jira", "status": 503, "until": 1},
    {"service": "jira", "latency_ms": 600_000},
    {"service": "jira", "status": 503, "path_contains": ""},
    {"service": "jira", "status": 503, "colour": "red"},
    ["jira", 503],
])
def test_a_fault_that_makes_no_sense_is_refused(fakes, body):
    assert fakes.control("POST", "/faults", 400, json=body)["error"]
    assert fakes.control("GET", "/faults")["faults"] == []


# --- observation ------------------------------------------------------------------------------


def test_the_call_log_is_read_piece_by_piece(fakes):
    mark = fakes.mark()
    for _ in range(3):
        fakes.bearer("core", "GET", f"/api/v1/users/{EMAIL}")
    fakes.bearer("oncall", "GET", "/api/v1/teams/nobody/responders")
    first = fakes.control("GET", "/calls", params={"since": mark, "limit": 2})
    assert [c["index"] for c in first["calls"]] == [mark, mark + 1]
    rest = fakes.control("GET", "/calls", params={"since": first["next"]})
    assert [c["index"] for c in rest["calls"]] == [mark + 2, mark + 3]
    assert [(c["service"], c["route"], c["status"]) for c in first["calls"] + rest["calls"]] \
        == [("core", "USER", 200)] * 3 + [("oncall", "RESPONDERS", 404)]
    assert all(c["t"] <= c["t_end"] for c in rest["calls"])
    nothing = fakes.control("GET", "/calls", params={"since": rest["next"]})
    assert (nothing["calls"], nothing["next"]) == ([], rest["next"])
    only_core = fakes.calls_since(mark, service="core")
    assert [c["index"] for c in only_core] == [mark, mark + 1, mark + 2]
    fakes.control("GET", "/calls", 400, params={"since": "x"})


# --- ACKs ---------------------------------------------------------------------------------------


def test_a_person_reads_the_card_or_moves_the_issue(fakes):
    add_issue(fakes, "ACK-1", assignee=EMAIL, status="Todo", labels=["notify-assignee"])
    older = fakes.send_card("ACK-1", "td-11-1-1").json()["data"]["message_id"]
    newest = fakes.send_card("ACK-1", "td-12-1-1").json()["data"]["message_id"]

    read = fakes.control("POST", "/ack/card-read", json={"issue_key": "ACK-1", "email": EMAIL})
    assert (read["message_id"], read["open_id"]) == (newest, OPEN_ID)
    readers = fakes.lark("GET", f"/open-apis/im/v1/messages/{newest}/read_users",
                         params={"user_id_type": "open_id", "page_size": 100}).json()
    assert [item["user_id"] for item in readers["data"]["items"]] == [OPEN_ID]
    cards = {m["message_id"]: m for m in fakes.control("GET", "/state")["messages"]}
    assert (cards[older]["read_by"], cards[newest]["read_by"]) == ([], [OPEN_ID])
    by_id = fakes.control("POST", "/ack/card-read", json={"message_id": older, "email": LEADER})
    assert (by_id["message_id"], by_id["open_id"]) == (older, "ou_lead")

    moved = fakes.control("POST", "/ack/status", json={"issue_key": "ACK-1",
                                                       "status": "In Progress"})
    assert moved == {"issue_key": "ACK-1", "status": "In Progress", "previous": "Todo"}
    issue = fakes.jira("GET", "/rest/api/2/issue/ACK-1").json()["fields"]
    assert issue["status"]["name"] == "In Progress"
    assert fakes.issue("ACK-1")["status"] == "In Progress"

    fakes.control("POST", "/ack/card-read", 404, json={"issue_key": "NONE-1", "email": EMAIL})
    fakes.control("POST", "/ack/card-read", 400, json={"email": EMAIL})
    fakes.control("POST", "/ack/card-read", 404, json={"issue_key": "ACK-1",
                                                       "email": "bob@example.com"})
    fakes.control("POST", "/ack/status", 404, json={"issue_key": "NONE-1", "status": "Done"})
    fakes.control("POST", "/ack/status", 400, json={"issue_key": "ACK-1"})


# --- the process ------------------------------------------------------------------------------


def test_a_world_file_a_calls_file_and_a_bounded_stop(tmp_path):
    world, calls = tmp_path / "world.json", tmp_path / "calls.jsonl"
    world.write_text(json.dumps({"issues": [{"key": "FILE-1", "labels": ["x"]}]}))
    started = FakesProcess(tmp_path, "--world", str(world), "--calls-file", str(calls))
    try:
        assert started.jira("GET", "/rest/api/2/issue/FILE-1").json()["fields"]["labels"] \
            == ["x"]
    finally:
        began = time.monotonic()
        assert started.stop() == 0
        assert time.monotonic() - began < EXIT_WAIT
    [line] = calls.read_text().splitlines()
    assert json.loads(line)["route"] == "GET_ISSUE"
