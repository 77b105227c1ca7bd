"""The database goes away for a while under a real ``ticket-dispatcher serve`` process, and comes
back; the process stays up, loses nothing acknowledged and repeats no side effect
(docs/operations.md, "Database outages and leases").

This is the operator's fault test, on each engine. A real process (tests/process.py) runs
``assign`` dispatches against the independent fake Jira of tests/peer.py (answering each PUT
assignee slowly) and one assignment notification parked in its ACK wait against the fakes of
Lark, Oncall and Core (tests/peer_notify.py). Then the database goes away:

- PostgreSQL: the process reaches the server through a TCP relay (tests/relay.py) that is cut:
  every connection is closed and every new one refused, until it is restored;
- SQLite: a second process takes the file's write lock (``BEGIN EXCLUSIVE``) and holds it until
  told to let go; reads go on (WAL), every write waits ``busy_timeout`` and fails.

Ten assign executions are in flight when it starts: their PUTs are held at the fake until the
database is away, then land, so each execution has made its Jira write and cannot save its
result. While the outage lasts the test keeps posting triggers and reading the API, /readyz,
/healthz and /metrics, as a client and a probe would. Once it is over the card is read (the
ACK), and everything must end: every trigger answered 202 completed, every execution
succeeded, one PUT per issue, one card, one page, each comment once, by the same process that
never restarted and logged the outage once, without an ERROR.

Tests wait for states by polling (``wait_until``) or on the fakes' conditions. The outage's
length is the time the test keeps its load going (``OUTAGE_SECONDS``); the fake Jira's slowness
is a fault of the peer, made inside the fake.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from tests.peer import FakeJira, Route, SlowJira
from tests.peer_notify import LarkRoute, OncallRoute
from tests.process import (
    BASE,
    Dispatcher,
    Processes,
    assignee_notification_policy,
    notification_settings,
    wait_until,
)
from tests.relay import Relay, relayed_url, target_of

OUTAGE_SECONDS = 8.0  # longer than leases.duration: every lease expires while it lasts
PUT_LATENCY = 0.7  # the fake Jira's answer time for each PUT assignee
IN_FLIGHT = 10  # assign executions whose PUT lands while the database is away
PACE = 0.2  # the client's pause between two rounds of requests during the outage
RECOVERY_SECONDS = 60  # from the restore to every execution being terminal
SETTINGS = {
    "DATABASE_BUSY_TIMEOUT": "1s",
    "DATABASE_CONNECT_TIMEOUT": "1s",
    "DATABASE_STATEMENT_TIMEOUT": "2s",
    "DATABASE_POOL_WAIT": "1s",
    "LEASES_HEARTBEAT": "1s",
    "LEASES_DURATION": "5s",
    "EXECUTION_SLOTS": "10",
}

ASSIGN_PROJECT = "OUT"
ENGINEERS = {"alice@example.com": "acc-alice", "bob@example.com": "acc-bob"}
SPARE_ENGINEER = "dave@example.com"  # written while the database is away; assigned nothing
PAGE_PROJECT, PAGE_KEY = "PAGE", "PAGE-1"
NOTIFY_SOURCE, NOTIFY_LABEL = "jira_assignment_assignee", "notify-assignee"
EMAIL, ACCOUNT, OPEN_ID, NAME = "carol@example.com", "acc-carol", "ou_carol", "Carol Example"
PENDING = "Todo"  # the ACK wait goes on while the issue is in this status
ACK_TIMEOUT, POLL = "60s", "1s"


def assign_policy() -> dict:
    """Every OUT issue goes round-robin to the two engineers."""
    return {
        "name": "Assign OUT tickets",
        "description": "round robin over the OUT squad",
        "trigger": {"enable": True, "source_in": [], "project_key_in": [ASSIGN_PROJECT],
                    "issue_label_all": []},
        "rules": [{
            "name": "everything", "priority": 10, "when": {"always": True},
            "then": [{"type": "assign", "assign": {
                "receiver": {"type": "users", "users": list(ENGINEERS)},
                "strategy": "round_robin"}}],
            "transition": {"on_success": "terminate"},
        }],
    }


def notification_policy() -> dict:
    """Card, App-urgent, then up to two pages, each waiting ``ACK_TIMEOUT`` for an ACK."""
    return assignee_notification_policy(
        "Assignment Notification - PAGE Assignee", PAGE_PROJECT, urgent=["P0"], attempts=2,
        ack_timeout=ACK_TIMEOUT, poll_interval=POLL, pending=PENDING)


# --- the faults ---------------------------------------------------------------------------------


class Outage:
    """The database going away: ``begin`` returns once it is away, ``end`` once it is back."""

    database_url: str

    def begin(self) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Whatever the test did: no fault outlives it."""


class RelayCut(Outage):
    """PostgreSQL behind a relay that is cut (every connection closed, new ones refused)."""

    def __init__(self, relay: Relay, database_url: str):
        self.relay = relay
        self.database_url = relayed_url(database_url, relay)

    def begin(self) -> None:
        self.relay.cut()

    def end(self) -> None:
        self.relay.restore()

    def close(self) -> None:
        self.relay.close()


# Run by a second Python process: takes the write lock, says so, holds it until a line (or the
# end of its input: the test is gone) arrives, lets go, says so.
LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
db.close()
print("released", flush=True)
"""


class SqliteLock(Outage):
    """Another process holding the SQLite file's write lock."""

    def __init__(self, database_url: str):
        self.database_url = database_url
        self.path = database_url.removeprefix("sqlite:///")
        self.holder: subprocess.Popen | None = None
        self.said: list[str] = []

    def begin(self) -> None:
        self.holder = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, self.path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, name="lock-holder", daemon=True).start()
        wait_until(lambda: "locked" in self.said or self.holder.poll() is not None, 15,
                   "the second process holds the write lock")
        assert "locked" in self.said, f"the lock holder failed: {self.said}"

    def end(self) -> None:
        self.holder.stdin.write("release\n")
        self.holder.stdin.flush()
        wait_until(lambda: "released" in self.said, 10, "the second process lets go")
        assert self.holder.wait(timeout=10) == 0, self.said

    def close(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=10)

    def _read(self) -> None:
        for line in self.holder.stdout:
            self.said.append(line.strip())


# --- what the test saw over HTTP ----------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One HTTP answer; ``during``: asked after the outage began and answered before it ended."""

    method: str
    path: str
    status: int
    headers: dict[str, str]
    body: Any
    during: bool
    key: str | None = None  # the issue key of a posted trigger


@dataclass
class Client:
    """Calls the process the way a client and a probe would, and keeps every answer."""

    dispatcher: Dispatcher
    answers: list[Answer] = field(default_factory=list)
    outage: tuple[float, float] = (float("inf"), float("inf"))  # (began, ended) monotonic

    def request(self, method: str, path: str, key: str | None = None, **kwargs: Any) -> Answer:
        asked = time.monotonic()
        response = requests.request(method, self.dispatcher.url + path, timeout=15, **kwargs)
        answered = time.monotonic()
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = response.text
        began, ended = self.outage
        answer = Answer(method, path, response.status_code, dict(response.headers), body,
                        during=began <= asked and answered < ended, key=key)
        self.answers.append(answer)
        return answer

    def post_trigger(self, key: str, source: str = "jira_automation") -> Answer:
        return self.request("POST", f"{BASE}/dispatch/triggers", key=key,
                            json={"source": source, "input": {"issue_key": key}})

    def probe(self) -> None:
        """One round of what an operator and Kubernetes ask: a read, a write, the probes."""
        self.request("GET", f"{BASE}/dispatch/executions", params={"limit": 5})
        self.request("PUT", f"{BASE}/engineers/{SPARE_ENGINEER}",
                     json={"dispatch_enabled": False})
        self.request("GET", "/readyz")
        self.request("GET", "/healthz")
        self.request("GET", "/metrics")

    def of(self, path: str, *, during: bool | None = None) -> list[Answer]:
        return [a for a in self.answers
                if a.path == path and (during is None or a.during == during)]

    def triggers(self, status: int) -> list[Answer]:
        return [a for a in self.of(f"{BASE}/dispatch/triggers") if a.status == status]


def database_up(metrics: Answer) -> float:
    """``ticket_manager_dispatch_database_up`` in a /metrics exposition."""
    [value] = [line.split()[-1] for line in metrics.body.splitlines()
               if line.startswith("ticket_manager_dispatch_database_up ")]
    return float(value)


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def jira() -> Iterator[SlowJira]:
    with SlowJira(PUT_LATENCY, {Route.ASSIGN}) as fake:
        for email, account_id in ENGINEERS.items():
            fake.add_user(email, account_id)
        fake.add_user(EMAIL, ACCOUNT, NAME)
        fake.add_issue(PAGE_KEY, labels=[NOTIFY_LABEL], assignee=ACCOUNT, priority="P0",
                       status=PENDING)
        yield fake


@pytest.fixture
def person() -> tuple[str, str, str]:
    """Who the notification peers know (the ``lark``, ``oncall`` and ``core`` fixtures of
    tests/conftest.py)."""
    return EMAIL, NAME, OPEN_ID


@pytest.fixture
def outage(db_url) -> Iterator[Outage]:
    """The engine's fault: a cut relay for PostgreSQL, a second writer for SQLite."""
    fault = (SqliteLock(db_url) if db_url.startswith("sqlite:")
             else RelayCut(Relay(*target_of(db_url)), db_url))
    yield fault
    fault.close()


@pytest.fixture
def dispatcher(outage, jira, lark, oncall, core) -> Iterator[Dispatcher]:
    """One serve process on the (faultable) database, notifications on, every peer a fake."""
    started = Processes()
    try:
        yield started.start(outage.database_url, jira, **SETTINGS,
                            **notification_settings(lark, oncall, core)).wait_serving()
    finally:
        started.stop_all()


# --- the set-up and the reading -----------------------------------------------------------------


def configure(dispatcher: Dispatcher) -> None:
    """Engineers with their Jira accounts, the assign policy and the notification, active."""
    for email, account_id in ENGINEERS.items():
        dispatcher.call("PUT", f"/engineers/{email}", (200, 201),
                        json={"dispatch_enabled": True, "jira_account_id": account_id})
    for policy in (assign_policy(), notification_policy()):
        dispatcher.activate(policy)


def page_of(execution: dict, attempt: int) -> dict:
    [action] = [a for rule in execution["rule_executions"] for a in rule["action_executions"]
                if a["type"] == "page_assignment"
                and a["action"]["page_assignment"]["attempt"] == attempt]
    return action


def parked_in_ack_wait(dispatcher: Dispatcher) -> dict | None:
    """The notification's execution once it is parked in attempt 1's ACK wait."""
    execution = dispatcher.execution_of(PAGE_KEY)
    if execution is None:
        return None
    parked = dispatcher.call("GET", "/admin/actors")["parked_executions"]
    view = next((v for v in parked if v["execution_id"] == execution["id"]), None)
    return execution if view and view["attempt"] == 1 and view["deadline"] else None


def lease_owner(dispatcher: Dispatcher) -> str:
    """The process identity its leases carry (host:PID:random)."""
    return dispatcher.call("GET", "/admin/actors")["leases"]["owner"]


def all_terminal(dispatcher: Dispatcher, expected: int) -> bool:
    items, total = dispatcher.executions()
    return total == expected and all(e["status"] in ("succeeded", "failed") for e in items)


def log_entries(dispatcher: Dispatcher, message: str) -> list[dict]:
    entries = []
    for line in dispatcher.lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("msg") == message:
            entries.append(entry)
    return entries


def internal_comments(jira: FakeJira, text: str) -> list[str]:
    return [c.body for c in jira.comments(PAGE_KEY) if text in c.body and not c.public]


# --- the test -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_database_goes_away_and_comes_back_under_load_nothing_lost_nothing_repeated(
        dispatcher, outage, jira, lark, oncall):
    client = Client(dispatcher)
    configure(dispatcher)
    owner = lease_owner(dispatcher)
    assert owner.split(":")[1] == str(dispatcher.process.pid)

    # One notification parked in its ACK wait: card, App-urgent and page 1 are made.
    assert client.post_trigger(PAGE_KEY, source=NOTIFY_SOURCE).status == 202
    parked = wait_until(lambda: parked_in_ack_wait(dispatcher), 15,
                        "page 1 is placed and the notification parks in its ACK wait")
    deadline = page_of(parked, 1)["context"]["page"]["deadline"]
    assert len(oncall.pages()) == 1

    # Ten assign executions, each with its PUT assignee in flight at the fake.
    gate = jira.hold(Route.ASSIGN)
    in_flight = [f"{ASSIGN_PROJECT}-{n}" for n in range(1, IN_FLIGHT + 1)]
    for key in in_flight:
        jira.add_issue(key)
        assert client.post_trigger(key).status == 202
    assert gate.wait_until_held(IN_FLIGHT, timeout=15), "the PUTs never all reached Jira"
    client.probe()

    # The database goes away; the PUTs land while it is away, their results cannot be saved.
    outage.begin()
    began = time.monotonic()
    client.outage = (began, float("inf"))
    gate.release()
    numbers = iter(range(IN_FLIGHT + 1, 10_000))
    pace = threading.Event()  # never set: its wait is the client's pace
    while time.monotonic() - began < OUTAGE_SECONDS:
        key = f"{ASSIGN_PROJECT}-{next(numbers)}"
        jira.add_issue(key)
        client.post_trigger(key)
        client.probe()
        pace.wait(PACE)
    landed = [c.key for c in jira.calls(Route.ASSIGN) if c.applied and c.key in in_flight]
    client.outage = (began, time.monotonic())
    outage.end()
    restored = time.monotonic()

    # Back: ready again, and the ACK comes (the card is read).
    wait_until(lambda: client.request("GET", "/readyz").status == 200, 15,
               "/readyz answers 200 again")
    [card] = lark.messages()
    lark.mark_read(card.message_id, OPEN_ID)
    # A client retries what was refused while the database was away: nothing of it was stored,
    # so each is accepted now and runs once.
    refused = [a.key for a in client.triggers(503) if a.during]
    for key in refused:
        assert client.post_trigger(key).status == 202, client.answers[-1]
    accepted = client.triggers(202)
    wait_until(lambda: all_terminal(dispatcher, len(accepted)),
               RECOVERY_SECONDS - (time.monotonic() - restored),
               "every accepted trigger's execution is terminal")
    client.probe()

    # -- the HTTP answers -----------------------------------------------------------------------
    assert [a for a in client.answers if a.status >= 500 and a.status != 503] == []
    for answer in (a for a in client.answers if a.status == 503 and a.path != "/readyz"):
        assert answer.headers.get("Retry-After", "").isdigit(), answer
        assert isinstance(answer.body, dict) and answer.body.get("code") == "unavailable", answer
    ready = client.of("/readyz", during=True)
    assert ready, "/readyz was never asked while the database was away"
    assert all(a.status == 503 and a.body["status"] == "not_ready"
               and a.body["checks"] == {"database": False, "recovery": True, "running": True}
               for a in ready), ready
    assert client.of("/readyz")[-1].status == 200
    assert client.of("/healthz", during=True)
    assert {a.status for a in client.of("/healthz")} == {200}
    assert client.of(f"{BASE}/dispatch/executions", during=True)
    assert all(a.status in (200, 503) for a in client.of(f"{BASE}/dispatch/executions"))
    written = client.of(f"{BASE}/engineers/{SPARE_ENGINEER}")
    assert {a.status for a in written if a.during} == {503}
    assert {a.status for a in written if not a.during} <= {200, 201, 503}
    assert written[-1].status == 200
    assert any(database_up(a) == 0 for a in client.of("/metrics", during=True))
    assert database_up(client.of("/metrics")[-1]) == 1
    posted = client.of(f"{BASE}/dispatch/triggers")
    assert {a.status for a in posted if a.during} == {503}
    assert {a.status for a in posted} == {202, 503}

    # -- the work: every accepted trigger completed, every execution succeeded, once -----------
    for answer in accepted:
        trigger = dispatcher.call("GET", f"/dispatch/triggers/{answer.body['id']}")
        assert trigger["status"] == "completed", trigger
    executions, total = dispatcher.executions()
    assert total == len(accepted)
    assert [e for e in executions if e["status"] != "succeeded"] == []
    keys = [e["issue_key"] for e in executions]
    assert sorted(keys) == sorted(a.key for a in accepted)  # one execution per accepted key

    # -- the peers: no side effect made twice ---------------------------------------------------
    assert sorted(landed) == sorted(in_flight), "the held PUTs did not land during the outage"
    for key in (k for k in keys if k != PAGE_KEY):
        puts = jira.calls(Route.ASSIGN, key)
        assert (len(puts), sum(c.applied for c in puts)) == (1, 1), (key, puts)
        assert jira.assignee(key) in ENGINEERS.values()
    assert len(lark.messages()) == 1 and len(lark.calls(LarkRoute.SEND)) == 1
    assert len(lark.calls(LarkRoute.URGENT_APP)) == 1
    assert len(oncall.calls(OncallRoute.PAGE)) == 1, oncall.pages()
    assert len(internal_comments(jira, "Urgent: no")) == 1
    assert len(internal_comments(jira, "Urgent: yes\nAttempt: 1")) == 1
    assert len(internal_comments(jira, "acknowledged")) == 1
    assert len(jira.comments(PAGE_KEY)) == 3
    done = dispatcher.execution_of(PAGE_KEY)
    page = page_of(done, 1)["context"]["page"]
    assert (page["outcome"], page["reason"], page["deadline"]) == ("ack", "read", deadline)
    assert page_of(done, 2)["status"] == "skipped"

    # -- the process: the same one throughout, idle again, the outage logged once, no error --
    assert dispatcher.process.poll() is None
    assert lease_owner(dispatcher) == owner
    assert dispatcher.log().count("serving on") == 1
    pool = dispatcher.call("GET", "/admin/actors")["pool"]
    assert (pool["busy"], pool["queue_length"], pool["parked"],
            pool["database_waits"]) == (0, 0, 0, 0)
    [gone] = log_entries(dispatcher, "database unavailable")
    [back] = log_entries(dispatcher, "database available again")
    assert (gone["level"], back["level"]) == ("WARNING", "INFO")
    assert gone["ts"] < back["ts"]
    assert OUTAGE_SECONDS - 3 <= back["outage_seconds"] <= OUTAGE_SECONDS + 15, back
    assert log_entries(dispatcher, "database still unavailable") == []
    assert dispatcher.log_problems() == []
