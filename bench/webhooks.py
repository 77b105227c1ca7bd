"""A flood of signed Jira webhook deliveries: ``jira:issue_created`` deliveries a second taken
by a real service process, next to its floor, a bare falcon + waitress app that does one INSERT
per delivery; then the checks that nothing was lost and nothing started twice.

The product is a real ``python -m ticket_dispatcher serve --insecure-no-auth`` process
(tests/process.py's ``Dispatcher`` through ``e2e_dispatch.start_service``: trigger rate limit
off, log level WARNING, its default ``[http]`` settings, so 8 waitress threads) with one
webhook secret (``TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS``), on a temporary SQLite file or,
with ``--postgres-url``, a throw-away PostgreSQL schema (bench/databases.py). Its Jira is
tests/peer.py's fake in a process of its own (``python bench/floors.py jira``), seeded as
``e2e_dispatch.py`` seeds it: 10 engineers and one active ordinary policy that assigns BENCH
issues carrying the auto-assign label round robin. Every delivered issue exists in that Jira,
P3, ``Todo``, unassigned and without the label, as a newly created issue is: its trigger reads
the issue, adds the label (the policy takes the issue only with it) and starts an execution
that assigns it and removes the label. So the triggers are processed: the intake is measured
with that processing running in the same process, as in production, and the process's CPU
during the flood includes it. ``--unmatched`` sends issues of a project no policy takes
instead: each trigger reads its issue and ends, no execution, so the intake is measured beside
the least processing a delivery has.

A delivery is what Jira Cloud sends for a created issue (the shape of tests/factories.py's
``jira_delivery``, with the rest of a real issue's fields: avatars, status category, watches,
votes, time tracking, the custom fields left empty, a description of about a kilobyte); its
size is printed. Each carries ``X-Atlassian-Webhook-Identifier`` (a UUID of its own) and
``X-Hub-Signature: sha256=<HMAC-SHA256 of the body under the secret>``. Bodies and signatures
are built before the clock starts.

The client is the same for both: ``--concurrency`` threads (default 8, the waitress thread
count, so no request waits in waitress's queue and neither server logs its "Task queue depth"
warning), each with one keep-alive ``http.client`` connection, taking the next delivery from a
shared list until none is left. A connection the server closed is opened again and the same
delivery sent again, as Jira retries (counted). Deliveries a second = deliveries over the time
from the first send to the last 2xx; p50 and p99 of each request's time from send to the end of
its answer; the server's CPU (``/proc/PID/stat``), the part of it its main thread spent
(waitress's loop, in both servers) and the bench's own CPU (the client) over the same span, per
delivery. waitress's loop spins while a channel holds response bytes that its task, holding the
channel's out-buffer lock, has not sent yet: every poll answers at once, and the loop takes the
GIL back from the task each time, so the task waits for the interpreter's switch interval. Once
it starts under a flood it tends to last, in the product and the floor alike: the loop column
shows it, and the summary says when it took more than half a server's CPU.

One product round, on a fresh database and a fresh ``serve``: ``WARM_UP`` deliveries, not
counted, whose work is left to end; then the flood of ``--deliveries`` (default 10,000); then
``--duplicates`` (default 1,000) of them sent again with the same identifier and body, each to
be answered 200 ``{"status": "duplicate"}``; then the wait until no trigger is pending or
processing and no execution is created or executing (its time and CPU are printed apart); then
the service is stopped and its database read: exactly one trigger of source
``jira_issue_created`` and one row of ``jira_webhook_deliveries`` per identifier sent, none
twice, every trigger completed, one succeeded execution and one ``PUT …/assignee`` Jira
accepted per issue. The Jira calls per delivery are printed.

One floor round, on a fresh database of the same engine: ``python bench/webhooks.py floor
DATABASE_URL`` in a process of its own, a falcon app on waitress with the service's waitress
adjustments (``server_limits(HttpConfig())``: the same thread count) and waitress's logging
quiet. Its one route reads the body and runs ONE ``INSERT`` of a row (the identifier, the
body's size, the time) into ``webhook_floor`` (an id, the identifier UNIQUE, as the
deliveries' table has it) on its waitress thread's own connection with the raw driver, and
answers 202 with the row's id as JSON. SQLite: the service's pragmas (WAL,
``synchronous=NORMAL``, its ``busy_timeout``; bench/floors.py's ``_sqlite_connection``),
autocommit, each INSERT under a process lock as the service's writers take turns
(``--concurrent-floor``: the INSERTs of every thread at once, which meet in sqlite3's sleeping
busy handler);
PostgreSQL: psycopg with ``autocommit``. The same warm-up, flood and check of the rows.

``--rounds`` (default 3) alternates product and floor rounds; the medians are compared. Goal:
the product's deliveries a second >= 0.8 of the floor's, nothing lost and nothing started twice.
``--split-cpus`` runs the product's and the floor's server on one CPU and the client's threads
and the fake Jira on the other: both servers under the same placement. The load average is
printed at the start and after each round. ``--py-spy OUT`` records the product's process
(``py-spy record -r 200 -f raw``, every thread, waiting or not; with ``--py-spy-gil`` only the
thread holding the GIL) for the first ``--py-spy-seconds`` of each product round's flood into
``OUT.product.N.txt``, and the floor's into ``OUT.floor.N.txt``; py-spy pauses the process at
each sample, so a profiled run's figures are not comparable with an unprofiled one's.

    python bench/webhooks.py [--deliveries 10000] [--duplicates 1000] [--concurrency 8]
                             [--rounds 3] [--postgres-url URL] [--unmatched]
                             [--concurrent-floor] [--split-cpus] [--timeout 900]
                             [--py-spy OUT [--py-spy-seconds 15] [--py-spy-gil]]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from databases import fresh_database  # also puts the repository root on sys.path
from e2e_dispatch import PROJECT, SETTINGS, new_issues, problems, recipe, seed, start_service
from floors import (
    ROOT,
    JiraProcess,
    _sqlite_connection,
    cpu_seconds,
    median,
    pin_process,
    split_cpus,
    stop,
)
from latency import percentile

from tests.process import BASE, Dispatcher
from ticket_dispatcher.domain.webhooks import CREATED_SOURCE
from ticket_dispatcher.http.webhooks import IDENTIFIER_HEADER, SIGNATURE_HEADER
from ticket_dispatcher.store.connect import open_database
from ticket_dispatcher.store.database import bind, unit_of_work
from ticket_dispatcher.store.models import ExecutionRow, TriggerRow, WebhookDeliveryRow

WEBHOOKS_PATH = f"{BASE}/jira/webhooks"
SECRET = "bench-webhook-secret-0123456789abcdef0123456789abcdef"
GOAL = 0.8
WARM_UP = 200
USERS = 10
UNMATCHED_PROJECT = "OTHER"  # --unmatched: a project the policy does not take
POLL_SECONDS = 0.5
PY_SPY = ROOT / ".venv" / "bin" / "py-spy"


# -- the deliveries -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    identifier: str
    issue_key: str
    body: bytes
    headers: dict[str, str]


def jira_user(account_id: str, email: str) -> dict:
    """A user as Jira Cloud's webhooks write one."""
    avatar = f"https://avatar-management.example/{account_id}"
    return {"self": f"https://jira.example/rest/api/2/user?accountId={account_id}",
            "accountId": account_id, "emailAddress": email,
            "avatarUrls": {size: f"{avatar}/{size}.png"
                           for size in ("48x48", "24x24", "16x16", "32x32")},
            "displayName": email.split("@")[0].replace(".", " ").title(), "active": True,
            "timeZone": "Asia/Shanghai", "accountType": "atlassian"}


def created_body(key: str, number: int, timestamp: int) -> dict:
    """A ``jira:issue_created`` delivery of issue ``key`` as Jira Cloud sends it: P3,
    ``Todo``, unassigned, no label."""
    site, issue_id = "https://jira.example", str(100_000 + number)
    reporter = jira_user(f"5b10ac8d82e05b22cc7d{number % 97:04d}",
                         f"reporter.{number % 97}@example.com")
    created = datetime.fromtimestamp(timestamp / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000")
    description = (
        f"Customer order {number} could not be paid: the payment page answered 502 after the "
        "card details were submitted.\n\nSteps to reproduce:\n# Open the checkout with a cart "
        "of two items\n# Choose card payment and submit\n# The page shows \"Something went "
        "wrong\" after about 30 seconds\n\nExpected: the order is paid and the confirmation "
        "page shows.\nActual: 502 Bad Gateway from the payment gateway; the order stays in "
        "PENDING_PAYMENT.\n\nEnvironment: production, region ap-southeast-1, app version "
        f"7.{number % 40}.3, Chrome 131 on macOS.\n\nRequest id: "
        f"{uuid.uuid5(uuid.NAMESPACE_URL, key)}\nFirst seen 08:12 UTC, about 40 orders an hour "
        "affected since. Logs and a HAR file are attached to the linked incident; the on-call "
        "of payments has been told in the channel."
    )
    fields = {
        "statuscategorychangedate": created,
        "issuetype": {"self": f"{site}/rest/api/2/issuetype/10004", "id": "10004",
                      "description": "A problem or error.",
                      "iconUrl": f"{site}/rest/api/2/universal_avatar/view/type/issuetype/"
                                 "avatar/10303?size=medium",
                      "name": "Bug", "subtask": False, "avatarId": 10303,
                      "hierarchyLevel": 0},
        "timespent": None,
        "project": {"self": f"{site}/rest/api/2/project/10000", "id": "10000",
                    "key": key.split("-")[0], "name": "Bench", "projectTypeKey": "software",
                    "simplified": False,
                    "avatarUrls": {size: f"{site}/rest/api/2/universal_avatar/view/type/"
                                         f"project/avatar/10402?size={size}"
                                   for size in ("48x48", "24x24", "16x16", "32x32")}},
        "fixVersions": [], "aggregatetimespent": None, "resolution": None,
        "resolutiondate": None, "workratio": -1, "lastViewed": None,
        "watches": {"self": f"{site}/rest/api/2/issue/{key}/watchers", "watchCount": 1,
                    "isWatching": True},
        "created": created, "updated": created,
        "priority": {"self": f"{site}/rest/api/2/priority/3",
                     "iconUrl": f"{site}/images/icons/priorities/medium.svg", "name": "P3",
                     "id": "3"},
        "labels": [], "timeestimate": None, "aggregatetimeoriginalestimate": None,
        "versions": [], "issuelinks": [], "assignee": None,
        "status": {"self": f"{site}/rest/api/2/status/10000", "description": "",
                   "iconUrl": f"{site}/", "name": "Todo", "id": "10000",
                   "statusCategory": {"self": f"{site}/rest/api/2/statuscategory/2", "id": 2,
                                      "key": "new", "colorName": "blue-gray",
                                      "name": "To Do"}},
        "components": [{"self": f"{site}/rest/api/2/component/10021", "id": "10021",
                        "name": "payments", "description": "Checkout and payment pages"}],
        "timeoriginalestimate": None, "description": description, "timetracking": {},
        "security": None, "attachment": [], "aggregatetimeestimate": None,
        "summary": f"Payment page answers 502 for order {number}",
        "creator": reporter, "subtasks": [], "reporter": reporter,
        "aggregateprogress": {"progress": 0, "total": 0}, "environment": None,
        "duedate": None, "progress": {"progress": 0, "total": 0},
        "votes": {"self": f"{site}/rest/api/2/issue/{key}/votes", "votes": 0,
                  "hasVoted": False},
        # custom fields, as a site with a few apps has them; empty on a new issue
        **{f"customfield_{n}": None for n in (10000, 10001, 10010, 10014, 10015, 10016,
                                              10019, 10020, 10021, 10022, 10023, 10024,
                                              10025, 10026, 10027, 10028, 10029, 10030,
                                              10031, 10053, 10076)},
        "customfield_10017": "0|i000" + f"{number:05d}:",  # rank
        "customfield_10018": {"hasEpicLinkFieldDependency": False, "showField": False,
                              "nonEditableReason": {"reason": "PLUGIN_LICENSE_ERROR",
                                                    "message": "The Parent Link is only "
                                                               "available to Jira Premium "
                                                               "users."}},
    }
    return {"timestamp": timestamp, "webhookEvent": "jira:issue_created",
            "issue_event_type_name": "issue_created", "user": reporter,
            "issue": {"id": issue_id, "self": f"{site}/rest/api/2/{issue_id}", "key": key,
                      "fields": fields}}


def deliveries(keys: list[str], first_number: int) -> list[Delivery]:
    """One signed delivery per key, each with an identifier of its own."""
    made = []
    now_ms = int(time.time() * 1000)
    for offset, key in enumerate(keys):
        body = json.dumps(created_body(key, first_number + offset, now_ms + offset),
                          separators=(",", ":")).encode()
        identifier = str(uuid.uuid4())
        digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        made.append(Delivery(identifier, key, body, {
            "Content-Type": "application/json; charset=UTF-8",
            "User-Agent": "Atlassian Webhook HTTP Client",
            IDENTIFIER_HEADER: identifier,
            SIGNATURE_HEADER: f"sha256={digest}"}))
    return made


# -- the client -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    sent: float  # perf_counter
    answered: float
    status: int
    outcome: str  # the answer's "status": accepted, duplicate, ...


@dataclass(frozen=True)
class Flood:
    count: int
    rate: float  # deliveries a second, first send to last 2xx
    p50_ms: float
    p99_ms: float
    server_cpu_ms: float  # per delivery
    loop_cpu_ms: float  # of which the server's main thread: waitress's loop
    client_cpu_ms: float
    answers: Counter  # (HTTP status, outcome) -> deliveries
    resent: int  # sent again on a connection the server closed

    def line(self) -> str:
        shown = ", ".join(f"{status} {outcome} {n}"
                          for (status, outcome), n in sorted(self.answers.items()))
        again = f", {self.resent} sent again" if self.resent else ""
        return (f"{self.rate:8.1f} deliveries/s  p50 {self.p50_ms:5.1f} ms  p99 "
                f"{self.p99_ms:6.1f} ms  server CPU {self.server_cpu_ms:5.2f} ms/delivery (loop "
                f"{self.loop_cpu_ms:4.2f})  client CPU {self.client_cpu_ms:4.2f}  ({shown}"
                f"{again})")


def main_thread_cpu(pid: int) -> float:
    """User + system CPU of the process's main thread, where both servers run waitress's
    loop: it spins (polls again at once) while a channel holds unsent bytes whose task still
    holds the channel's out-buffer lock, each poll taking the GIL back from that task."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def send(connection: http.client.HTTPConnection, delivery: Delivery) -> tuple[Answer, int]:
    """POST one delivery; again on a fresh connection when the server closed this one."""
    for attempt in range(3):
        sent = time.perf_counter()
        try:
            connection.request("POST", WEBHOOKS_PATH, body=delivery.body,
                               headers=delivery.headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            connection.close()  # the next request connects again
            if attempt == 2:
                raise
            continue
        answered = time.perf_counter()
        try:
            outcome = str(json.loads(payload).get("status", "?"))
        except (ValueError, AttributeError):
            outcome = "?"
        return Answer(sent, answered, response.status, outcome), attempt
    raise AssertionError("unreachable")


def flood(port: int, pid: int, batch: list[Delivery], concurrency: int,
          cpu: int | None = None) -> Flood:
    """Every delivery of ``batch`` from ``concurrency`` keep-alive connections, their threads
    on CPU ``cpu`` when one is given."""
    pending = iter(batch)
    turn = threading.Lock()
    answers: list[Answer] = []
    resent = [0]
    ready = threading.Barrier(concurrency + 1)

    def work() -> None:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.connect()
        mine, again = [], 0
        ready.wait()
        while True:
            with turn:
                delivery = next(pending, None)
            if delivery is None:
                break
            answer, retries = send(connection, delivery)
            mine.append(answer)
            again += retries
        connection.close()
        with turn:
            answers.extend(mine)
            resent[0] += again

    threads = [threading.Thread(target=work, name=f"client-{n}") for n in range(concurrency)]
    for thread in threads:
        thread.start()
    ready.wait()  # every connection open
    server_cpu, loop_cpu = cpu_seconds(pid), main_thread_cpu(pid)
    client_cpu = time.process_time()
    for thread in threads:
        thread.join()
    client_cpu = time.process_time() - client_cpu
    server_cpu, loop_cpu = cpu_seconds(pid) - server_cpu, main_thread_cpu(pid) - loop_cpu
    if len(answers) != len(batch):
        raise SystemExit(f"{len(batch) - len(answers)} deliveries got no answer")
    taken = [a for a in answers if 200 <= a.status < 300]
    first = min(a.sent for a in answers)
    last = max((a.answered for a in taken), default=first)
    latency = [1000 * (a.answered - a.sent) for a in answers]
    n = len(batch)
    return Flood(count=n, rate=len(taken) / max(last - first, 1e-9),
                 p50_ms=percentile(latency, 50), p99_ms=percentile(latency, 99),
                 server_cpu_ms=1000 * server_cpu / n, loop_cpu_ms=1000 * loop_cpu / n,
                 client_cpu_ms=1000 * client_cpu / n,
                 answers=Counter((a.status, a.outcome) for a in answers), resent=resent[0])


# -- profiling ------------------------------------------------------------------------------------


@contextmanager
def profiled(pid: int, out: str | None, what: str, args: argparse.Namespace) -> Iterator[None]:
    """``py-spy record`` of ``pid`` while inside (at most ``--py-spy-seconds``), into
    ``out``."""
    if out is None:
        yield
        return
    seconds = args.py_spy_seconds
    recorder = subprocess.Popen([str(PY_SPY), "record", "-r", "200", "-f", "raw", "-d",
                                 str(int(seconds)), "-p", str(pid), "-o", out,
                                 *(["--gil"] if args.py_spy_gil else [])],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # attached before the first send
    try:
        yield
    finally:
        try:
            _, errors = recorder.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            stop(recorder)
            errors = ""
        print(f"        py-spy of the {what}: {out}"
              f"{'' if recorder.returncode == 0 else ' FAILED: ' + errors.strip()[-300:]}")


# -- the product ----------------------------------------------------------------------------------


@dataclass
class Round:
    flood: Flood
    notes: list[str] = field(default_factory=list)  # drain, duplicates, Jira calls
    problems: list[str] = field(default_factory=list)


def wait_drained(service: Dispatcher, timeout: float) -> float:
    """Until no trigger is pending or processing and no execution created or executing; the
    seconds that took."""
    started = time.monotonic()
    while True:
        busy = any(service.call("GET", "/dispatch/triggers",
                                params={"status": status, "limit": 1})["items"]
                   for status in ("pending", "processing"))
        busy = busy or any(service.call("GET", "/dispatch/executions",
                                        params={"status": status, "limit": 1})["total"]
                           for status in ("created", "executing"))
        if not busy:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise SystemExit(f"the service still had work after {timeout:g} s; its log ends:\n"
                             f"{service.log()[-3000:]}")
        time.sleep(POLL_SECONDS)


@contextmanager
def stored(database_url: str) -> Iterator[None]:
    db = open_database(database_url, max_connections=2)
    bind(db)
    try:
        with unit_of_work(db):
            yield
    finally:
        db.close_all()


def stored_problems(database_url: str, sent: list[Delivery]) -> tuple[list[str], list[dict]]:
    """What the database says went wrong with ``sent`` (every delivery of the round, warm-up
    included), and the executions of their issues."""
    found = []
    with stored(database_url):
        triggers = list(TriggerRow.select(TriggerRow.input_json, TriggerRow.status)
                        .where(TriggerRow.source == CREATED_SOURCE).dicts())
        taken = WebhookDeliveryRow.select().count()
        executions = list(ExecutionRow.select(ExecutionRow.issue_key, ExecutionRow.status)
                          .dicts())
    by_identifier = Counter((t["input_json"] if isinstance(t["input_json"], dict)
                             else json.loads(t["input_json"])).get("webhook_delivery")
                            for t in triggers)
    identifiers = {d.identifier for d in sent}
    if len(triggers) != len(sent):
        found.append(f"{len(triggers)} triggers of source {CREATED_SOURCE}, {len(sent)} "
                     "deliveries sent")
    twice = [i for i, n in by_identifier.items() if n > 1]
    lost = identifiers - set(by_identifier)
    strangers = set(by_identifier) - identifiers
    for what, items in (("identifiers with more than one trigger", twice),
                        ("identifiers without a trigger", lost),
                        ("triggers of no identifier sent", strangers)):
        if items:
            found.append(f"{len(items)} {what} (e.g. {sorted(map(str, items))[:3]})")
    if taken != len(sent):
        found.append(f"{taken} rows in jira_webhook_deliveries, {len(sent)} deliveries sent")
    statuses = Counter(t["status"] for t in triggers)
    if set(statuses) != {"completed"}:
        found.append(f"triggers by status: {dict(statuses)}")
    return found, executions


def product_round(args: argparse.Namespace, jira: JiraProcess, number: int) -> Round:
    first, project = number * 100_000, UNMATCHED_PROJECT if args.unmatched else PROJECT
    warm_keys = new_issues(jira, project, first, WARM_UP, labels=())
    keys = new_issues(jira, project, first + WARM_UP, args.deliveries, labels=())
    warm, batch = deliveries(warm_keys, first), deliveries(keys, first + WARM_UP)
    with fresh_database(args.postgres_url) as database_url:
        placed = {"CPU_AFFINITY": str(args.server_cpu)} if args.split_cpus else {}
        service = start_service(database_url, jira,
                                SETTINGS | placed | {"JIRA_WEBHOOK_SECRETS": SECRET})
        try:
            seed(service, jira, USERS)
            flood(service.port, service.process.pid, warm, args.concurrency, args.client_cpu)
            wait_drained(service, args.timeout)
            _, since = jira.calls()
            out = args.py_spy and f"{args.py_spy}.product.{number}.txt"
            with profiled(service.process.pid, out, "product", args):
                result = Round(flood(service.port, service.process.pid, batch,
                                     args.concurrency, args.client_cpu))
            again = flood(service.port, service.process.pid, batch[:args.duplicates],
                          args.concurrency, args.client_cpu)
            cpu = cpu_seconds(service.process.pid)
            seconds = wait_drained(service, args.timeout)
            cpu = cpu_seconds(service.process.pid) - cpu
            calls, _ = jira.calls(since)
            logged = service.log_problems()
        finally:
            service.kill()
        result.notes.append(f"then {seconds:.1f} s to end the triggers' work, "
                            f"+{1000 * cpu / len(batch):.2f} ms server CPU/delivery")
        shown = ", ".join(f"{status} {outcome} {n}"
                          for (status, outcome), n in sorted(again.answers.items()))
        result.notes.append(f"{args.duplicates} sent again: {shown}; {again.rate:.0f}/s, "
                            f"p50 {again.p50_ms:.1f} ms")
        result.notes.append(f"Jira calls per delivery: {recipe(calls, len(keys))}")
        if result.flood.answers != Counter({(202, "accepted"): len(batch)}):
            result.problems.append(f"flood answers {dict(result.flood.answers)}")
        if again.answers != Counter({(200, "duplicate"): args.duplicates}):
            result.problems.append(f"repeats answered {dict(again.answers)}")
        found, executions = stored_problems(database_url, warm + batch)
        result.problems += found
        if args.unmatched:
            if executions:
                result.problems.append(f"{len(executions)} executions, where no policy takes "
                                       "the issues")
        else:
            ended = [e for e in executions if e["issue_key"] in set(keys)]
            result.problems += [f"{key}: {problem}" for key, problem
                                in list(problems(keys, ended, calls).items())[:5]]
        result.problems += [f"service log: {line.strip()[:200]}" for line in logged[:3]]
    return result


# -- the floor ------------------------------------------------------------------------------------


FLOOR_TABLE = {
    "sqlite": "CREATE TABLE webhook_floor (id INTEGER PRIMARY KEY, identifier TEXT NOT NULL"
              " UNIQUE, body_bytes INTEGER NOT NULL, received_at TEXT NOT NULL)",
    "postgres": "CREATE TABLE webhook_floor (id BIGSERIAL PRIMARY KEY, identifier TEXT NOT NULL"
                " UNIQUE, body_bytes INTEGER NOT NULL, received_at TIMESTAMP NOT NULL)",
}
FLOOR_INSERT = ("INSERT INTO webhook_floor (identifier, body_bytes, received_at)"
                " VALUES (?, ?, ?) RETURNING id")


def floor_connection(database_url: str) -> Any:
    """A connection of its own that commits each statement: the service's SQLite settings, or
    psycopg in autocommit."""
    if database_url.startswith("sqlite:"):
        return _sqlite_connection(database_url.removeprefix("sqlite:///"))
    import psycopg

    return psycopg.connect(database_url, autocommit=True)


class FloorInsert:
    """One INSERT per call, on this waitress thread's own connection."""

    def __init__(self, database_url: str, concurrent: bool):
        self._url = database_url
        self._postgres = not database_url.startswith("sqlite:")
        self._sql = FLOOR_INSERT.replace("?", "%s") if self._postgres else FLOOR_INSERT
        self._local = threading.local()
        # SQLite: one writer at a time in this process, as the service's writers take turns.
        self._turn = nullcontext() if concurrent or self._postgres else threading.Lock()

    def __call__(self, identifier: str, body_bytes: int) -> int:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = floor_connection(self._url)
        now = datetime.now(UTC).replace(tzinfo=None)
        received = now if self._postgres else now.strftime("%Y-%m-%d %H:%M:%S.%f")
        with self._turn:
            cursor = connection.cursor()
            try:
                cursor.execute(self._sql, (identifier, body_bytes, received))
                return cursor.fetchone()[0]
            finally:
                cursor.close()


def floor_app(database_url: str, concurrent: bool) -> Callable:
    import falcon

    insert = FloorInsert(database_url, concurrent)

    class Webhooks:
        def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
            body = req.bounded_stream.read()
            row = insert(req.get_header(IDENTIFIER_HEADER) or "", len(body))
            resp.status = falcon.HTTP_202
            resp.media = {"status": "accepted", "trigger_ids": [row]}

    app = falcon.App()
    app.add_route(WEBHOOKS_PATH, Webhooks())
    return app


def serve_floor(database_url: str, concurrent: bool) -> None:
    import waitress

    from ticket_dispatcher.config import HttpConfig
    from ticket_dispatcher.service import server_limits

    logging.getLogger("waitress").setLevel(logging.ERROR)
    server = waitress.create_server(floor_app(database_url, concurrent), host="127.0.0.1",
                                    port=0, **server_limits(HttpConfig()))
    print(f"serving on {server.effective_port}", flush=True)
    server.run()


@contextmanager
def floor_process(database_url: str, concurrent: bool) -> Iterator[tuple[int, int]]:
    """The floor in a process of its own on a new ``webhook_floor`` table: (pid, port)."""
    connection = floor_connection(database_url)
    try:
        engine = "sqlite" if database_url.startswith("sqlite:") else "postgres"
        connection.execute(FLOOR_TABLE[engine])
    finally:
        connection.close()
    process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "floor",
                                database_url, *(["--concurrent"] if concurrent else [])],
                               stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = process.stdout.readline()
        if not line.startswith("serving on "):
            raise SystemExit(f"the floor did not start (said {line!r})")
        yield process.pid, int(line.split()[-1])
    finally:
        stop(process)


def floor_round(args: argparse.Namespace, number: int) -> Round:
    first = number * 100_000 + 50_000
    warm = deliveries([f"{PROJECT}-{n}" for n in range(first, first + WARM_UP)], first)
    batch = deliveries([f"{PROJECT}-{n}" for n in range(first + WARM_UP,
                                                         first + WARM_UP + args.deliveries)],
                       first + WARM_UP)
    with fresh_database(args.postgres_url) as database_url:
        with floor_process(database_url, args.concurrent_floor) as (pid, port):
            if args.split_cpus:
                pin_process(pid, args.server_cpu)
            flood(port, pid, warm, args.concurrency, args.client_cpu)
            out = args.py_spy and f"{args.py_spy}.floor.{number}.txt"
            with profiled(pid, out, "floor", args):
                result = Round(flood(port, pid, batch, args.concurrency, args.client_cpu))
        connection = floor_connection(database_url)
        try:
            rows = connection.execute("SELECT identifier FROM webhook_floor").fetchall()
        finally:
            connection.close()
    if result.flood.answers != Counter({(202, "accepted"): len(batch)}):
        result.problems.append(f"flood answers {dict(result.flood.answers)}")
    if {row[0] for row in rows} != {d.identifier for d in warm + batch} \
            or len(rows) != len(warm) + len(batch):
        result.problems.append(f"{len(rows)} rows for {len(warm) + len(batch)} deliveries")
    return result


# -- the bench ------------------------------------------------------------------------------------


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def report(engine: str, runs: dict[str, list[Round]]) -> None:
    floods = {name: [r.flood for r in rounds] for name, rounds in runs.items()}
    rate = {name: median(f.rate for f in done) for name, done in floods.items()}
    ratio = rate["product"] / rate["floor"]
    print(f"\nmedians over {len(floods['product'])} round(s), {engine}:")
    print(f"  {'setup':8}{'deliveries/s':>13}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'server CPU ms/delivery':>24}{'of it loop':>12}{'client CPU':>12}"
          f"{'product/floor':>15}")
    for name, done in floods.items():
        shown = f"{ratio:15.3f}" if name == "product" else f"{1:15.3f}"
        print(f"  {name:8}{rate[name]:13.1f}{median(f.p50_ms for f in done):9.1f}"
              f"{median(f.p99_ms for f in done):9.1f}"
              f"{median(f.server_cpu_ms for f in done):24.2f}"
              f"{median(f.loop_cpu_ms for f in done):12.2f}"
              f"{median(f.client_cpu_ms for f in done):12.2f}{shown}")
    pairs = ", ".join(f"{p.rate / f.rate:.3f}" for p, f in zip(floods["product"],
                                                                floods["floor"], strict=True))
    wrong = sum(len(r.problems) for rounds in runs.values() for r in rounds)
    print(f"  ratio product/floor {ratio:.3f} (goal >= {GOAL}: "
          f"{'met' if ratio >= GOAL else 'not met'}); round by round: {pairs}")
    for name, done in floods.items():
        loop, cpu = median(f.loop_cpu_ms for f in done), median(f.server_cpu_ms for f in done)
        if loop > cpu / 2:
            print(f"  the {name}'s waitress loop took {loop:.2f} of its {cpu:.2f} ms of CPU a "
                  "delivery: it spun, and its rate is the spin's more than its work's")
    print(f"  nothing lost, nothing started twice: {'yes' if not wrong else 'NO'}")


def placement(args: argparse.Namespace) -> str:
    if not args.split_cpus:
        return ""
    return (f" Servers on CPU {args.server_cpu}; the client and the fake Jira on CPU "
            f"{args.client_cpu}.")


def run(args: argparse.Namespace) -> None:
    engine = "PostgreSQL" if args.postgres_url else "SQLite"
    sample = deliveries([f"{PROJECT}-{n}" for n in range(1, 101)], 1)
    sizes = [len(d.body) for d in sample]
    processing = ("issues no policy takes: each trigger reads its issue and ends"
                  if args.unmatched else
                  "each issue known to the fake Jira, labelled, then assigned")
    floor_inserts = ("concurrent" if args.concurrent_floor or args.postgres_url
                     else "one at a time (a process lock)")
    print(f"Jira webhook flood, {engine}: {args.deliveries} signed jira:issue_created "
          f"deliveries a round (bodies {statistics.mean(sizes):.0f} bytes on average, "
          f"{min(sizes)} to {max(sizes)}) from {args.concurrency} keep-alive connections, "
          f"{WARM_UP} warm-up ones first, then {args.duplicates} sent again; {args.rounds} "
          f"round(s), product and floor alternated, each on a fresh database. The product's "
          f"triggers are processed while it takes the flood ({processing}). Floor INSERTs "
          f"{floor_inserts}.{placement(args)} Load average {load_average()}", flush=True)
    runs: dict[str, list[Round]] = {"product": [], "floor": []}
    with JiraProcess() as jira:
        if args.split_cpus:
            pin_process(jira.pid, args.client_cpu)
        for number in range(1, args.rounds + 1):
            runs["product"].append(product_round(args, jira, number))
            runs["floor"].append(floor_round(args, number))
            for name in ("product", "floor"):
                done = runs[name][-1]
                print(f"round {number}  {name:8}{done.flood.line()}", flush=True)
                for note in done.notes:
                    print(f"        {note}")
                for problem in done.problems:
                    print(f"        NOT OK {problem}")
            print(f"        load average {load_average()}", flush=True)
    report(engine, runs)


def main() -> None:
    if sys.argv[1:2] == ["floor"]:
        floor = argparse.ArgumentParser(description="serve the webhook floor")
        floor.add_argument("database_url")
        floor.add_argument("--concurrent", action="store_true")
        given = floor.parse_args(sys.argv[2:])
        serve_floor(given.database_url, given.concurrent)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=10_000,
                        help="deliveries of one round's flood")
    parser.add_argument("--duplicates", type=int, default=1_000,
                        help="deliveries of the flood sent again, to be answered duplicate")
    parser.add_argument("--concurrency", type=int, default=8,
                        help="client connections (threads), one keep-alive connection each")
    parser.add_argument("--rounds", type=int, default=3,
                        help="product and floor rounds, alternated; the medians are compared")
    parser.add_argument("--postgres-url", help="run both on PostgreSQL (a throw-away schema "
                                               "each) instead of a temporary SQLite file each")
    parser.add_argument("--concurrent-floor", action="store_true",
                        help="SQLite: the floor's INSERTs from every thread at once")
    parser.add_argument("--split-cpus", action="store_true",
                        help="the product's and the floor's server on one CPU, the client and "
                             "the fake Jira on the other")
    parser.add_argument("--unmatched", action="store_true",
                        help=f"deliveries of issues of {UNMATCHED_PROJECT}, which no policy "
                             "takes: each trigger reads its issue and ends")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds the product may take to end its triggers' work")
    parser.add_argument("--py-spy", metavar="OUT",
                        help="record the product and the floor during each flood")
    parser.add_argument("--py-spy-seconds", type=float, default=15)
    parser.add_argument("--py-spy-gil", action="store_true",
                        help="sample only the thread holding the GIL (where the CPU goes); "
                             "without it every thread, waiting or not")
    args = parser.parse_args()
    if args.duplicates > args.deliveries:
        parser.error("--duplicates cannot exceed --deliveries")
    args.server_cpu, args.client_cpu = split_cpus() if args.split_cpus else (None, None)
    run(args)


if __name__ == "__main__":
    main()
