"""End-to-end assign dispatches per second of a real service process, next to its floor: the
least Jira work a dispatch needs, done by 10 plain ``requests`` threads against the same fake
Jira.

The service is a real ``python -m ticket_dispatcher serve --insecure-no-auth`` process
(tests/process.py's ``Dispatcher``: trigger rate limit off, log level WARNING, default slots,
trigger actors and HTTP threads; notifications off, so no Lark, Oncall or Core is called) on a
temporary SQLite file or, with ``--postgres-url``, a throw-away PostgreSQL schema. Its Jira is
tests/peer.py's independent fake served by a process of its own (``python bench/floors.py
jira``), so no Jira call costs the service's CPU or GIL. The fake is served by waitress
(HTTP/1.1 keep-alive, 16 threads) by default: tests/peer.py's own ``serve`` is wsgiref, which
answers HTTP/1.0 and so opens a connection and starts a thread per call, a cost a real Jira's
front end does not put on its clients; ``--peer-server wsgiref`` runs on it for comparison.

The world, seeded through the service's API and the fake's control API: ``--users`` engineers
(default 10) known to Jira by email but without a cached account id, and one active policy
that assigns every BENCH (and SCREEN, the fallback's project) issue carrying the auto-assign
label round robin over them. Each issue is P3, ``Todo``, unassigned, with the auto-assign
label, so a dispatch reads the issue (once: the execution starts from its trigger's fresh
read), searches the engineer's account on a cache miss, and PUTs the issue once: the assignee
and the label's removal in one edit. 10 warm-up dispatches (not counted) fill the account
cache with the default 10 engineers, so the measured runs are the steady state.

A run posts ``--triggers`` triggers (default 600, distinct new issues) from 10 threads and
polls ``GET /dispatch/executions`` until every execution is terminal (bounded by
``--timeout``). Dispatches/s is N over the time from the first POST to the last execution's
``completed_at`` (server and bench share the clock); the service's CPU per dispatch covers the
same span (intake and polls included), as the floor's client CPU per dispatch covers its
run. Checks: every execution succeeded, and Jira got exactly
one write of the assignee per issue. The Jira calls per dispatch are printed.

The floor, the "least-call floor", is what a dispatch cannot do without: per dispatch GET the
issue and PUT the issue with the assignee and the label's removal in one edit (no user search:
the warm-up filled the account cache), round robin over the engineers, on as many fresh
issues in the same state; 10 threads, one keep-alive session each, every answer checked
against the status expected. Goals: service/least-call floor >= 0.8 on
SQLite, >= 0.75 on PostgreSQL. For reference the bench also times a replay of the service's
own calls of the run (per dispatch the calls of one issue in their order, its key swapped; the
calls without an issue key, user searches, spread over the dispatches before their PUT
assignee; same methods, paths, queries and bodies): its ratio hides a redundant call, which
the replay makes too. ``--repeat`` alternates service run, replay and least-call floor and compares
the medians. The defaults, 600 triggers and 3 runs, are the measurement bench/README.md
reports.

The durable floor, timed in the same runs under the same placement: bench/durable_floor.py, a
bare falcon + waitress app in a process of its own (on the service's CPU with
``--split-cpus``), on the service's database, that takes the same trigger body, INSERTs one
row, and has 10 worker threads make the least calls with ``requests`` (GET the issue, PUT the
assignee and the label's removal in one edit) and UPDATE the row with the result. The bench
posts as many fresh issues from its 10 threads and times it the same way: first POST to the
last recorded result. Printed beside the service, with the ratio; no goal is set on it.

Then the Jira calls of 20 webhook-driven dispatches are counted, not timed: each started by a
signed ``jira:issue_created`` delivery sent at once, so fresh, whose issue is the snapshot.
Then the fallback's: project ``SCREEN``'s edit screen lacks the assignee (the fake answers an
edit naming it with Jira's 400 "... not on the appropriate screen"), so its first dispatch
pays the refused edit and then writes the assignee through its endpoint and the labels in an
edit of their own, and the 20 after it, the refusal remembered for an hour, make the two
writes straight away (checked: one write of the assignee and one label edit per issue). Then
20 dry runs (``"dryrun": {}``): they read and write nothing (checked).

Then the Jira calls of the assignment-notification workflow are counted, not timed: the
service is stopped and a second one started on the same database with the notification on,
its Lark, Oncall and Core in-process fakes (tests/process.py's ``notification_peers``) that
know engineer 0, and an assignee notification policy for project NOTE (urgent P0, one page
attempt, pending status ``Todo``). 20 card-only workflows (P3 issues assigned to engineer 0
with the ``notify-assignee`` label, ``Todo``) and 20 urgent ones acknowledged before the page
(P0, ``In Progress``: the guard finds the ACK, so no page) are triggered with the source
``jira_assignment_assignee``; the Jira calls per workflow are printed. Checks: every execution
succeeded, one Lark card per issue, no page. Then the full path: 10 P0 workflows of project
``PATH`` nobody acknowledges (card, App-urgent, three pages each timing out after 2 s, then
the escalation to engineer 0's direct leader, whom Core, Lark, Oncall and Jira know), whose
calls are counted by step (``full_path_calls``): reads of the issue in the step, reads while
its wait was parked (between steps), searches (the ACK watcher's batched looks, a share for
each issue they name) and writes; the leader's own workflow that the escalation starts is
counted apart. Checked: at most one read of the issue a step, none between steps.

Last, one table: each path's reads of the issue, searches, writes and total Jira calls per
dispatch (per workflow for the notification), with the goals (webhook-driven 1,
Automation-driven 2).

Placement. Unpinned, the service's threads hand the interpreter lock to each other across
both CPUs and its figure drifts by a quarter from one sitting to the next. ``--split-cpus``
gives the service one CPU (``CPU_AFFINITY``), the fake Jira the other, and runs each floor's
client on the service's CPU in its turn: both sides under the same placement, and runs within
a few per cent of each other. ``--pin-floor`` only pins the floors (to the first CPU), for a
service pinned by ``--setting CPU_AFFINITY=N``.

    python bench/e2e_dispatch.py [--triggers 600] [--repeat 3] [--users 10]
        [--postgres-url URL] [--peer-server waitress|wsgiref] [--split-cpus | --pin-floor]
        [--timeout 90] [--setting NAME=VALUE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import requests
from databases import fresh_database  # also puts the repository root on sys.path
from floors import (
    JiraProcess,
    cpu_seconds,
    median,
    one_cpu,
    pin_process,
    split_cpus,
    start_script,
    stop,
    wait_http,
)

from tests.factories import jira_delivery
from tests.peer_notify import FakeOncall
from tests.process import (
    BASE,
    Dispatcher,
    assignee_notification_policy,
    notification_peers,
    notification_settings,
)
from ticket_dispatcher.domain.issues import DEFAULT_AUTO_ASSIGN_LABEL
from ticket_dispatcher.http.webhooks import signature
from ticket_dispatcher.timeutil import parse_rfc3339

THREADS = 10  # posting threads, and the floor's threads
WARM_UP = 10
PROJECT = "BENCH"
GOALS = {"SQLite": 0.8, "PostgreSQL": 0.75}  # service/least-call floor
POLL_SECONDS = 0.2
WEBHOOK_SECRET = "bench-webhook-secret"
WEBHOOK_DISPATCHES = 20  # dispatches started by a fresh signed delivery, counted not timed
# Dispatcher turns the trigger rate limit off
SETTINGS = {"LOG_LEVEL": "WARNING", "JIRA_WEBHOOK_SECRETS": WEBHOOK_SECRET}
# the notification workflows whose Jira calls are counted
NOTIFY_PROJECT, NOTIFY_WORKFLOWS = "NOTE", 20
NOTIFY_SOURCE, NOTIFY_LABEL = "jira_assignment_assignee", "notify-assignee"
PENDING = "Todo"  # the policy's ack_pending_statuses
# the fallback: a project whose edit screen lacks the assignee, so the one edit is refused
SCREEN_PROJECT, FALLBACK_DISPATCHES = "SCREEN", 20
DRY_RUNS = 20  # dry-run triggers whose calls are counted
# the notification workflow on its full path: card, App-urgent, three pages each timing out,
# the escalation to the direct leader; short waits, so it lasts seconds
PATH_PROJECT, PATH_WORKFLOWS = "PATH", 10
PATH_ACK_TIMEOUT, PATH_POLL = "2s", "500ms"
LEADER_EMAIL, LEADER_ACCOUNT, LEADER_OPEN_ID = "lead0000@example.com", "acc-lead", "ou_lead"
# the durable floor's process and its answer
DURABLE_FLOOR = Path(__file__).resolve().parent / "durable_floor.py"


@dataclass(frozen=True)
class ServiceRun:
    rate: float  # dispatches per second
    cpu_ms: float  # service CPU per dispatch
    peer_cpu_ms: float  # fake Jira CPU per dispatch
    intake_rate: float  # triggers/s while posting (every 202 back)
    calls: list[dict]  # what the fake logged during the run
    problems: dict[str, str]  # issue key -> what went wrong with its dispatch

    def line(self, count: int) -> str:
        return (f"{self.rate:8.1f} dispatches/s  service CPU {self.cpu_ms:5.1f} ms/dispatch  "
                f"Jira CPU {self.peer_cpu_ms:4.1f} ms/dispatch  (intake {self.intake_rate:.0f}"
                f" triggers/s; {count - len(self.problems)} of {count} ok)")


@dataclass(frozen=True)
class FloorRun:
    rate: float
    cpu_ms: float  # the floor's client (this process) CPU per dispatch
    peer_cpu_ms: float
    calls: int
    mismatched: int  # answers whose status differs from the one expected

    def line(self) -> str:
        wrong = f", {self.mismatched} answers NOT as expected" if self.mismatched else ""
        return (f"{self.rate:8.1f} dispatches/s  client CPU  {self.cpu_ms:5.1f} ms/dispatch  "
                f"Jira CPU {self.peer_cpu_ms:4.1f} ms/dispatch  ({self.calls} calls{wrong})")


# -- the world ------------------------------------------------------------------------------------


def engineer(n: int) -> str:
    return f"eng{n:04d}@example.com"  # zero-padded: Jira's fuzzy search finds exactly one


def account(n: int) -> str:
    """Engineer ``n``'s Jira account ID."""
    return f"acc-{n:04d}"


def seed(service: Dispatcher, jira: JiraProcess, users: int) -> None:
    """Engineers without a cached Jira account, and one active round-robin assign policy (for
    ``PROJECT`` and the fallback's ``SCREEN_PROJECT``)."""
    emails = [engineer(n) for n in range(users)]
    jira.add_users([(email, account(n)) for n, email in enumerate(emails)])
    for email in emails:
        service.call("PUT", f"/engineers/{email}", (200, 201), json={"dispatch_enabled": True})
    policy = service.call("POST", "/dispatch/policies", (201,), json={
        "name": "bench round robin", "description": "every BENCH issue, round robin",
        "trigger": {"enable": True, "source_in": [], "project_key_in": [PROJECT, SCREEN_PROJECT],
                    "issue_label_all": [DEFAULT_AUTO_ASSIGN_LABEL]},
        "rules": [{"name": "everything", "priority": 10, "when": {"always": True},
                   "then": [{"type": "assign", "assign": {
                       "receiver": {"type": "users", "users": emails},
                       "strategy": "round_robin"}}],
                   "transition": {"on_success": "terminate"}}]})
    service.call("POST", f"/dispatch/policies/{policy['id']}/activate")


def new_issues(jira: JiraProcess, project: str, first: int, count: int, *,
               labels: tuple[str, ...] = (DEFAULT_AUTO_ASSIGN_LABEL,), priority: str = "P3",
               status: str = "Todo", assignee: str | None = None) -> list[str]:
    """``count`` issues of ``project`` numbered from ``first``; by default ones to dispatch
    (P3, ``Todo``, unassigned, with the auto-assign label)."""
    keys = [f"{project}-{n}" for n in range(first, first + count)]
    jira.add_issues(keys, labels=list(labels), priority=priority, status=status,
                    assignee=assignee)
    return keys


# -- the service run ------------------------------------------------------------------------------


def in_threads(work: Callable[[requests.Session, object], None], items: list) -> None:
    """``work(session, item)`` for every item from ``THREADS`` threads, a session each."""
    local = threading.local()

    def run(item: object) -> None:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        work(local.session, item)

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(run, items))


def post_all(service: Dispatcher, keys: list[str], source: str = "jira_automation",
             dry_run: bool = False) -> None:
    extra = {"dryrun": {}} if dry_run else {}

    def post(session: requests.Session, key: object) -> None:
        session.post(f"{service.url}{BASE}/dispatch/triggers", timeout=30, json={
            "source": source, "input": {"issue_key": key}, **extra}).raise_for_status()

    in_threads(post, keys)


def terminal(service: Dispatcher) -> int:
    return sum(service.call("GET", "/dispatch/executions",
                            params={"status": status, "limit": 1})["total"]
               for status in ("succeeded", "failed"))


def wait_terminal(service: Dispatcher, count: int, timeout: float) -> None:
    """Poll the API until ``count`` executions in all are terminal."""
    deadline = time.monotonic() + timeout
    while (done := terminal(service)) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {done} of {count} executions terminal after {timeout:g} s;"
                             f" the service's log ends:\n{service.log()[-3000:]}")
        time.sleep(POLL_SECONDS)


def executions_of(service: Dispatcher, keys: set[str]) -> list[dict]:
    found: list[dict] = []
    offset = 0
    while True:
        page = service.call("GET", "/dispatch/executions", params={"limit": 200,
                                                                   "offset": offset})
        found += [e for e in page["items"] if e["issue_key"] in keys]
        offset += len(page["items"])
        if offset >= page["total"] or not page["items"]:
            return found


def dispatch(service: Dispatcher, jira: JiraProcess, keys: list[str], expected: int,
             timeout: float) -> ServiceRun:
    """Trigger every key; wait until ``expected`` executions in all are terminal."""
    _, since = jira.calls()
    cpu, peer_cpu = cpu_seconds(service.process.pid), cpu_seconds(jira.pid)
    first_post, started = datetime.now(UTC), time.perf_counter()
    post_all(service, keys)
    posted = time.perf_counter() - started
    wait_terminal(service, expected, timeout)
    cpu, peer_cpu = cpu_seconds(service.process.pid) - cpu, cpu_seconds(jira.pid) - peer_cpu
    ended = executions_of(service, set(keys))
    calls, _ = jira.calls(since)
    last = max(parse_rfc3339(e["completed_at"]) for e in ended)
    n = len(keys)
    return ServiceRun(rate=n / (last - first_post).total_seconds(), cpu_ms=1000 * cpu / n,
                      peer_cpu_ms=1000 * peer_cpu / n, intake_rate=n / posted, calls=calls,
                      problems=problems(keys, ended, calls))


def problems(keys: list[str], ended: list[dict], calls: list[dict]) -> dict[str, str]:
    """The issues whose dispatch did not end as one succeeded execution with exactly one PUT
    assignee Jira accepted, and what happened instead."""
    statuses: dict[str, list[str]] = defaultdict(list)
    for execution in ended:
        statuses[execution["issue_key"]].append(execution["status"])
    puts = Counter(c["key"] for c in calls if kind(c) in ASSIGNEE_WRITES and c["status"] == 204)
    return {key: f"executions {statuses[key]}, {puts[key]} writes of the assignee" for key in keys
            if statuses[key] != ["succeeded"] or puts[key] != 1}


# -- the floors -----------------------------------------------------------------------------------


# The two writes of the assignee: its own endpoint, or the one edit that sets it with the labels.
ASSIGNEE_WRITES = ("PUT assignee", "PUT issue+assignee")


def kind(call: dict) -> str:
    """A name for a Jira call, for the recipe and the checks: ``GET issue``, ``PUT assignee``,
    ``PUT issue+assignee`` (an edit that sets the assignee), ``GET user search``, ``POST request
    comment`` (the service desk API); a call without an issue key by its path."""
    method, path, key = call["method"], call["path"], call["key"]
    if path.endswith("/user/search"):
        return f"{method} user search"
    if key:
        rest = path.split(f"/{key}", 1)[1].strip("/")  # "", "assignee", "comment", ...
        if path.startswith("/rest/api/2/issue/"):
            body = call.get("body")
            fields = body.get("fields") if isinstance(body, dict) else None
            assigns = not rest and isinstance(fields, dict) and "assignee" in fields
            return f"{method} {rest or 'issue'}{'+assignee' if assigns else ''}"
        return f"{method} request {rest}".rstrip()  # the service desk API
    return f"{method} {path}"


def recipe(calls: list[dict], count: int) -> str:
    kinds = Counter(kind(call) for call in calls)
    return ", ".join(f"{name} {number / count:.2f}" for name, number in sorted(kinds.items()))


def same_calls(calls: list[dict], keys: list[str], floor_keys: list[str]) -> list[list[dict]]:
    """The service run's calls, re-addressed to ``floor_keys``: per dispatch the calls of its
    issue in their order; each call without an issue key (a user search) joins one dispatch,
    spread evenly, before its write of the assignee."""
    by_key: dict[str, list[dict]] = defaultdict(list)
    keyless = []
    for call in calls:
        if call["key"] is None:
            keyless.append(call)
        else:
            by_key[call["key"]].append(call)
    unexpected = set(by_key) - set(keys)
    if unexpected:
        raise SystemExit(f"the service called Jira about issues outside this run: "
                         f"{sorted(unexpected)[:5]}")
    plan = []
    for key, floor_key in zip(keys, floor_keys, strict=True):
        plan.append([{**call, "path": "/".join(floor_key if part == key else part
                                               for part in call["path"].split("/"))}
                     for call in by_key[key]])
    for number, call in enumerate(keyless):
        dispatch_calls = plan[number * len(plan) // len(keyless)]
        at = next((i for i, c in enumerate(dispatch_calls) if kind(c) in ASSIGNEE_WRITES),
                  len(dispatch_calls))
        dispatch_calls.insert(at, call)
    return plan


def least_calls(floor_keys: list[str], users: int) -> list[list[dict]]:
    """GET issue, then PUT issue with the assignee (round robin over the engineers) and the
    auto-assign label's removal in one edit, per dispatch."""
    plan = []
    for number, key in enumerate(floor_keys):
        path = f"/rest/api/2/issue/{key}"
        edit = {"fields": {"assignee": {"accountId": account(number % users)}},
                "update": {"labels": [{"remove": DEFAULT_AUTO_ASSIGN_LABEL}]}}
        plan.append([
            {"method": "GET", "path": path, "query": "", "body": None, "status": 200},
            {"method": "PUT", "path": path, "query": "", "body": edit, "status": 204},
        ])
    return plan


def replay(jira: JiraProcess, plan: list[list[dict]]) -> FloorRun:
    """Every dispatch's calls in order, from ``THREADS`` threads with plain ``requests``."""
    mismatched = []

    def run(session: requests.Session, calls: object) -> None:
        session.auth = (jira.email, jira.api_token)
        for call in calls:
            url = jira.base_url + call["path"] + (f"?{call['query']}" if call["query"] else "")
            answer = session.request(call["method"], url, timeout=30,
                                     json=call["body"] if call["body"] is not None else None)
            if answer.status_code != call["status"]:
                mismatched.append(answer.status_code)

    cpu, peer_cpu = cpu_seconds(os.getpid()), cpu_seconds(jira.pid)
    started = time.perf_counter()
    in_threads(run, plan)
    elapsed = time.perf_counter() - started
    cpu, peer_cpu = cpu_seconds(os.getpid()) - cpu, cpu_seconds(jira.pid) - peer_cpu
    return FloorRun(rate=len(plan) / elapsed, cpu_ms=1000 * cpu / len(plan),
                    peer_cpu_ms=1000 * peer_cpu / len(plan), calls=sum(map(len, plan)),
                    mismatched=len(mismatched))


# -- the durable floor ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DurableRun:
    rate: float
    cpu_ms: float  # the durable floor's process CPU per dispatch
    peer_cpu_ms: float
    failed: int  # dispatches whose Jira calls were not answered as expected

    def line(self, count: int) -> str:
        return (f"{self.rate:8.1f} dispatches/s  floor CPU   {self.cpu_ms:5.1f} ms/dispatch  "
                f"Jira CPU {self.peer_cpu_ms:4.1f} ms/dispatch  ({count - self.failed} of "
                f"{count} ok)")


class DurableFloor:
    """bench/durable_floor.py in a process of its own, on the service's database."""

    def __init__(self, database_url: str, jira: JiraProcess, users: int, cpu: int | None):
        self.process, port = start_script(database_url, jira.base_url, "--users", str(users),
                                          script=DURABLE_FLOOR)
        if cpu is not None:
            pin_process(self.process.pid, cpu)
        self.url = f"http://127.0.0.1:{port}"

    def results(self) -> dict:
        answer = requests.get(f"{self.url}/results", timeout=30)
        answer.raise_for_status()
        return answer.json()

    def run(self, jira: JiraProcess, keys: list[str], timeout: float) -> DurableRun:
        """Post every key from ``THREADS`` threads; first POST to the last recorded result."""
        before = self.results()
        ended = before["done"] + before["failed"] + len(keys)
        cpu, peer_cpu = cpu_seconds(self.process.pid), cpu_seconds(jira.pid)
        first_post = time.time()

        def post(session: requests.Session, key: object) -> None:
            session.post(f"{self.url}/triggers", timeout=30, json={
                "source": "jira_automation", "input": {"issue_key": key}}).raise_for_status()

        in_threads(post, keys)
        deadline = time.monotonic() + timeout
        while (now := self.results())["done"] + now["failed"] < ended:
            if time.monotonic() > deadline:
                raise SystemExit(f"the durable floor ended {now} of {ended} in {timeout:g} s")
            time.sleep(POLL_SECONDS)
        cpu = cpu_seconds(self.process.pid) - cpu
        peer_cpu = cpu_seconds(jira.pid) - peer_cpu
        n = len(keys)
        return DurableRun(rate=n / (now["last"] - first_post), cpu_ms=1000 * cpu / n,
                          peer_cpu_ms=1000 * peer_cpu / n,
                          failed=now["failed"] - before["failed"])

    def stop(self) -> None:
        stop(self.process)


# -- the bench ------------------------------------------------------------------------------------


def start_service(database_url: str, jira: JiraProcess,
                  settings: dict[str, str] = SETTINGS) -> Dispatcher:
    service = Dispatcher(database_url, jira, settings)  # reads base_url, email, api_token
    try:
        wait_http(f"{service.url}/readyz", service.process)
    except SystemExit:
        service.kill()
        raise SystemExit(f"the service did not become ready:\n{service.log()[-3000:]}") from None
    return service


Runs = tuple[list[ServiceRun], list[FloorRun], list[FloorRun], list[DurableRun]]


def run_all(args: argparse.Namespace, service: Dispatcher, jira: JiraProcess,
            durable: DurableFloor) -> Runs:
    """The measured runs: (service runs, least-call floors, replays of the service's calls,
    durable floors)."""
    seed(service, jira, args.users)
    warm = new_issues(jira, PROJECT, 1, WARM_UP)
    post_all(service, warm)
    wait_terminal(service, WARM_UP, args.timeout)
    done = WARM_UP
    runs: Runs = ([], [], [], [])
    for number in range(1, args.repeat + 1):
        first = number * 100_000
        keys = new_issues(jira, PROJECT, first, args.triggers)
        done += args.triggers
        result = dispatch(service, jira, keys, done, args.timeout)
        runs[0].append(result)
        print(f"run {number}  service                  {result.line(args.triggers)}",
              flush=True)
        for key, problem in list(result.problems.items())[:10]:
            print(f"        NOT OK {key}: {problem}")
        print(f"        Jira calls per dispatch: {recipe(result.calls, args.triggers)}")
        three_keys = new_issues(jira, "THREE", first, args.triggers)
        replay_keys = new_issues(jira, "REPLAY", first, args.triggers)
        with one_cpu(args.floor_cpu):
            runs[1].append(replay(jira, least_calls(three_keys, args.users)))
            print(f"run {number}  least-call floor         {runs[1][-1].line()}", flush=True)
            runs[2].append(replay(jira, same_calls(result.calls, keys, replay_keys)))
            print(f"run {number}  replay of its own calls  {runs[2][-1].line()}", flush=True)
        # the floor's process has the service's CPU; the posting threads run as for the service
        durable_keys = new_issues(jira, "DURABLE", first, args.triggers)
        runs[3].append(durable.run(jira, durable_keys, args.timeout))
        print(f"run {number}  durable floor            {runs[3][-1].line(args.triggers)}",
              flush=True)
    return runs


def report(engine: str, service: list[ServiceRun], three: list[FloorRun],
           own: list[FloorRun], durable: list[DurableRun]) -> None:
    rate, three_rate = median(r.rate for r in service), median(r.rate for r in three)
    own_rate = median(r.rate for r in own)
    ratio, goal = rate / three_rate, GOALS[engine]
    print(f"\nmedians over {len(service)} run(s), {engine}:")
    print(f"  service                  {rate:8.1f} dispatches/s  service CPU "
          f"{median(r.cpu_ms for r in service):5.1f} ms/dispatch")
    print(f"  least-call floor         {three_rate:8.1f} dispatches/s  client CPU "
          f"{median(r.cpu_ms for r in three):5.1f} ms/dispatch  (GET issue, PUT issue with "
          "the assignee and the label)")
    print(f"  replay of its own calls  {own_rate:8.1f} dispatches/s  (for reference)")
    print(f"  ratio service/least-call floor {ratio:.3f} (goal >= {goal}: "
          f"{'met' if ratio >= goal else 'not met'}); service/replay of its own calls "
          f"{rate / own_rate:.3f}")
    durable_rate = median(r.rate for r in durable)
    print(f"  durable floor            {durable_rate:8.1f} dispatches/s  floor CPU  "
          f"{median(r.cpu_ms for r in durable):5.1f} ms/dispatch  (falcon + waitress: INSERT "
          "a row, 10 threads GET issue and PUT issue, UPDATE the row)")
    print(f"  ratio service/durable floor {rate / durable_rate:.3f} (no goal set)")


# -- the webhook-driven dispatch's Jira calls -----------------------------------------------------


def webhook_calls(service: Dispatcher, jira: JiraProcess, timeout: float) -> PathCount:
    """The Jira calls of dispatches a signed webhook delivery starts, sent at once (fresh):
    the delivery is the snapshot, so the issue is not read."""
    keys = new_issues(jira, PROJECT, 900_000, WEBHOOK_DISPATCHES)
    _, since = jira.calls()
    expected = terminal(service) + len(keys)

    def deliver(session: requests.Session, key: object) -> None:
        body = json.dumps(jira_delivery(
            "jira:issue_created", key=str(key), project=PROJECT, priority="P3",
            labels=(DEFAULT_AUTO_ASSIGN_LABEL,), timestamp=int(time.time() * 1000))).encode()
        session.post(f"{service.url}{BASE}/jira/webhooks", data=body, timeout=30, headers={
            "Content-Type": "application/json",
            "X-Hub-Signature": signature(WEBHOOK_SECRET, body),
            "X-Atlassian-Webhook-Identifier": f"bench-{key}"}).raise_for_status()

    in_threads(deliver, keys)
    wait_terminal(service, expected, timeout)
    calls, _ = jira.calls(since)
    print(f"\nJira calls per webhook-driven dispatch (a fresh signed delivery): "
          f"{recipe(calls, len(keys))}")
    return counted("webhook-driven dispatch (fresh delivery)", calls, len(keys), goal="1")


# -- the calls of each path, counted --------------------------------------------------------------


@dataclass(frozen=True)
class PathCount:
    """The Jira calls of one path, per dispatch (per workflow for a notification)."""

    path: str
    reads: float  # GET of the issue
    searches: float  # user searches, JQL searches (the ACK watcher's batched looks), counts
    writes: float  # edits, the assignee endpoint, comments: whatever changes the issue
    total: float  # every call, those of none of the three kinds included
    goal: str = ""

    def line(self) -> str:
        return (f"  {self.path:<58} {self.reads:6.2f} {self.searches:8.2f} {self.writes:6.2f} "
                f"{self.total:6.2f}  {self.goal}")


def role(call: dict) -> str:
    """``read`` (GET of the issue), ``search``, ``write`` (any other method on an issue), or
    ``other``."""
    if "/search" in call["path"]:
        return "search"
    if call["key"]:
        if call["method"] != "GET":
            return "write"
        return "read" if kind(call) == "GET issue" else "other"
    return "other"


def counted(path: str, calls: list[dict], count: float, goal: str = "") -> PathCount:
    roles = Counter(role(call) for call in calls)
    return PathCount(path, roles["read"] / count, roles["search"] / count,
                     roles["write"] / count, len(calls) / count, goal)


def print_table(rows: list[PathCount]) -> None:
    print("\nJira calls of each path, per dispatch (per workflow for a notification):")
    print(f"  {'path':<58} {'reads':>6} {'searches':>8} {'writes':>6} {'total':>6}  goal")
    for row in rows:
        print(row.line())


def triggered(service: Dispatcher, jira: JiraProcess, keys: list[str], timeout: float, *,
              source: str = "jira_automation", dry_run: bool = False,
              executions: int = 1) -> tuple[list[dict], list[dict]]:
    """Trigger every key and wait until ``executions`` per key are terminal: (the Jira calls
    meanwhile, the executions of the keys)."""
    _, since = jira.calls()
    expected = terminal(service) + executions * len(keys)
    post_all(service, keys, source=source, dry_run=dry_run)
    wait_terminal(service, expected, timeout)
    calls, _ = jira.calls(since)
    return calls, executions_of(service, set(keys))


def fallback_calls(service: Dispatcher, jira: JiraProcess, timeout: float
                   ) -> list[PathCount]:
    """The dispatches of a project whose edit screen lacks the assignee: the first pays the
    refused edit (a 400 "not on the appropriate screen"), then writes the assignee through its
    endpoint and the labels in an edit of their own; the following ones, the refusal
    remembered for an hour, go straight to the two writes."""
    jira.leave_off_edit_screen(SCREEN_PROJECT, "assignee")
    rows = []
    print("\nthe fallback, a project whose edit screen lacks the assignee:")
    for first, count, what in (
            (1, 1, "fallback: first dispatch (pays the refusal)"),
            (2, FALLBACK_DISPATCHES, "fallback: following ones (refusal remembered)")):
        keys = new_issues(jira, SCREEN_PROJECT, first, count)
        calls, ended = triggered(service, jira, keys, timeout)
        print(f"  Jira calls per dispatch, {what}: {recipe(calls, count)}")
        label_edits = Counter(c["key"] for c in calls if kind(c) == "PUT issue"
                              and c["status"] == 204)
        found = problems(keys, ended, calls)
        found |= {key: f"{label_edits[key]} label edits" for key in keys
                  if label_edits[key] != 1 and key not in found}
        for key, problem in list(found.items())[:10]:
            print(f"        NOT OK {key}: {problem}")
        rows.append(counted(what, calls, count))
    return rows


def dry_run_calls(service: Dispatcher, jira: JiraProcess, timeout: float) -> PathCount:
    """Dry-run triggers (``"dryrun": {}``) of issues the policy would assign: they read, and
    write nothing."""
    keys = new_issues(jira, PROJECT, 950_000, DRY_RUNS)
    calls, ended = triggered(service, jira, keys, timeout, dry_run=True)
    print(f"\nJira calls per dry run: {recipe(calls, len(keys))}")
    not_ok = [e["issue_key"] for e in ended if e["status"] != "succeeded"]
    if not_ok:
        print(f"        NOT OK dry runs not succeeded: {not_ok[:10]}")
    writes = [c for c in calls if role(c) == "write"]
    if writes:
        print(f"        NOT OK a dry run wrote to Jira: {kind(writes[0])} {writes[0]['key']}")
    return counted("dry run", calls, len(keys))


# -- the notification workflows' Jira calls -------------------------------------------------------


def notification_calls(database_url: str, jira: JiraProcess, timeout: float
                       ) -> list[PathCount]:
    """A second service on the same database with the notification on and an assignee policy
    for ``NOTIFY_PROJECT``: the Jira calls of card-only workflows, then of urgent ones whose
    issue is acknowledged (not in the pending status) before the page; then the full path
    (``full_path_calls``), engineer 0's leader known to Core, Lark, Oncall and Jira."""
    email, assignee = engineer(0), account(0)
    rows = []
    with notification_peers(email, "Engineer 0", "ou_eng0000") as (lark, oncall, core):
        core.add_user(email, "Engineer 0", open_id="ou_eng0000", leader=LEADER_EMAIL)
        core.add_user(LEADER_EMAIL, "Leader 0", open_id=LEADER_OPEN_ID)
        lark.add_user(LEADER_EMAIL, LEADER_OPEN_ID)
        oncall.add_phone(LEADER_EMAIL)
        jira.add_users([(LEADER_EMAIL, LEADER_ACCOUNT)])
        service = start_service(database_url, jira,
                                SETTINGS | notification_settings(lark, oncall, core))
        try:
            policy = service.call("POST", "/dispatch/policies", (201,),
                                  json=assignee_notification_policy(
                                      "bench assignee notification", NOTIFY_PROJECT,
                                      urgent=["P0"], attempts=1, ack_timeout="1m",
                                      poll_interval="10s", pending=PENDING))
            service.call("POST", f"/dispatch/policies/{policy['id']}/activate")
            print(f"\nnotification workflows ({NOTIFY_WORKFLOWS} each, assigned to {email}):")
            for first, what, priority, status in (
                    (101, "card workflow", "P3", PENDING),
                    (201, "urgent workflow (acknowledged)", "P0", "In Progress")):
                keys = new_issues(jira, NOTIFY_PROJECT, first, NOTIFY_WORKFLOWS,
                                  labels=(NOTIFY_LABEL,), priority=priority, status=status,
                                  assignee=assignee)
                cards, pages = {m.message_id for m in lark.messages()}, len(oncall.pages())
                _, since = jira.calls()
                expected = terminal(service) + len(keys)
                post_all(service, keys, source=NOTIFY_SOURCE)
                wait_terminal(service, expected, timeout)
                ended = executions_of(service, set(keys))
                calls, _ = jira.calls(since)
                print(f"  Jira calls per {what}: {recipe(calls, len(keys))}")
                rows.append(counted(f"notification: {what}", calls, len(keys)))
                sent = [m for m in lark.messages() if m.message_id not in cards]
                for problem in workflow_problems(keys, ended, sent,
                                                 len(oncall.pages()) - pages)[:10]:
                    print(f"        NOT OK {problem}")
            rows += full_path_calls(service, jira, oncall, timeout)
            logged = service.log_problems()
            for line in logged[:3]:
                print(f"        NOT OK service log: {log_summary(line)}")
            if len(logged) > 3:
                print(f"        ... and {len(logged) - 3} more ERROR lines")
        finally:
            service.kill()
    return rows


STEPS = ("step 1: card, App-urgent, page 1", "step 2: page 2", "step 3: page 3",
         "step 4: escalation")
# The workflow's own steps in each: its actions, each allowed one read of the issue.
STEP_ACTIONS = {STEPS[0]: 3, STEPS[1]: 1, STEPS[2]: 1, STEPS[3]: 1}
LEADER_STEP = "the leader's workflow"


def full_path_calls(service: Dispatcher, jira: JiraProcess, oncall: FakeOncall,
                    timeout: float) -> list[PathCount]:
    """``PATH_WORKFLOWS`` urgent workflows that nobody acknowledges: card, App-urgent, three
    pages each timing out, then the escalation to engineer 0's direct leader, whose own
    workflow follows. The Jira calls are counted by step: a step runs from the wake at a
    page's deadline (the first from the trigger) to the next, the last to the end of the
    execution; the leader's workflow after it. The wake's read of the issue is the ending
    page's last look for its ACK, so it is counted in the step before; each step may read the
    issue once for each of its actions (the first: card, App-urgent and page 1). A read of the
    issue after the ACK watcher's first look at the step's wait is one between steps (the
    execution was parked). A search
    the watcher makes for a batch of waits counts a share for each issue it names; a call
    that names no issue (the leader's user search), a share for each workflow then in the
    same step."""
    policy = service.call("POST", "/dispatch/policies", (201,), json=assignee_notification_policy(
        "bench full path", PATH_PROJECT, urgent=["P0"], attempts=3,
        ack_timeout=PATH_ACK_TIMEOUT, poll_interval=PATH_POLL, pending=PENDING, escalate=True))
    service.call("POST", f"/dispatch/policies/{policy['id']}/activate")
    keys = new_issues(jira, PATH_PROJECT, 1, PATH_WORKFLOWS, labels=(NOTIFY_LABEL,),
                      priority="P0", status=PENDING, assignee=account(0))
    pages = len(oncall.pages())
    calls, ended = triggered(service, jira, keys, timeout, source=NOTIFY_SOURCE, executions=2)
    print(f"\nthe notification workflow on its full path ({PATH_WORKFLOWS} P0 workflows, "
          f"ack_timeout {PATH_ACK_TIMEOUT}, poll {PATH_POLL}, nobody acknowledges; "
          f"{len(oncall.pages()) - pages} pages sent in all):")
    windows, not_ok = {}, []
    for key in keys:
        try:
            windows[key] = step_windows(key, ended)
        except (LookupError, TypeError) as exc:  # not the full path: say so, count the rest
            not_ok.append(f"{key}: {exc}")
    tallies: dict[str, Counter] = defaultdict(Counter)
    reads: Counter = Counter()  # (step, key) -> reads of the issue in the step
    looked: set[tuple[str, str]] = set()  # (step, key) whose wait the ACK watcher looked at
    woken: set[tuple[str, str]] = set()  # (step, key) whose wake's read was counted
    for call in sorted(calls, key=lambda c: c["at"]):
        placed = [(key, step) for key in owners(call, keys)
                  if key in windows and (step := step_of(windows[key], call["at"]))]
        for key, placed_in in placed:
            what, step = role(call), placed_in
            if what == "read" and step != LEADER_STEP and (step, key) in looked:
                what = "read between steps"  # the execution was parked: the watcher looked
            if what == "read" and step in STEPS[1:] and (step, key) not in woken:
                woken.add((step, key))  # the wake's read: the ending page's last look
                step = STEPS[STEPS.index(step) - 1]
            tallies[step][what] += 1 / len(placed)
            tallies[step]["total"] += 1 / len(placed)
            reads[step, key] += what == "read"
            if what == "search" and call["key"] is None and call["path"].endswith("/jql"):
                looked.add((step, key))
    count = len(windows) or 1
    print(f"  {'step':<38} {'reads (most)':>12} {'between':>7} {'searches':>8} {'writes':>6} "
          f"{'total':>6}  reads allowed")
    for step in (*STEPS, LEADER_STEP):
        most = max((reads[step, key] for key in windows), default=0)
        tally = tallies[step]
        print(f"  {step:<38} {tally['read'] / count:7.2f} ({most:2d}) "
              f"{tally['read between steps'] / count:7.2f} {tally['search'] / count:8.2f} "
              f"{tally['write'] / count:6.2f} {tally['total'] / count:6.2f}  "
              f"{STEP_ACTIONS.get(step, '')}")
        if step != LEADER_STEP and most > STEP_ACTIONS[step]:
            not_ok.append(f"{step}: {most} reads of the issue in one workflow "
                          f"(at most {STEP_ACTIONS[step]})")
        if step != LEADER_STEP and tally["read between steps"]:
            not_ok.append(f"{step}: reads of the issue while the wait was parked")
    for problem in not_ok[:10]:
        print(f"        NOT OK {problem}")
    names = (("read", "read between steps"), ("search",), ("write",), ("total",))
    whole = [sum(tallies[step][name] for step in STEPS for name in group) / count
             for group in names]
    leader = [sum(tallies[LEADER_STEP][name] for name in group) / count for group in names]
    return [PathCount("notification: full path, card to escalation", *whole,
                      goal="<= 1 read a step, 0 between"),
            PathCount("notification: then the leader's workflow", *leader)]


def step_windows(key: str, ended: list[dict]) -> list[tuple[str, float, float]]:
    """(step, from, to), epoch seconds, of the key's workflow and its leader's."""
    first, _ = sorted((e for e in ended if e["issue_key"] == key), key=lambda e: e["id"])
    escalation = [a["context"].get("escalation", {}).get("outcome") for a in actions(first)
                  if a["type"] == "escalate_assignment_to_leader"]
    if first["status"] != "succeeded" or not escalation or escalation[0] is None:
        raise LookupError(f"execution {first['id']} {first['status']}, escalation "
                          f"{escalation}")
    deadlines = [parse_rfc3339(a["context"]["page"]["deadline"]).timestamp()
                 for a in actions(first) if a["type"] == "page_assignment"]
    # the leader's trigger is made within the escalation; its first read comes after
    ended_at = parse_rfc3339(first["completed_at"]).timestamp()
    bounds = [float("-inf"), *deadlines, ended_at, float("inf")]
    names = (*STEPS, LEADER_STEP)
    if len(bounds) != len(names) + 1:
        raise LookupError(f"{len(deadlines)} page deadlines")
    return [(name, bounds[n], bounds[n + 1]) for n, name in enumerate(names)]


def actions(execution: dict) -> list[dict]:
    return [a for rule in execution["rule_executions"] for a in rule["action_executions"]]


def owners(call: dict, keys: list[str]) -> list[str]:
    """The workflows' issues a call is about: its issue, the issues a JQL search names, or
    (a call about no issue: a user search) all of them."""
    if call["key"]:
        return [call["key"]] if call["key"] in keys else []
    jql = call["body"].get("jql") if isinstance(call.get("body"), dict) else None
    if isinstance(jql, str):
        return [key for key in re.findall(r'"([^"]+)"', jql) if key in keys]
    return list(keys)


def step_of(windows: list[tuple[str, float, float]], at: float) -> str | None:
    return next((name for name, start, end in windows if start <= at < end), None)


def workflow_problems(keys: list[str], ended: list[dict], sent: list, pages: int) -> list[str]:
    """What went wrong: an issue without exactly one succeeded execution or one Lark card (a
    card names its issue), or a page."""
    statuses: dict[str, list[str]] = defaultdict(list)
    for execution in ended:
        statuses[execution["issue_key"]].append(execution["status"])
    found = []
    for key in keys:
        named = re.compile(rf"\b{re.escape(key)}\b")
        cards = sum(1 for message in sent if named.search(json.dumps(message.card)))
        if statuses[key] != ["succeeded"] or cards != 1:
            found.append(f"{key}: executions {statuses[key]}, {cards} Lark card(s)")
    if pages:
        found.append(f"{pages} page(s) sent")
    return found


def log_summary(line: str) -> str:
    """A log line in short: its message and, with a traceback, the exception's last line."""
    try:
        entry = json.loads(line)
    except ValueError:
        return line.rstrip()[:300]
    if not isinstance(entry, dict):
        return line.rstrip()[:300]
    exc = str(entry.get("exc") or "").strip().splitlines()
    return f"{entry.get('level')} {entry.get('msg')}" + (f": {exc[-1]}" if exc else "")


# -- entry point ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=600, help="dispatches per run")
    parser.add_argument("--repeat", type=int, default=3,
                        help="service runs, least-call floors and replays, alternated; the "
                             "medians are compared")
    parser.add_argument("--users", type=int, default=10,
                        help="engineers in the round robin; more than 10 leaves account-id "
                             "cache misses (user searches) in the measured runs")
    parser.add_argument("--postgres-url", help="run on PostgreSQL (a throw-away schema) "
                                               "instead of a temporary SQLite file")
    parser.add_argument("--peer-server", choices=("waitress", "wsgiref"), default="waitress",
                        help="what serves the fake Jira in its own process")
    parser.add_argument("--pin-floor", action="store_true",
                        help="run the floors' threads on one CPU, as a service given one "
                             "CPU runs (--setting CPU_AFFINITY=N)")
    parser.add_argument("--split-cpus", action="store_true",
                        help="the service, and each floor's client in its turn, on one CPU "
                             "and the fake Jira on another: the same placement for both "
                             "sides, and far steadier figures than unpinned runs")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of the measured service, TICKET_DISPATCHER_NAME "
                             "(CPU_AFFINITY=1, say); repeatable")
    parser.add_argument("--timeout", type=float, default=90,
                        help="seconds a run may take to end every execution")
    args = parser.parse_args()
    engine = "PostgreSQL" if args.postgres_url else "SQLite"
    given = dict(setting.partition("=")[::2] for setting in args.setting)
    args.floor_cpu = peer_cpu = None
    if args.split_cpus:
        args.floor_cpu, peer_cpu = split_cpus()
        given["CPU_AFFINITY"] = str(args.floor_cpu)
    elif args.pin_floor:
        args.floor_cpu = min(os.sched_getaffinity(0))
    print(f"end to end, {engine}: {args.triggers} assign dispatches per run from {THREADS} "
          f"threads after {WARM_UP} warm-up ones, {args.repeat} run(s), round robin over "
          f"{args.users} engineers; fake Jira in its own process on {args.peer_server}"
          f"{'; floors on one CPU' if args.floor_cpu is not None else ''}"
          f"{f'; fake Jira on CPU {peer_cpu}' if peer_cpu is not None else ''}"
          f"{''.join(f'; {name}={value}' for name, value in given.items())}")
    with fresh_database(args.postgres_url) as database_url, \
            JiraProcess(args.peer_server) as jira:
        if peer_cpu is not None:
            pin_process(jira.pid, peer_cpu)
        service = start_service(database_url, jira, SETTINGS | given)
        durable = DurableFloor(database_url, jira, args.users, args.floor_cpu)
        try:
            runs = run_all(args, service, jira, durable)
            automation = [call for run in runs[0] for call in run.calls]
            rows = [counted("Automation-driven dispatch", automation,
                            args.triggers * len(runs[0]), goal="2"),
                    webhook_calls(service, jira, args.timeout),
                    *fallback_calls(service, jira, args.timeout),
                    dry_run_calls(service, jira, args.timeout)]
        finally:
            durable.stop()
            service.kill()
        report(engine, *runs)
        rows += notification_calls(database_url, jira, args.timeout)
        print_table(rows)


if __name__ == "__main__":
    main()
