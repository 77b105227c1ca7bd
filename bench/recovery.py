"""Recovery after a kill -9: seconds until N non-terminal executions are back in the pool.

How long a restarted ``serve`` takes to put every non-terminal execution back in its pool, and
the memory that takes. Goal: 10,000 executions in under 1 s on SQLite and on PostgreSQL;
100,000 in under 5 s and under 200 MB resident.

After a ``kill -9`` the store holds what was running: executions parked in an ACK wait
(``executing`` with a ``wake_at``), ``created`` ones that were still queued, and the few
``executing`` ones the dead process was running, their leases still its own. At the next
start, boot recovery (actors/supervisor.py) gives those leases back, reads every ``created`` or
``executing`` execution and tells the pool to queue it or, when its ``wake_at`` is still ahead,
to park it on a timer. ``Runtime.start`` then waits until the pool has taken in every one of
those messages (its inbox is first in, first out); only then does ``/readyz`` report
``recovery`` true and the service log ``serving on``. That point is "back in the pool".

For each N of ``--counts`` (default 10,000 then 100,000), on a fresh database (a temporary
SQLite file, or a throw-away PostgreSQL schema with ``--postgres-url``):

1. a real ``python -m ticket_dispatcher serve --sandbox`` migrates the database, seeds the
   example policies and runs one urgent assignment notification (GTOC-1000, P0) until it parks
   in its first page's ACK wait; then it stops. That execution's rows (its trigger, its two
   rule executions with every action's context, its dispatch context) are the template;
2. the bench writes N non-terminal executions in all, each with its completed trigger, its
   rule executions and its context, with multi-row INSERTs through the store's models:
   - ``--created`` (default 10) ``created`` executions, built by the domain's fan-out and
     written by the store's own creation (the template's policy, an issue like its issue);
   - ``--held`` (default 10, one per execution slot) copies of the template ``executing``
     without a ``wake_at``, under a live lease of a dead owner: steps under way at the kill;
   - the rest: copies of the parked template (the template itself among them), with
     ``wake_at`` spread over the hour that starts one hour later, so that none wakes while
     the bench measures and the sandbox is not flooded with polls.
   Every copy has its own issue key (GTOC-100000...), lock key, ids and times; the action
   contexts are the template's as they are (card and call ids repeat). Only the created and
   held executions are due at boot: they start at once, find no such issue in the sandbox Jira
   and park for a 5 s retry, as a real restart's first steps run beside its recovery;
3. a second ``serve --sandbox`` starts on that database (log level INFO, 10 execution slots)
   and the bench polls ``/readyz`` every 20 ms until it answers 200, then kills it with
   SIGKILL. ``--boots K`` boots K servers in turn on the same database, each after the kill of
   the one before (the mix stays N non-terminal executions: the due ones are parked for their
   retry or held by the killed boot). At 100,000, recovery times on a shared 2-core machine
   varied by up to 2x from one run to the next: judge the goal on ``--boots 3``.

Printed for each N and boot, from the server's log (``ts``, millisecond precision) and
``/proc``:

- ``recovery``: from the ``sandbox loaded`` line (the start-up before recovery is over: the
  migrations checked, the HTTP port bound) to ``serving on`` (written once the pool took in the
  last recovered execution); this is the figure the goal judges. Split into the supervisor's
  part (to ``boot recovery done``: leases given back, executions read, the pool told) and the
  pool's (taking in what is still in its inbox then: a queue entry or a timer each);
- ``from spawn``: from the process's start (before the interpreter's imports) to ``serving on``;
- ``logged``: the executions ``boot recovery done`` says it recovered (must be N), and the
  leases it gave back (must be ``--held`` at the first boot);
- ``in pool``: from ``/admin/actors`` right after readiness, parked + queued + running +
  retrying executions (must be N), and the scheduler's timers;
- ``peak RSS``: the server's ``VmHWM`` (``/proc/PID/status``) right after readiness, in MB
  (10^6 bytes, as the goal says);
- the goal, met or missed, on the median recovery of the boots and their highest peak.

``--profile PATH`` runs the first boot of each N under ``py-spy record --gil`` (raw format,
200 Hz, without pausing the server; ``PATH-ENGINE-N.txt``) and prints where the samples went:
by thread, and inside the supervisor and the pool by function, inclusive and self. Only the
thread holding the GIL is sampled, since the threads take turns on one core's worth of
Python. A profiled boot is slower: its timings are not the figures.

    python bench/recovery.py [--counts 10000 100000] [--boots 1] [--created 10] [--held 10]
                             [--postgres-url URL] [--profile PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import peewee
import requests
from databases import fresh_database  # also puts the repository root on sys.path

from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.fanout import new_execution
from ticket_dispatcher.domain.model import Issue, JiraUser
from ticket_dispatcher.store import Store, write_lock
from ticket_dispatcher.store.connect import is_postgres
from ticket_dispatcher.store.database import unit_of_work, without_statement_timeouts
from ticket_dispatcher.store.models import (
    ContextRow,
    ExecutionRow,
    RuleExecutionRow,
    TriggerRow,
)
from ticket_dispatcher.timeutil import parse_rfc3339

ROOT = Path(__file__).resolve().parents[1]
API = "/api/v1/ticketmanager"
SLOTS = 10
SOURCE = "jira_assignment_assignee"  # the assignee notification's reserved source
TEMPLATE_KEY = "GTOC-1000"
TEMPLATE_ISSUE = {"key": TEMPLATE_KEY, "summary": "bench: payment gateway down", "priority": "P0",
                  "status": "Todo", "labels": ["notify-assignee"],
                  "assignee_email": "alice@example.com"}
KEY_BASE = 100_000  # seeded issue keys: GTOC-100000 and up
DEAD_OWNER = "killed-host:4242:bench"  # the lease owner of the process that was killed
PARKED_FROM, PARKED_SPAN = timedelta(hours=1), timedelta(hours=1)  # wake_at: [1 h, 2 h) ahead
CREATED_SPAN = timedelta(hours=1)  # the seeded executions were created over the last hour
CHUNK = 500  # rows per INSERT statement
READY_POLL = 0.02  # seconds between two /readyz polls
TIMEOUT = 120  # seconds a server may take to become ready
LOG_EVENTS = ("sandbox loaded", "boot recovery done", "serving on")
PY_SPY = ("record", "--format", "raw", "--rate", "200", "--gil", "--function", "--threads",
          "--nonblocking")
PROFILED_THREADS = ("Supervisor", "ExecutionPool")  # the two that do the recovery
LOOP_FRAMES = re.compile(r"threading\.py|pykka/|TrackedActor\.on_receive")  # every message's


# -- the server ---------------------------------------------------------------------------------


class Server:
    """``serve --sandbox`` in its own process, logging at INFO to a file; under ``py-spy``
    when ``profile`` names its output."""

    def __init__(self, database_url: str, log: Path, profile: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = dict(os.environ, TICKET_DISPATCHER_DATABASE_URL=database_url,
                   TICKET_DISPATCHER_LOG_LEVEL="INFO",
                   TICKET_DISPATCHER_EXECUTION_SLOTS=str(SLOTS))
        command = [sys.executable, "-m", "ticket_dispatcher", "serve", "--sandbox",
                   "--port", str(self.port)]
        if profile is not None:
            command = [py_spy(), *PY_SPY, "--output", str(profile), "--", *command]
        self.spawned = time.time()
        with log.open("w") as stderr:
            self.process = subprocess.Popen(command, env=env, cwd=ROOT, stderr=stderr,
                                            stdout=subprocess.DEVNULL)
        try:
            self.pid = self.process.pid if profile is None else child_of(self.process)
        except BaseException:
            self.process.kill()
            self.process.wait()
            raise

    def wait_ready(self) -> float:
        """Poll ``/readyz`` until 200; the wall-clock time it first did."""
        deadline = time.monotonic() + TIMEOUT
        with requests.Session() as session:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise SystemExit(f"the server exited with {self.process.returncode}:\n"
                                     f"{self.log.read_text()[-3000:]}")
                try:
                    if session.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                        return time.time()
                except requests.RequestException:
                    pass
                time.sleep(READY_POLL)
        raise SystemExit(f"the server was not ready after {TIMEOUT} s:\n"
                         f"{self.log.read_text()[-3000:]}")

    def peak_rss_mb(self) -> float:
        """``VmHWM``: the most memory the server has held resident so far, in MB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
        raise SystemExit("no VmHWM in /proc")

    def _records(self) -> Iterator[dict]:
        """The JSON log lines so far (py-spy's own lines are not JSON)."""
        for line in self.log.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record

    def events(self) -> dict[str, dict]:
        """The first log record of each of ``LOG_EVENTS`` (a message that starts with it:
        ``serving on`` names its URL)."""
        found: dict[str, dict] = {}
        for record in self._records():
            for event in LOG_EVENTS:
                if str(record.get("msg", "")).startswith(event):
                    found.setdefault(event, record)
        return found

    def levels(self) -> Counter:
        """Log lines by level so far."""
        return Counter(record.get("level", "?") for record in self._records())

    def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            try:
                os.kill(self.pid, how)
            except ProcessLookupError:
                pass
        try:
            self.process.wait(60)  # py-spy writes its profile once the server has exited
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    return found


def child_of(process: subprocess.Popen, timeout: float = 10) -> int:
    """The PID of the process ``process`` (py-spy) started: the server."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for children in Path(f"/proc/{process.pid}/task").glob("*/children"):
            pids = children.read_text().split()
            if pids:
                return int(pids[0])
        time.sleep(0.005)
    raise SystemExit("py-spy started no server")


# -- the template: one real parked notification ---------------------------------------------------


@dataclass(frozen=True)
class Template:
    """One parked execution's rows, as the store's models read them (Python values)."""

    trigger: dict
    execution: dict
    rules: list[dict]
    context: dict


def park_one(database_url: str, tmp: Path) -> None:
    """Migrate and seed the database, and park one urgent notification in its first page's
    ACK wait, with a real ``serve --sandbox``."""
    server = Server(database_url, tmp / "template.log")
    try:
        server.wait_ready()
        requests.post(f"{server.url}/sandbox/_control/issues", json=TEMPLATE_ISSUE,
                      timeout=30).raise_for_status()
        requests.post(f"{server.url}{API}/dispatch/triggers", timeout=30, json={
            "source": SOURCE, "input": {"issue_key": TEMPLATE_KEY}}).raise_for_status()
        deadline = time.monotonic() + 30
        while not parked(server.url):
            if time.monotonic() > deadline:
                raise SystemExit(f"{TEMPLATE_KEY} did not park:\n{server.log.read_text()[-3000:]}")
            time.sleep(0.05)
    finally:
        server.stop()


def parked(url: str) -> bool:
    items = requests.get(f"{url}{API}/dispatch/executions", params={"issue_key": TEMPLATE_KEY},
                         timeout=30).json()["items"]
    return bool(items) and items[0]["status"] == "executing" and bool(items[0]["wake_at"])


def read_template(store: Store, key: str = TEMPLATE_KEY) -> Template:
    """The rows of the execution of ``key`` (the one the bench parked)."""
    with unit_of_work(store.db):
        execution = (ExecutionRow.select().where(ExecutionRow.issue_key == key)
                     .dicts().get())
        rules = list(RuleExecutionRow.select()
                     .where(RuleExecutionRow.execution == execution["id"])
                     .order_by(RuleExecutionRow.sequence).dicts())
        trigger = TriggerRow.select().where(TriggerRow.id == execution["trigger"]).dicts().get()
        context = ContextRow.select().where(ContextRow.issue_key == key).dicts().get()
    return Template(trigger, execution, rules, context)


# -- seeding ------------------------------------------------------------------------------------


def issue_key(index: int) -> str:
    return f"GTOC-{KEY_BASE + index}"


def create_queued(store: Store, template: Template, count: int, now: datetime) -> None:
    """``created`` executions the way the trigger actor makes them: the domain's fan-out over
    the template's policy and an issue like its issue, written by the store's creation."""
    policy = store.policies.get(template.execution["policy_id"])
    registry = product_registry()
    alice = JiraUser("sbx-alice", "alice@example.com", "Alice Wang")
    for index in range(count):
        key = issue_key(index)
        issue = Issue(key=key, project_key="GTOC", summary=TEMPLATE_ISSUE["summary"],
                      assignee=alice, labels=("notify-assignee",), priority="P0",
                      status="Todo", created_at=now)
        trigger = store.triggers.create(SOURCE, key, policy_id=None, dryrun=None, now=now)
        execution = new_execution(trigger, policy, issue, None, registry, now)
        store.executions.create(trigger.id, [execution], issue_key=key, ensure_context=True,
                                now=now)


def copies(template: Template, first: int, count: int, held: int, now: datetime,
           ids: tuple[int, int]) -> Iterator[tuple[dict, dict, list[dict], dict]]:
    """(trigger, execution, rules, context) rows of ``count`` copies; the first ``held`` run
    under a dead owner's live lease, the rest wait for a far ``wake_at``."""
    trigger_id, execution_id = ids
    source, rules = template.execution, template.rules
    lived = source["updated_at"] - source["created_at"]
    for n in range(count):
        key, eid, tid = issue_key(first + n), execution_id + n, trigger_id + n
        created = now - CREATED_SPAN * (1 - n / count)
        execution = dict(source, id=eid, trigger=tid, issue_key=key, business_now=created,
                         live_lock_key=source["live_lock_key"].replace(TEMPLATE_KEY, key),
                         created_at=created, updated_at=created + lived)
        if n < held:
            execution.update(wake_at=None, lease_owner=DEAD_OWNER,
                             lease_epoch=source["lease_epoch"] + 1,
                             lease_expires_at=now + PARKED_FROM)  # not expired at boot
        else:
            execution["wake_at"] = now + PARKED_FROM + PARKED_SPAN * (n / count)
        trigger = dict(template.trigger, id=tid, issue_key=key, input_json={"issue_key": key},
                       output_json={"execution_ids": [eid]}, available_at=created,
                       created_at=created, updated_at=created, completed_at=created)
        yield (trigger, execution,
               [{k: v for k, v in rule.items() if k != "id"} | {"execution": eid}
                for rule in rules],
               dict(template.context, issue_key=key, created_at=created, updated_at=created))


class Insert:
    """One model's INSERT, its SQL built by peewee once, run for many rows at a time: peewee
    would build the SQL of every row again, which took 20 times longer than the database.
    JSON values shared by every copy (the template's action contexts) are encoded once."""

    def __init__(self, db: peewee.Database, model: type[peewee.Model], first: dict):
        self.db = db
        sql, _ = model.insert(first).returning().sql()  # with the defaults of absent columns
        self.sql = sql
        self.head, self.values = sql.split(" VALUES ", 1)
        names = self.head[self.head.index("(") + 1:-1].replace('"', "").split(", ")
        self.fields = [model._meta.columns[name] for name in names]
        self._encoded: dict[int, tuple[object, str]] = {}  # id -> (value kept alive, JSON)

    def params(self, row: dict) -> tuple:
        return tuple(self._value(field, row.get(field.name, field.default))
                     for field in self.fields)

    def _value(self, field: peewee.Field, value: object) -> object:
        if callable(value):
            value = value()  # a default such as dict
        if isinstance(field, peewee.JSONField):
            if value is None:
                return None
            cached = self._encoded.get(id(value))
            if cached is None:
                cached = self._encoded[id(value)] = (value, field._dumps(value))
            return cached[1]
        return field.db_value(value)

    def run(self, rows: Iterable[dict]) -> int:
        """Insert ``rows`` in one transaction, ``CHUNK`` at a time; how many."""
        params = [self.params(row) for row in rows]
        with write_lock(self.db):
            cursor = self.db.cursor()
            for start in range(0, len(params), CHUNK):
                chunk = params[start:start + CHUNK]
                if is_postgres(self.db):  # one multi-row statement, not a round trip a row
                    rows = ", ".join([self.values] * len(chunk))
                    cursor.execute(f"{self.head} VALUES {rows}",
                                   [value for row in chunk for value in row])
                else:  # one prepared statement, run in-process: as fast as a multi-row one
                    cursor.executemany(self.sql, chunk)
        return len(params)


def insert_all(db: peewee.Database, model: type[peewee.Model], rows: Iterable[dict]) -> int:
    rows = list(rows)
    return Insert(db, model, rows[0]).run(rows) if rows else 0


def next_id(model: type[peewee.Model]) -> int:
    return (model.select(peewee.fn.MAX(model.id)).scalar() or 0) + 1


def seed(store: Store, template: Template, count: int, created: int, held: int) -> float:
    """Write ``count`` non-terminal executions in all; the seconds it took."""
    started, now, db = time.perf_counter(), datetime.now(UTC), store.db
    with without_statement_timeouts(db):
        create_queued(store, template, created, now)
        with unit_of_work(db):
            ids = next_id(TriggerRow), next_id(ExecutionRow)
        rows = list(copies(template, created, count - created - 1, held, now, ids))
        for position, model in enumerate((TriggerRow, ExecutionRow)):
            insert_all(db, model, (row[position] for row in rows))
        insert_all(db, RuleExecutionRow, (rule for row in rows for rule in row[2]))
        insert_all(db, ContextRow, (row[3] for row in rows))
        with write_lock(db):  # the template itself waits far ahead too
            (ExecutionRow.update(wake_at=now + PARKED_FROM)
             .where(ExecutionRow.id == template.execution["id"]).execute())
            if is_postgres(db):  # explicit ids leave the identity sequences behind
                for table in ("dispatch_triggers", "dispatch_executions"):
                    db.execute_sql(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                   f"(SELECT MAX(id) FROM {table}))")
    return time.perf_counter() - started


def non_terminal(store: Store) -> Counter:
    """Running executions by (status, parked, held), to check what was seeded."""
    with unit_of_work(store.db):
        rows = (ExecutionRow.select(ExecutionRow.status, ExecutionRow.wake_at.is_null(False),
                                    ExecutionRow.lease_owner.is_null(False))
                .where(ExecutionRow.status.in_(("created", "executing"))).tuples())
        return Counter(rows)


# -- measuring ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    recovery: float  # "sandbox loaded" -> "serving on"
    supervisor: float  # "sandbox loaded" -> "boot recovery done"
    from_spawn: float  # process start -> "serving on"
    ready_seen: float  # process start -> the first 200 from /readyz
    logged: tuple[int, int]  # executions recovered, leases given back (the log line)
    pool: dict  # /admin/actors "pool"
    timers: int
    peak_mb: float
    levels: Counter  # log lines by level

    @property
    def in_pool(self) -> int:
        return sum(self.pool[k] for k in ("parked", "queue_length", "busy", "retrying"))


def measure(server: Server) -> Measured:
    """Wait for readiness, then read the memory first, the pool second and the log last."""
    ready = server.wait_ready()
    peak = server.peak_rss_mb()
    actors = requests.get(f"{server.url}{API}/admin/actors", timeout=30).json()
    events = server.events()
    missing = [name for name in LOG_EVENTS if name not in events]
    if missing:
        raise SystemExit(f"no {missing} in the log:\n{server.log.read_text()[-3000:]}")
    at = {name: parse_rfc3339(events[name]["ts"]).timestamp() for name in LOG_EVENTS}
    counts = re.match(r"(\d+) executions \((\d+) leases given back\)",
                      events["boot recovery done"].get("reason", ""))
    loaded, done = at["sandbox loaded"], at["serving on"]
    return Measured(
        recovery=done - loaded, supervisor=at["boot recovery done"] - loaded,
        from_spawn=done - server.spawned, ready_seen=ready - server.spawned,
        logged=(int(counts[1]), int(counts[2])) if counts else (-1, -1),
        pool=actors["pool"], timers=actors["scheduler"]["timers"], peak_mb=peak,
        levels=server.levels())


@dataclass(frozen=True)
class Result:
    count: int
    seeded: Counter  # (status, has wake_at, has lease owner) -> executions
    seed_seconds: float
    boots: list[Measured]

    def seeded_as(self, status: str | None = None, *, parked: bool = False,
                  held: bool = False) -> int:
        return sum(n for (s, waits, owned), n in self.seeded.items()
                   if (status is None or s == status) and (not parked or waits)
                   and (not held or owned))

    def goal(self) -> str:
        """Judged on the median recovery of the boots and the highest peak."""
        recovery = statistics.median(m.recovery for m in self.boots)
        peak = max(m.peak_mb for m in self.boots)
        if self.count <= 10_000:
            wanted, met = "< 1 s", recovery < 1
        else:
            wanted, met = "< 5 s, < 200 MB", recovery < 5 and peak < 200
        return (f"goal {wanted}: {'met' if met else 'MISSED'} (median recovery {recovery:.3f} s "
                f"of {len(self.boots)} boot(s), peak RSS {peak:.0f} MB)")


def profile_path(args: argparse.Namespace, engine: str, count: int) -> Path | None:
    return Path(f"{args.profile}-{engine}-{count}.txt") if args.profile else None


def run(args: argparse.Namespace, count: int, engine: str) -> Result:
    """Seed a fresh database, then boot ``--boots`` servers on it one after the other, each
    killed with SIGKILL once measured (the next one recovers from that)."""
    boots = []
    with tempfile.TemporaryDirectory() as scratch, fresh_database(args.postgres_url) as url:
        tmp = Path(scratch)
        park_one(url, tmp)
        store = Store.for_url(url)
        try:
            template = read_template(store)
            seconds = seed(store, template, count, args.created, args.held)
            seeded = non_terminal(store)
        finally:
            store.close()
        for boot in range(args.boots):
            profile = profile_path(args, engine, count) if boot == 0 else None
            server = Server(url, tmp / f"server-{boot}.log", profile)
            try:
                boots.append(measure(server))
            finally:
                server.stop(signal.SIGKILL)  # before the schema is dropped
    return Result(count, seeded, seconds, boots)


# -- the report ---------------------------------------------------------------------------------


def report(engine: str, result: Result, profile: Path | None) -> None:
    n, held = result.count, result.seeded_as(held=True)
    print(f"{engine}, N = {n:,}: seeded {sum(result.seeded.values()):,} in "
          f"{result.seed_seconds:.1f} s ({result.seeded_as(parked=True):,} parked, "
          f"{result.seeded_as('created')} created, {held} held by a dead owner)")
    for boot, m in enumerate(result.boots, start=1):
        after = "the seeded store" if boot == 1 else f"kill -9 of boot {boot - 1}"
        print(f"  boot {boot} (after {after}): recovery {m.recovery:.3f} s (supervisor "
              f"{m.supervisor:.3f} s, pool {m.recovery - m.supervisor:.3f} s); from spawn "
              f"{m.from_spawn:.3f} s (/readyz 200 seen at {m.ready_seen:.3f} s); peak RSS "
              f"{m.peak_mb:.0f} MB ({m.peak_mb * 1e6 / 2**20:.0f} MiB)")
        ok = "ok" if m.logged[0] == n else f"EXPECTED {n:,}"
        if boot == 1:
            ok = "ok" if m.logged == (n, held) else f"EXPECTED {n:,} and {held}"
        print(f"    logged: {m.logged[0]:,} executions recovered, {m.logged[1]} leases given "
              f"back ({ok}); log lines: " + ", ".join(
                  f"{count} {level}" for level, count in sorted(m.levels.items())))
        ok = "ok" if m.in_pool == n else f"EXPECTED {n:,}"
        print(f"    in pool: {m.in_pool:,} ({ok}): parked {m.pool['parked']:,}, queued "
              f"{m.pool['queue_length']}, running {m.pool['busy']}, retrying "
              f"{m.pool['retrying']}; {m.timers:,} timers")
    print(f"  {result.goal()}")
    if profile is not None:
        summarize(profile)


def summarize(profile: Path, top: int = 8) -> None:
    """Where the samples went: by thread, then inside the threads that recover, by function,
    inclusive and self (the actor loop's own frames left out). A raw py-spy line is
    ``thread (TID): NAME;frame;frame;... count``; the main thread has no name at first."""
    threads: Counter[str] = Counter()
    inclusive: dict[str, Counter[str]] = {name: Counter() for name in PROFILED_THREADS}
    own: dict[str, Counter[str]] = {name: Counter() for name in PROFILED_THREADS}
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        thread = re.sub(r"^thread \(\d+\):? ?|-\d+$", "", frames[0]) or "MainThread"
        threads[thread] += int(count)
        if thread in inclusive:
            own[thread][frames[-1]] += int(count)
            inclusive[thread].update(dict.fromkeys(set(frames[1:]), int(count)))
    total = sum(threads.values())
    print(f"  profile {profile}: {total} samples holding the GIL, by thread: " + ", ".join(
        f"{name} {100 * n / max(total, 1):.0f}%" for name, n in threads.most_common(5)))
    for thread in PROFILED_THREADS:
        samples = max(threads[thread], 1)
        for title, counter in (("inclusive", inclusive[thread]), ("self", own[thread])):
            shown = [(frame, n) for frame, n in counter.most_common()
                     if not LOOP_FRAMES.search(frame)][:top]
            print(f"    {thread}, {title}: " + "; ".join(
                f"{100 * n / samples:.0f}% {frame}" for frame, n in shown))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 100_000],
                        help="non-terminal executions in the store at the start, one run each")
    parser.add_argument("--created", type=int, default=10,
                        help="of them, created executions (due at once)")
    parser.add_argument("--held", type=int, default=SLOTS,
                        help="of them, executing ones leased to the dead process (due at once)")
    parser.add_argument("--boots", type=int, default=1,
                        help="servers booted one after the other on each seeded database, "
                             "each killed with SIGKILL once measured; the goal is judged on "
                             "the median")
    parser.add_argument("--postgres-url",
                        help="run on a throw-away schema of this PostgreSQL server, not SQLite")
    parser.add_argument("--profile", metavar="PATH",
                        help="record the first boot of each N with py-spy to PATH-ENGINE-N.txt")
    args = parser.parse_args()
    if min(args.counts) <= args.created + args.held:
        parser.error("every count must exceed --created + --held")
    engine = "PostgreSQL" if args.postgres_url else "SQLite"
    for count in args.counts:
        result = run(args, count, engine)
        report(engine, result, profile_path(args, engine, count))
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
