"""Runtime edges of issue 7, through a real ``ticket-dispatcher serve`` process against the fake
Jira of ``tests/peer.py``: a slow peer holds only its own caller, shutdown keeps its one
deadline and releases the port last, 40 slots run at once, and PostgreSQL at the largest
accepted configuration never runs out of pooled connections.

Everything is set up over the product's HTTP API (SPEC §10); the fake Jira is the only peer.
Tests wait for states (the fake's conditions, or polling the API at short intervals), never
for fixed times; the timing assertions are the deadlines the issue sets.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from tests.peer import FakeJira, Release, Route
from ticket_dispatcher.store import Store

BASE = "/api/v1/ticketmanager"
PROJECT = "EDGE"
ENGINEERS = {"alice@example.com": "acc-alice", "bob@example.com": "acc-bob"}
AUTO_ASSIGN_LABEL = "auto-dispatch"  # SPEC §13 default jira.auto_assign_label
POLL_SECONDS = 0.05
TERMINAL = ("succeeded", "failed")


def issue_keys(count: int, first: int = 1) -> list[str]:
    return [f"{PROJECT}-{number}" for number in range(first, first + count)]


def assign_policy() -> dict:
    """An ordinary policy: every EDGE issue goes round-robin to the two engineers."""
    return {
        "name": "Assign EDGE tickets",
        "description": "round robin over the EDGE squad",
        "trigger": {"enable": True, "source_in": [], "project_key_in": [PROJECT],
                    "issue_label_all": []},
        "rules": [{
            "name": "everything",
            "priority": 10,
            "when": {"always": True},
            "then": [{"type": "assign", "assign": {
                "receiver": {"type": "users", "users": list(ENGINEERS)},
                "strategy": "round_robin"}}],
            "transition": {"on_success": "terminate"},
        }],
    }


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` every ``POLL_SECONDS`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(POLL_SECONDS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_bound(port: int) -> bool:
    """Whether some socket still listens on ``port``. SO_REUSEADDR, as any server sets it, so
    only a listening socket (not a connection in TIME_WAIT) makes the bind fail."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
        return False


# --- the process under test ---------------------------------------------------------------------


class Dispatcher:
    """One ``ticket-dispatcher serve`` process, its JSON log, and its HTTP API."""

    def __init__(self, database_url: str, jira: FakeJira, settings: dict[str, str]):
        self.port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKET_DISPATCHER_")}
        environ.update({
            "TICKET_DISPATCHER_DATABASE_URL": database_url,
            "TICKET_DISPATCHER_JIRA_BASE_URL": jira.base_url,
            "TICKET_DISPATCHER_JIRA_EMAIL": jira.email,
            "TICKET_DISPATCHER_JIRA_API_TOKEN": jira.api_token,
            "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "0",
            **{f"TICKET_DISPATCHER_{name}": value for name, value in settings.items()},
        })
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ticket_dispatcher", "serve", "--insecure-no-auth",
             "--port", str(self.port)],
            env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._serving = threading.Event()
        self._log_closed = threading.Event()
        threading.Thread(target=self._read_log, name="dispatcher-log", daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _read_log(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line)
            if "serving on" in line:
                self._serving.set()
        self._log_closed.set()

    # -- life cycle ---------------------------------------------------------------------------

    def started(self, timeout: float = 20) -> bool:
        """True once the server says it serves; False when it exited first (a refusal)."""
        wait_until(lambda: self._serving.is_set() or self._log_closed.is_set(), timeout,
                   "the server serves or exits")
        return self._serving.is_set()

    def wait_serving(self, timeout: float = 20) -> Dispatcher:
        assert self.started(timeout), f"the server exited before serving:\n{self.log()}"
        return self

    def wait_exit(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._log_closed.wait(timeout=5)
        return code

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Whatever happened: SIGTERM, then SIGKILL after a bound."""
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        return "".join(self.lines)

    def log_problems(self) -> list[str]:
        """Lines that are not one JSON object, or are at level ERROR/CRITICAL, or carry a
        traceback (SPEC §12: one JSON object per line; an orderly run logs no ERROR)."""
        problems = []
        for line in self.lines:
            try:
                entry = json.loads(line)
            except ValueError:
                problems.append(line)
                continue
            if not isinstance(entry, dict) or entry.get("level") in ("ERROR", "CRITICAL") \
                    or "Traceback" in line:
                problems.append(line)
        return problems

    # -- the API ------------------------------------------------------------------------------

    def call(self, method: str, path: str, expected: tuple[int, ...] = (200,),
             **kwargs: Any) -> Any:
        # No shared session: tests call from several threads at once.
        response = requests.request(method, self.url + BASE + path, timeout=15, **kwargs)
        assert response.status_code in expected, (method, path, response.status_code,
                                                   response.text)
        return response.json() if response.content else None

    def configure_dispatch(self) -> int:
        """Engineers with their Jira accounts, and the assign policy, active."""
        for email, account_id in ENGINEERS.items():
            self.call("PUT", f"/engineers/{email}", (200, 201),
                      json={"dispatch_enabled": True, "jira_account_id": account_id})
        policy = self.call("POST", "/dispatch/policies", (201,), json=assign_policy())
        self.call("POST", f"/dispatch/policies/{policy['id']}/activate")
        return policy["id"]

    def post_trigger(self, issue_key: str) -> dict:
        return self.call("POST", "/dispatch/triggers", (202,),
                         json={"source": "jira_automation", "input": {"issue_key": issue_key}})

    def executions(self, **filters: Any) -> tuple[list[dict], int]:
        page = self.call("GET", "/dispatch/executions", params={"limit": 200, **filters})
        return page["items"], page["total"]

    def execution_of(self, issue_key: str) -> dict | None:
        items, _ = self.executions(issue_key=issue_key)
        return items[0] if len(items) == 1 else None

    def wait_status(self, issue_key: str, status: str, timeout: float = 15) -> dict:
        def reached() -> dict | None:
            execution = self.execution_of(issue_key)
            return execution if execution and execution["status"] == status else None

        try:
            return wait_until(reached, timeout, f"the execution of {issue_key} is {status}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it is {json.dumps(self.execution_of(issue_key))}\n"
                                 f"server log:\n{self.log()}") from None

    def succeeded(self) -> int:
        return self.executions(status="succeeded")[1]


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        for email, account_id in ENGINEERS.items():
            fake.add_user(email, account_id)
        yield fake


@pytest.fixture
def processes(jira) -> Iterator[Callable[..., Dispatcher]]:
    """``processes(url, EXECUTION_SLOTS="40")`` starts a process; every process started here
    is stopped, then killed after a bound, whatever the test did."""
    started: list[Dispatcher] = []

    def start(database_url: str, **settings: str) -> Dispatcher:
        dispatcher = Dispatcher(database_url, jira, settings)
        started.append(dispatcher)
        return dispatcher

    yield start
    for dispatcher in started:
        dispatcher.kill()


@pytest.fixture
def dispatchers(db_url, processes) -> Callable[..., Dispatcher]:
    """``dispatchers(EXECUTION_SLOTS="40")``: a process on the test's database, once per
    engine (``db_url``)."""
    return lambda **settings: processes(db_url, **settings)


def stored_status(database_url: str, execution_id: int) -> str:
    """The execution's status as the database has it, read without any server running."""
    store = Store.open(database_url)
    try:
        return store.executions.get(execution_id).status.value
    finally:
        store.close()


def assigned_account(execution: dict) -> str:
    """The Jira account of the engineer the execution's one assign action chose."""
    [rule] = [r for r in execution["rule_executions"] if r["outcome"] == "matched"]
    [action] = rule["action_executions"]
    return ENGINEERS[action["context"]["assign"]["assignee"]]


def assignments(jira: FakeJira, key: str) -> tuple[int, int]:
    """(PUT assignee calls for ``key``, those the fake applied)."""
    calls = jira.calls(Route.ASSIGN, key)
    return len(calls), sum(call.applied for call in calls)


# --- a slow peer holds only its own caller --------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_stuck_jira_call_holds_only_its_own_execution(dispatchers, jira):
    stuck, *others = issue_keys(12)
    for key in (stuck, *others):
        jira.add_issue(key, labels=[AUTO_ASSIGN_LABEL])
    gate = jira.hold(Route.ASSIGN, stuck)
    dispatcher = dispatchers(EXECUTION_SLOTS="10").wait_serving()
    dispatcher.configure_dispatch()

    dispatcher.post_trigger(stuck)
    assert gate.wait_until_held(1, timeout=15), "the stuck issue's PUT never reached Jira"
    for key in others:
        dispatcher.post_trigger(key)

    # Were any of them queued behind the held call, they could not finish before the release.
    wait_until(lambda: dispatcher.succeeded() == len(others), 15,
               "the 11 other executions succeed while one Jira call is held")
    assert gate.held == 1
    assert dispatcher.execution_of(stuck)["status"] == "executing"
    for key in others:
        assert jira.assignee(key) == assigned_account(dispatcher.execution_of(key))

    gate.release()
    dispatcher.wait_status(stuck, "succeeded")
    assert assignments(jira, stuck) == (1, 1)
    assert dispatcher.log_problems() == []


# --- shutdown: one deadline, resumed after a restart, no duplicate assignment ---------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("held_call", [Release.APPLY, Release.REFUSE],
                         ids=["held_put_lands_after_exit", "held_put_is_refused_after_exit"])
def test_sigterm_with_a_call_stuck_in_its_read_timeout_exits_in_time_and_resumes_once(
        dispatchers, jira, db_url, held_call):
    [key] = issue_keys(1)
    jira.add_issue(key, labels=[AUTO_ASSIGN_LABEL])
    gate = jira.hold(Route.ASSIGN, key)
    settings = {"INTEGRATIONS_READ_TIMEOUT": "20s", "SHUTDOWN_TIMEOUT": "3s"}
    first = dispatchers(**settings).wait_serving()
    first.configure_dispatch()
    first.post_trigger(key)
    assert gate.wait_until_held(1, timeout=15), "the PUT assignee never reached Jira"
    execution = first.execution_of(key)

    started = time.monotonic()
    first.terminate()
    code = first.wait_exit(timeout=3 + 2)
    elapsed = time.monotonic() - started

    assert code == 0, first.log()
    assert elapsed < 3 + 2
    assert first.log_problems() == []
    assert stored_status(db_url, execution["id"]) == "executing"

    # The peer finishes the abandoned call only now, after the process is gone.
    gate.release(held_call)
    assert jira.wait_until(lambda j: all(c.completed for c in j.calls(Route.ASSIGN, key)))
    second = dispatchers(**settings).wait_serving()
    resumed = second.wait_status(key, "succeeded")

    calls, applied = assignments(jira, key)
    assert applied == 1
    # Landed: the resumed action sees the issue assigned and does not PUT again (SPEC §7).
    # Refused: it PUTs once more, and that one lands.
    assert calls == (1 if held_call is Release.APPLY else 2)
    assert jira.assignee(key) == assigned_account(resumed)
    assert resumed["id"] == execution["id"]
    assert second.log_problems() == []


@pytest.mark.timeout(60)
def test_the_port_is_released_only_when_the_process_is_going(dispatchers, jira):
    [key] = issue_keys(1)
    jira.add_issue(key)
    gate = jira.hold(Route.ASSIGN, key)
    dispatcher = dispatchers(INTEGRATIONS_READ_TIMEOUT="20s", SHUTDOWN_TIMEOUT="3s")
    dispatcher.wait_serving().configure_dispatch()
    dispatcher.post_trigger(key)
    assert gate.wait_until_held(1, timeout=15)

    dispatcher.terminate()
    wait_until(lambda: "shutting down" in dispatcher.log(), 5, "the server logs its shutdown")
    still_bound = port_is_bound(dispatcher.port)
    still_running = dispatcher.process.poll() is None

    assert still_running, "the process exited at once; nothing was observed while stopping"
    assert still_bound, "the port was free while the process was still shutting down"
    assert dispatcher.wait_exit(timeout=3 + 2) == 0
    assert not port_is_bound(dispatcher.port)


# --- 40 slots really run at once ------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_forty_slots_run_forty_jira_calls_at_once(dispatchers, jira):
    keys = issue_keys(40)
    for key in keys:
        jira.add_issue(key)
    barrier = jira.barrier(Route.ASSIGN, parties=40, timeout=20)
    gate = jira.hold(Route.ASSIGN)  # keeps the 40 in flight while the admin view is read
    dispatcher = dispatchers(EXECUTION_SLOTS="40").wait_serving()
    dispatcher.configure_dispatch()

    with ThreadPoolExecutor(max_workers=8) as posting:
        list(posting.map(dispatcher.post_trigger, keys))
    tripped = barrier.wait_tripped(timeout=25)
    held = gate.wait_until_held(40, timeout=5)
    actors = dispatcher.call("GET", "/admin/actors")
    gate.release()

    assert tripped, f"at most {jira.concurrency(Route.ASSIGN).maximum} PUTs were in flight"
    assert held
    assert jira.concurrency(Route.ASSIGN).maximum == 40
    assert actors["pool"]["slots"] == 40
    assert actors["pool"]["busy"] == 40, actors["pool"]
    assert len(actors["executions"]) == 40
    assert actors["clients"]["jira"]["busy"] == 40, actors["clients"]["jira"]
    assert actors["clients"]["jira"]["queue_length"] == 0
    wait_until(lambda: dispatcher.succeeded() == 40, 20, "all 40 executions succeed")
    assert all(applied == 1 for _, applied in (assignments(jira, key) for key in keys))
    assert dispatcher.log_problems() == []


# --- PostgreSQL at the largest accepted configuration ---------------------------------------------

SLOTS_BOUND = 100  # config.py: execution_slots 1..100


def largest_accepted_slots(start: Callable[..., Dispatcher]) -> tuple[int, Dispatcher]:
    """The largest ``execution_slots`` the server starts with (the other keys at defaults),
    and that server. A refusal must say clearly why; its figures give the next guess."""
    slots = SLOTS_BOUND
    while True:
        dispatcher = start(EXECUTION_SLOTS=str(slots))
        if dispatcher.started():
            return slots, dispatcher
        assert dispatcher.wait_exit(timeout=5) != 0
        refusal = dispatcher.log()
        assert "Traceback" not in refusal
        assert "execution_slots" in refusal and "max_connections" in refusal, refusal
        needed, allowed = (int(n) for n in re.search(
            r"needs up to (\d+) connections.*allows (\d+)", refusal).groups())
        assert needed > allowed and slots - (needed - allowed) >= 1, refusal
        slots -= needed - allowed


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_postgres_at_the_largest_accepted_configuration_never_runs_out_of_connections(
        postgres_url, jira, processes):
    slots, dispatcher = largest_accepted_slots(
        lambda **settings: processes(postgres_url, **settings))
    if slots < SLOTS_BOUND:  # one more slot is refused, clearly
        refused = processes(postgres_url, EXECUTION_SLOTS=str(slots + 1))
        assert not refused.started()
        assert refused.wait_exit(timeout=5) != 0
        assert "max_connections" in refused.log()
    keys = issue_keys(200)
    for key in keys:
        jira.add_issue(key)
    dispatcher.configure_dispatch()

    statuses: list[int] = []
    done = threading.Event()

    def read_while_posting() -> None:
        while not done.is_set():
            for path in (f"{BASE}/dispatch/executions?limit=50", f"{BASE}/admin/actors",
                         f"{BASE}/engineers", "/readyz"):
                statuses.append(requests.get(dispatcher.url + path, timeout=15).status_code)

    def post(key: str) -> int:
        return requests.post(dispatcher.url + BASE + "/dispatch/triggers", timeout=15, json={
            "source": "jira_automation", "input": {"issue_key": key}}).status_code

    with ThreadPoolExecutor(max_workers=4) as readers:
        reading = [readers.submit(read_while_posting) for _ in range(4)]
        with ThreadPoolExecutor(max_workers=16) as posting:
            posted = list(posting.map(post, keys))
        terminal = wait_until(
            lambda: sum(dispatcher.executions(status=s)[1] for s in TERMINAL) == len(keys),
            60, "every execution of the burst is terminal")
        done.set()
        for future in reading:
            future.result()

    assert posted == [202] * len(keys)
    assert statuses and all(200 <= status < 300 for status in statuses), sorted(set(statuses))
    assert terminal and dispatcher.succeeded() == len(keys)
    assert dispatcher.executions()[1] == len(keys)
    assert "MaxConnectionsExceeded" not in dispatcher.log()
    assert dispatcher.log_problems() == []
