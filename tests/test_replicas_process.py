"""Several ``ticket-dispatcher serve`` replicas on one PostgreSQL database act as one service
(docs/operations.md, "High availability (several replicas)").

Real processes (tests/process.py) in shared mode, one database schema, the independent fakes of
Jira (tests/peer.py) and of Lark, Oncall and Core (tests/peer_notify.py). Clients post to every
replica. The faults are real: ``kill -9`` of a replica in the middle of its work, SIGSTOP of
another for longer than its lease and SIGCONT, SIGTERM of each in turn in a rolling restart.
What must hold is read from the store over the API and from the fakes' own records: every
trigger completed once, every execution ended, no two live executions of one issue and policy
overlapping in time, no side effect made twice, parked waits finished with their deadlines.

Tests wait for states by polling (``wait_until``); the time a replica stays paused is the time
it takes the others to see its heartbeat stop, read from their admin view.
"""

from __future__ import annotations

import itertools
import signal
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

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
    round_robin_policy,
    wait_until,
)

pytestmark = pytest.mark.postgres

LEASE_SECONDS = 4
SETTINGS = {
    "CLUSTER_MODE": "shared",
    "CLUSTER_DRAIN": "1s",
    "SHUTDOWN_TIMEOUT": "8s",
    "LEASES_HEARTBEAT": "1s",
    "LEASES_DURATION": f"{LEASE_SECONDS}s",
    # A paused replica's open transaction is ended by the server after this: its row locks
    # do not outlast its lease.
    "DATABASE_STATEMENT_TIMEOUT": "2s",
    "TRIGGER_POLL_INTERVAL": "1s",
    "TRIGGER_DEFER_INTERVAL": "1s",
    # Three (in a rolling restart, four) processes share the server's 100 connections.
    "HTTP_THREADS": "4",
    "TRIGGER_ACTORS": "2",
    "EXECUTION_SLOTS": "6",
    "LOG_LEVEL": "INFO",
}
PUT_LATENCY = 0.3  # the fake Jira's answer time for each PUT assignee: work stays in flight

PROJECT = "HA"
ENGINEERS = {f"eng{n}@example.com": f"acc-eng{n}" for n in range(1, 4)}
PAGE_PROJECT = "PAGE"
NOTIFY_SOURCE, NOTIFY_LABEL = "jira_assignment_assignee", "notify-assignee"
EMAIL, ACCOUNT, OPEN_ID, NAME = "carol@example.com", "acc-carol", "ou_carol", "Carol Example"
PENDING = "Todo"
ACK_TIMEOUT, POLL = "6s", "1s"
TERMINAL = ("succeeded", "failed")


def assign_policy() -> dict:
    return round_robin_policy("Assign HA tickets", "round robin over three engineers", PROJECT,
                              ENGINEERS)


def configure(dispatcher: Dispatcher) -> None:
    for email, account_id in ENGINEERS.items():
        dispatcher.call("PUT", f"/engineers/{email}", (200, 201),
                        json={"dispatch_enabled": True, "jira_account_id": account_id})
    notification = assignee_notification_policy(
        "Assignment Notification - PAGE Assignee", PAGE_PROJECT, urgent=["P0"], attempts=2,
        ack_timeout=ACK_TIMEOUT, poll_interval=POLL, pending=PENDING)
    for policy in (assign_policy(), notification):
        dispatcher.activate(policy)


@pytest.fixture
def jira() -> Iterator[SlowJira]:
    with SlowJira(PUT_LATENCY, {Route.ASSIGN}) as fake:
        for email, account_id in ENGINEERS.items():
            fake.add_user(email, account_id)
        fake.add_user(EMAIL, ACCOUNT, NAME)
        yield fake


@pytest.fixture
def person() -> tuple[str, str, str]:
    return EMAIL, NAME, OPEN_ID


class Cluster:
    """The replicas of one test, and a client that posts to each of them in turn."""

    def __init__(self, processes: Processes, database_url: str, jira: FakeJira,
                 settings: dict[str, str]):
        self._processes, self._url, self._jira, self._settings = (
            processes, database_url, jira, settings)
        self.replicas: list[Dispatcher] = []

    def start(self) -> Dispatcher:
        replica = self._processes.start(self._url, self._jira, **self._settings).wait_serving()
        self.replicas.append(replica)
        return replica

    def alive(self) -> list[Dispatcher]:
        return [r for r in self.replicas if r.process.poll() is None]

    def post_all(self, posts: list[tuple[str, str]], targets: list[Dispatcher]) -> list[dict]:
        """Post (issue key, source) pairs concurrently, each to the next of ``targets``."""
        turn = itertools.cycle(targets)
        jobs = [(next(turn), key, source) for key, source in posts]
        with ThreadPoolExecutor(max_workers=12) as pool:
            return list(pool.map(lambda job: job[0].post_trigger(job[1], job[2]), jobs))


def all_triggers(replica: Dispatcher) -> list[dict]:
    """Every trigger, through the cursor of GET /dispatch/triggers."""
    found, cursor = [], None
    while True:
        params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = replica.call("GET", "/dispatch/triggers", params=params)
        found += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return found


def all_executions(replica: Dispatcher) -> list[dict]:
    found, offset = [], 0
    while True:
        page = replica.call("GET", "/dispatch/executions",
                            params={"limit": 200, "offset": offset})
        found += page["items"]
        offset += len(page["items"])
        if offset >= page["total"] or not page["items"]:
            return found


def settled(replica: Dispatcher, posted: int) -> bool:
    """Every posted trigger is closed and every execution has ended."""
    triggers = all_triggers(replica)
    if len(triggers) != posted or any(t["status"] not in ("completed", "failed")
                                      for t in triggers):
        return False
    return all(e["status"] in TERMINAL for e in all_executions(replica))


def unsettled(replica: Dispatcher) -> list[dict]:
    """What is still open, for the message of a test that waited in vain."""
    return ([t for t in all_triggers(replica) if t["status"] not in ("completed", "failed")]
            + [{k: e[k] for k in ("id", "issue_key", "status", "trigger_id")}
               for e in all_executions(replica) if e["status"] not in TERMINAL])


def busy(replica: Dispatcher) -> int:
    return replica.call("GET", "/admin/actors")["pool"]["busy"]


def seen_dead(observer: Dispatcher, replica: Dispatcher) -> bool:
    """``observer``'s admin view says ``replica``'s heartbeat is older than a lease."""
    pid = replica.process.pid
    views = observer.call("GET", "/admin/actors")["replicas"]
    return any(v["pid"] == pid and not v["alive"] for v in views)


def pause_holding_work(replica: Dispatcher, observer: Dispatcher) -> list[int]:
    """SIGSTOP ``replica`` while it runs executions that are still running once it is stopped
    (read through ``observer``); their ids. Tries again when they all ended just before."""
    for _ in range(20):
        running = wait_until(lambda: replica.call("GET", "/admin/actors")["executions"], 30,
                             "the replica runs executions")
        replica.process.send_signal(signal.SIGSTOP)
        held = [e["execution_id"] for e in running
                if observer.call("GET", f"/dispatch/executions/{e['execution_id']}")["status"]
                not in TERMINAL]
        if held:
            return held
        replica.process.send_signal(signal.SIGCONT)
    raise AssertionError("the replica never held an execution long enough to be paused")


def log_messages(replica: Dispatcher, message: str) -> list[str]:
    return [line for line in replica.lines if f'"msg": "{message}"' in line]


def page_of(execution: dict, attempt: int) -> dict:
    [action] = [a for rule in execution["rule_executions"] for a in rule["action_executions"]
                if a["type"] == "page_assignment"
                and a["action"]["page_assignment"]["attempt"] == attempt]
    return action


def assignee_of(execution: dict) -> str:
    [assignee] = [action["context"]["assign"]["assignee"]
                  for rule in execution["rule_executions"]
                  for action in rule["action_executions"] if action["type"] == "assign"]
    return assignee


def first_deadlines(replica: Dispatcher, keys: list[str]) -> dict[str, str] | None:
    """The deadline of each issue's first ACK wait, once every one of them is waiting."""
    deadlines = {}
    for key in keys:
        execution = replica.execution_of(key)
        if execution is None:
            return None
        deadline = page_of(execution, 1)["context"].get("page", {}).get("deadline")
        if deadline is None:
            return None
        deadlines[key] = deadline
    return deadlines


def assert_no_overlap(executions: list[dict]) -> None:
    """No two live executions of one issue and policy (nor of one issue and family) ever ran
    at the same time: each starts after the one before it ended."""
    for key in ("policy_id", "policy_family_id"):
        runs: dict[tuple, list[tuple[datetime, datetime]]] = defaultdict(list)
        for e in executions:
            if e["mode"] == "live":
                runs[(e["issue_key"], e[key])].append(
                    (datetime.fromisoformat(e["created_at"]),
                     datetime.fromisoformat(e["completed_at"])))
        for lock, spans in runs.items():
            spans.sort()
            for (_, ended), (started, _) in itertools.pairwise(spans):
                assert started >= ended, (lock, spans)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_three_replicas_lose_nothing_and_repeat_nothing_through_a_kill_and_a_pause(
        postgres_url, processes, jira, lark, oncall, core):
    settings = {**SETTINGS, **notification_settings(lark, oncall, core)}
    cluster = Cluster(processes, postgres_url, jira, settings)
    first, second, third = cluster.start(), cluster.start(), cluster.start()
    configure(first)

    assigns = [f"{PROJECT}-{n}" for n in range(1, 301)]
    pages = [f"{PAGE_PROJECT}-{n}" for n in range(1, 21)]
    for key in assigns:
        jira.add_issue(key)
    for key in pages:
        jira.add_issue(key, labels=[NOTIFY_LABEL], assignee=ACCOUNT, priority="P0",
                       status=PENDING)
    # Round robin first, without faults: 150 dispatches over three replicas spread as evenly as
    # on one, since every turn is taken under row locks.
    calm = cluster.post_all([(key, "jira_automation") for key in assigns[150:]],
                            cluster.replicas)
    wait_until(lambda: settled(third, len(calm)), 60, "the first 150 dispatches are done")
    spread = Counter(assignee_of(e) for e in all_executions(third))
    assert set(spread) == set(ENGINEERS)
    assert max(spread.values()) - min(spread.values()) <= 1, spread

    # The notifications: each parks in its first ACK wait, on whichever replica ran it.
    notified = calm + cluster.post_all([(key, NOTIFY_SOURCE) for key in pages],
                                       cluster.replicas)
    deadlines = wait_until(lambda: first_deadlines(third, pages), 60,
                           "every notification is parked in its first ACK wait")
    # Thirty assign issues are posted twice, to two replicas at once: the second must wait
    # for the first (deferred, or coalesced), never run beside it.
    twice = assigns[:30]
    posts = [(key, "jira_automation") for key in assigns[:150] + twice]
    answers = notified + cluster.post_all(posts, cluster.replicas)
    posts += [(key, "jira_automation") for key in assigns[150:]]
    posts += [(key, NOTIFY_SOURCE) for key in pages]
    assert all(a["status"] == "pending" for a in answers)
    assert len({a["id"] for a in answers}) == len(posts)

    # Mid-flight: the first replica is killed while it holds work.
    wait_until(lambda: busy(first) > 0 and second.succeeded() >= 150 + 20, 60,
               "work is under way on the first replica")
    first.process.kill()  # SIGKILL
    first.process.wait(timeout=10)

    # The second is paused while it holds work, until the third has taken over that work (its
    # leases ran out) and sees the second's heartbeat stopped; then it goes on.
    held = pause_holding_work(second, third)
    try:
        wait_until(lambda: all(third.call("GET", f"/dispatch/executions/{e}")["status"]
                               in TERMINAL for e in held), 3 * LEASE_SECONDS + 20,
                   "the third replica finishes what the paused one held")
        wait_until(lambda: seen_dead(third, second) and seen_dead(third, first), 20,
                   "the third replica sees the others' heartbeats stopped")
    finally:
        second.process.send_signal(signal.SIGCONT)

    wait_until(lambda: settled(third, len(posts)), 120,
               "every trigger is closed and every execution has ended")

    # -- every trigger completed once, every execution ended well ---------------------------
    triggers = all_triggers(third)
    assert Counter(t["status"] for t in triggers) == {"completed": len(posts)}
    executions = all_executions(third)
    assert [e for e in executions if e["status"] != "succeeded"] == []
    ran = Counter(e["issue_key"] for e in executions)
    for key in assigns[30:] + pages:
        assert ran[key] == 1, (key, ran[key])
    for key in twice:
        assert 1 <= ran[key] <= 2, (key, ran[key])
    created_by = {e["id"]: e["trigger_id"] for e in executions}
    for trigger in triggers:  # a trigger made its executions once
        for execution_id in trigger["output"]["execution_ids"]:
            assert created_by[execution_id] == trigger["id"]
    assert_no_overlap(executions)

    # -- no side effect twice, at any peer --------------------------------------------------
    for key in assigns:
        applied = [c for c in jira.calls(Route.ASSIGN, key) if c.applied]
        assert 1 <= len(applied) <= ran[key], (key, [c.body for c in applied], [
            e["rule_executions"] for e in executions if e["issue_key"] == key],
            "\n".join(line for r in cluster.replicas for line in r.lines if key in line))
    cards = lark.messages()
    assert len({m.uuid for m in cards}) == len(cards) == len(pages)
    assert all(len(m.urgent_for) <= 1 for m in cards)
    assert len(lark.calls(LarkRoute.URGENT_APP)) <= len(pages)
    paged = Counter(p.dedup_key for p in oncall.pages())
    assert all(count == 1 for count in paged.values()), paged
    assert len(oncall.calls(OncallRoute.PAGE)) == len(paged)
    for key in pages:
        bodies = Counter(c.body for c in jira.comments(key))
        assert all(count == 1 for count in bodies.values()), (key, bodies)

    # -- parked waits ended on a surviving replica, with the deadline they were given -------
    by_key = {e["issue_key"]: e for e in executions}
    for key in pages:
        page = page_of(by_key[key], 1)["context"]["page"]
        assert (page["outcome"], page["deadline"]) == ("timeout", deadlines[key]), (key, page)
        assert page_of(by_key[key], 2)["context"]["page"]["outcome"] == "timeout"
    finished_by = {r.process.pid: len(log_messages(r, "execution finished"))
                   for r in (second, third)}
    assert sum(finished_by.values()) > 0

    # -- the paused replica stopped its work once it went on: its writes were refused ------
    assert log_messages(second, "execution lease lost; stopping before any further call") \
        or log_messages(second, "trigger lease lost; another holder processes it"), \
        second.log()[-4000:]
    for replica in (second, third):
        assert replica.log_problems() == [], replica.log_problems()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_rolling_restart_refuses_no_trigger_and_loses_none(postgres_url, processes, jira):
    # A long lease: what a stopping replica does not finish must be handed back, not left
    # for its lease to expire.
    settings = {**SETTINGS, "LEASES_DURATION": "60s", "LEASES_HEARTBEAT": "5s"}
    cluster = Cluster(processes, postgres_url, jira, settings)
    for _ in range(3):
        cluster.start()
    configure(cluster.replicas[0])

    ready: set[Dispatcher] = set(cluster.replicas)
    replaced: list[Dispatcher] = []
    stop = threading.Event()
    answers: list[tuple[str, int]] = []

    def probe() -> None:  # what the load balancer does: send only to ready replicas
        while not stop.is_set():
            for replica in list(cluster.replicas):
                try:
                    ok = requests.get(replica.url + "/readyz", timeout=1).status_code == 200
                except requests.RequestException:
                    ok = False
                (ready.add if ok else ready.discard)(replica)
            stop.wait(0.1)

    def post() -> None:  # 20 triggers a second, each to the next ready replica
        numbers = itertools.count(1)
        while not stop.is_set():
            targets = sorted(ready, key=lambda r: r.port)
            if targets:
                key = f"{PROJECT}-{next(numbers)}"
                jira.add_issue(key)
                target = targets[len(answers) % len(targets)]
                try:
                    status = requests.post(
                        target.url + BASE + "/dispatch/triggers", timeout=10,
                        json={"source": "jira_automation",
                              "input": {"issue_key": key}}).status_code
                except requests.RequestException as exc:
                    status = -1
                    key = f"{key}: {type(exc).__name__}"
                answers.append((key, status))
            stop.wait(0.05)

    threads = [threading.Thread(target=probe, daemon=True),
               threading.Thread(target=post, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        for old in list(cluster.replicas):
            wait_until(lambda: len(answers) >= 20, 30, "the client posts")
            old.terminate()
            assert old.wait_exit(timeout=15) == 0, old.log()[-3000:]
            assert log_messages(old, "leases given back to the other replicas"), old.log()
            replacement = cluster.start()
            wait_until(lambda r=replacement: r in ready, 20, "the new replica is ready")
            cluster.replicas.remove(old)
            replaced.append(old)
            ready.discard(old)
        posted = len(answers)
        wait_until(lambda: len(answers) >= posted + 20, 30, "the client posts on")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)

    assert [a for a in answers if a[1] != 202] == []
    survivor = cluster.replicas[0]
    # Well within the 60 s lease: nothing waited for a lease of a stopped replica to expire.
    try:
        wait_until(lambda: settled(survivor, len(answers)), 30,
                   "every trigger posted during the restarts is closed and its execution ended")
    except AssertionError as exc:
        logs = "\n".join(r.log() for r in replaced + cluster.replicas)
        raise AssertionError(f"{exc}: {unsettled(survivor)}\n{logs}") from None
    triggers = all_triggers(survivor)
    assert Counter(t["status"] for t in triggers) == {"completed": len(answers)}
    executions = all_executions(survivor)
    assert len(executions) == len(answers)
    assert all(e["status"] == "succeeded" for e in executions)
    for key, _ in answers:
        assert len([c for c in jira.calls(Route.ASSIGN, key) if c.applied]) == 1, key


@pytest.mark.timeout(60)
def test_single_and_shared_processes_refuse_to_serve_one_database_together(
        postgres_url, processes, jira):
    replica = processes.start(postgres_url, jira, **SETTINGS).wait_serving()
    single = processes.start(postgres_url, jira, **{**SETTINGS, "CLUSTER_MODE": "single"})
    assert not single.started()
    assert single.wait_exit(timeout=10) == 2
    assert "in single mode only one may" in single.log()

    replica.terminate()
    assert replica.wait_exit(timeout=15) == 0
    alone = processes.start(postgres_url, jira, **{**SETTINGS, "CLUSTER_MODE": "single"})
    alone.wait_serving()
    joining = processes.start(postgres_url, jira, **SETTINGS)
    assert not joining.started()
    assert joining.wait_exit(timeout=10) == 2
    assert "in single mode serves this PostgreSQL database" in joining.log()
    second = processes.start(postgres_url, jira, **{**SETTINGS, "CLUSTER_MODE": "single"})
    assert second.wait_exit(timeout=10) == 2
