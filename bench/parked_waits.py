"""Parked ACK waits: what ``--executions`` executions waiting in ``page_assignment`` cost.

A parked execution holds no slot; the ACK watcher looks at its wait (a Jira search per 100
issues, the Lark read of each card) at its poll, or at the watcher's pace
(``ack_watch.looks_per_second``) when more wait than that pace allows, and hands it back to the
pool only on a verdict or at its deadline (docs/design.md, "ACK waits without a slot"). This
bench parks ``--executions`` of them and prints, idle next to loaded, for each pace of
``--paces`` side by side (``0``: unpaced, every wait looked at each poll):

- the latency of ordinary assign dispatches fired at a steady ``--rate`` for ``--duration``
  (the POST sent to the execution's ``completed_at``, read from the API once it is terminal;
  same machine, same system clock), p50/p95, and where the p50 goes: the median of each stage
  between the times the server stamps (trigger row, claim, first action, last action, end);
- the server's resident memory (``VmRSS`` and its peak ``VmHWM`` from ``/proc/PID/status``)
  and its CPU use, and the fakes' CPU;
- how late a parked wait is really looked at against the ``wake_at`` it was parked until.

The service runs as a real ``python -m ticket_dispatcher serve`` process (a temporary SQLite
file, or with ``--postgres-url`` a throw-away PostgreSQL schema; ``execution_slots`` 10, real
time, trigger rate limit off, authentication off), not in-process: the RSS and CPU figures must
be the server's alone. The fake Jira, Lark, Oncall and Core are the sandbox of a second ``serve
--sandbox`` process, as a real Jira and Lark are on other machines, and the measured one is a
plain ``serve`` pointed at them, on a database seeded with the same examples. ``--tree`` runs
the service of another source tree (a ``git worktree`` of an earlier commit) on the same bench.

Each run: the idle dispatches first; then four urgent notifications (GTOC-1000…1003, P0 in
``Todo`` with ``notify-assignee``, one per assignee with a phone) run for real through their
card, App-urgent and first page until they park; the server stops, and the bench copies those
four until ``--executions`` wait (``seed_waits``: each copy its own issue, trigger, rules,
context and ids, its ``wake_at`` spread evenly over one round of the pace, as a steady service
leaves them); the server starts again on that database, its boot recovery hands every wait to
the watcher, and after ``--settle`` seconds the loaded dispatches run. The notification policy
is the example ``priority-assignee`` family the sandbox activates (poll 5 s, ACK timeout 5 min),
unchanged; nobody reads a card, so nothing ACKs, and the run ends before the deadline. The
assign dispatches use TCID issues at P3, which the example assign policy round-robins to alice,
bob and carol.

Wake lateness comes from persisted state: a look saves the wait's next ``wake_at`` and its own
time as ``updated_at`` (as the execution's own poll would), so when a wait's ``wake_at`` moves
from W, a look ran at the new ``updated_at``; lateness is that minus W (a look runs up to
250 ms early, so that the looks due together share a batch). The bench reads
``dispatch_executions`` (on SQLite a read-only connection: WAL, so a reader never blocks the
server) every ``--sample`` seconds, far below the time between two looks at one wait.

On a PostgreSQL server that runs without autovacuum, the bench stands in for it
(``Autovacuum``): an ``ANALYZE`` after the copies are written, a ``VACUUM ANALYZE`` of the
executions every minute, as a production server's autovacuum would do for these tables.

About two minutes a pace at the defaults on a 2-core machine.

    python bench/parked_waits.py [--executions 1000] [--paces 0 50] [--rate 5] [--duration 15]
                                 [--settle 10] [--sample 0.5] [--http-threads 16]
                                 [--postgres-url URL] [--tree PATH] [--ramp-timeout 180]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import requests
from databases import fresh_database
from floors import cpu_seconds, wait_http
from intake import free_port
from recovery import insert_all, next_id, read_template

from ticket_dispatcher.sandbox import service_urls
from ticket_dispatcher.seeding import seed_store
from ticket_dispatcher.store import Store, write_lock
from ticket_dispatcher.store.connect import is_postgres
from ticket_dispatcher.store.database import unit_of_work, without_statement_timeouts
from ticket_dispatcher.store.models import (
    ContextRow,
    ExecutionRow,
    RuleExecutionRow,
    TriggerRow,
    time_param,
)
from ticket_dispatcher.timeutil import format_time, parse_duration, parse_rfc3339

ROOT = Path(__file__).resolve().parents[1]
API = "/api/v1/ticketmanager"
EXAMPLES = ROOT / "ops/examples"
NOTIFY_POLICY = EXAMPLES / "policies/priority-assignee.json"
ASSIGNEES = ("alice@example.com", "bob@example.com", "dave@example.com", "eve@example.com")
TERMINAL = ("succeeded", "failed")
WORLD_THREADS = 32  # the fakes' process answers every poll's reads at once
SINCE_MARGIN = timedelta(seconds=5)  # the wake watcher rereads the rows changed this long ago


# -- the server ---------------------------------------------------------------------------------


class Server:
    """``ticket-dispatcher serve`` in its own process; its stderr goes to a file shown on
    failure. ``world`` is None for ``serve --sandbox`` (the fakes in the same process), or the
    URL of another process's sandbox: then this one is a plain ``serve --insecure-no-auth``
    whose clients call that sandbox, on a database seeded with the same examples."""

    def __init__(self, database_url: str, log: Path, http_threads: int, *, slots: int = 10,
                 world: str | None = None, pace: float | None = None, seeded: bool = False,
                 tree: Path = ROOT, shared: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = dict(os.environ, TICKET_DISPATCHER_DATABASE_URL=database_url,
                   TICKET_DISPATCHER_EXECUTION_SLOTS=str(slots),
                   TICKET_DISPATCHER_HTTP_TRIGGER_RATE="0",
                   TICKET_DISPATCHER_HTTP_THREADS=str(http_threads),
                   TICKET_DISPATCHER_LOG_LEVEL="WARNING",
                   PYTHONPATH=str(tree), PYTHONSAFEPATH="1")  # that tree's own package
        if pace is not None:
            env["TICKET_DISPATCHER_ACK_WATCH_LOOKS_PER_SECOND"] = f"{pace:g}"
        if shared:
            env["TICKET_DISPATCHER_CLUSTER_MODE"] = "shared"
        command = [sys.executable, "-m", "ticket_dispatcher", "serve", "--port", str(self.port)]
        if world is None:
            command.append("--sandbox")
        else:
            if not seeded:
                seed(database_url)
            env.update(world_settings(world))
            command.append("--insecure-no-auth")
        with self.log.open("a") as stderr:
            self.process = subprocess.Popen(command, env=env, cwd=tree, stderr=stderr,
                                            stdout=subprocess.DEVNULL)
        try:
            wait_http(f"{self.url}/readyz", self.process, timeout=60)
        except BaseException:
            self.stop()
            raise

    def rss_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB: resident now, and the peak so far."""
        fields = dict(line.split(":", 1) for line in
                      Path(f"/proc/{self.process.pid}/status").read_text().splitlines())
        return tuple(int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM"))

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def seed(database_url: str) -> None:
    """The examples ``serve --sandbox`` seeds (engineers, the four policies, active)."""
    store = Store.for_url(database_url)
    try:
        store.migrate()
        seed_store(store, EXAMPLES, datetime.now(UTC))
    finally:
        store.close()


def world_settings(world: str) -> dict[str, str]:
    """Point every client at the sandbox served on ``world``, as ``serve --sandbox`` points
    them at its own, and turn the notification on."""
    urls = service_urls(world)
    return {"TICKET_DISPATCHER_NOTIFICATIONS_ENABLED": "true",
            "TICKET_DISPATCHER_JIRA_BASE_URL": urls["jira"],
            "TICKET_DISPATCHER_JIRA_EMAIL": "sandbox@example.com",
            "TICKET_DISPATCHER_JIRA_API_TOKEN": "sandbox",
            "TICKET_DISPATCHER_LARK_BASE_URL": urls["lark"],
            "TICKET_DISPATCHER_LARK_APP_ID": "sandbox",
            "TICKET_DISPATCHER_LARK_APP_SECRET": "sandbox",
            "TICKET_DISPATCHER_ONCALL_BASE_URL": urls["oncall"],
            "TICKET_DISPATCHER_ONCALL_TOKEN": "sandbox",
            "TICKET_DISPATCHER_CORE_BASE_URL": urls["core"],
            "TICKET_DISPATCHER_CORE_TOKEN": "sandbox"}


# -- setting up the world -----------------------------------------------------------------------


def in_threads(work, items, threads: int = 8) -> list:
    local = threading.local()

    def run(item):
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return work(local.session, item)

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(run, items))


def create_issues(url: str, bodies: list[dict]) -> None:
    in_threads(lambda session, body: session.post(
        f"{url}/sandbox/_control/issues", json=body, timeout=30).raise_for_status(), bodies)


def notification_issue(n: int) -> dict:
    return {"key": f"GTOC-{1000 + n}", "summary": "bench: payment gateway down",
            "priority": "P0", "status": "Todo", "labels": ["notify-assignee"],
            "assignee_email": ASSIGNEES[n % len(ASSIGNEES)]}


def assign_issue(key: str) -> dict:
    return {"key": key, "summary": "bench: invoice shows the wrong currency", "priority": "P3",
            "status": "WAITING FOR FIRST RESPONSE", "labels": ["auto-dispatch"]}


def post_trigger(session: requests.Session, url: str, source: str, key: str) -> int:
    response = session.post(f"{url}{API}/dispatch/triggers", timeout=30,
                            json={"source": source, "input": {"issue_key": key}})
    response.raise_for_status()
    return response.json()["id"]


def actors(url: str) -> dict:
    return requests.get(f"{url}{API}/admin/actors", timeout=30).json()


# -- persisted wake times -----------------------------------------------------------------------


class WakeWatcher(threading.Thread):
    """Follows every parked execution's ``wake_at`` in the database. Each move W -> W' is one
    look, saved with ``updated_at`` = the time it ran (``record_looks``, as the execution's own
    poll saves it), so ``lateness = updated_at - W``: how late the wait was looked at against
    the time it was parked until, whatever the pace made of the next one."""

    def __init__(self, database_url: str, interval: float):
        super().__init__(daemon=True)
        if database_url.startswith("sqlite:///"):
            self._db = sqlite3.connect(f"file:{database_url.removeprefix('sqlite:///')}?mode=ro",
                                       uri=True, check_same_thread=False, timeout=10)
        else:
            import psycopg  # only a PostgreSQL run needs the driver

            # autocommit: each read sees what the server committed since
            self._db = psycopg.connect(database_url, autocommit=True)
        self._interval = interval
        self._last: dict[int, datetime] = {}
        self._halt = threading.Event()
        self.phase = ""  # samples are kept only while a phase is named
        self._phase_started = 0.0
        self.lateness: dict[str, list[float]] = {}
        self.seconds: dict[str, float] = {}  # how long each phase lasted

    def begin(self, phase: str) -> None:
        self.end()
        self.phase, self._phase_started = phase, time.perf_counter()
        self.lateness.setdefault(phase, [])

    def end(self) -> None:
        if self.phase:
            self.seconds[self.phase] = time.perf_counter() - self._phase_started
        self.phase = ""

    def waiting(self) -> int:
        """Executions that have parked at least once and still wait (``wake_at`` set)."""
        return self._rows("SELECT count(*) FROM dispatch_executions WHERE status = "
                          "'executing' AND wake_at IS NOT NULL")[0][0]

    def _rows(self, sql: str) -> list[tuple]:
        cursor = self._db.cursor()
        try:
            cursor.execute(sql)
            return cursor.fetchall()
        finally:
            cursor.close()

    def run(self) -> None:
        since = None  # after the first read, only the rows changed since the last one's
        while not self._halt.wait(self._interval):
            sql = ("SELECT id, wake_at, updated_at FROM dispatch_executions WHERE "
                   "status = 'executing' AND wake_at IS NOT NULL")
            if since is not None:  # a margin for the commits that were in flight
                sql += f" AND updated_at > '{since - SINCE_MARGIN:%Y-%m-%d %H:%M:%S.%f}'"
            newest = since
            for execution_id, stored, updated in self._rows(sql):
                wake_at, updated = _stored_time(stored), _stored_time(updated)
                newest = updated if newest is None else max(newest, updated)
                before = self._last.get(execution_id)
                self._last[execution_id] = wake_at
                if before is not None and wake_at != before and self.phase:
                    self.lateness[self.phase].append((updated - before).total_seconds() * 1000)
            since = newest

    def stop(self) -> None:
        self._halt.set()
        if self.ident is not None:  # started
            self.join(5)
        self._db.close()


class Autovacuum(threading.Thread):
    """What a production PostgreSQL's autovacuum does for the measured tables, on a server
    that runs without it (``autovacuum = off``, as some test machines do): ``ANALYZE`` once the
    seeded rows are in (autovacuum analyzes a table a minute or so after a bulk write), then
    ``VACUUM ANALYZE`` of the executions every ``interval`` seconds (every look rewrites its
    execution's row, 150 a second on three replicas: without it the table and its indexes
    fill with dead rows, and the planner works from the row counts of an empty table). Does
    nothing on SQLite or where the server's own autovacuum runs."""

    TABLES = ("dispatch_executions", "dispatch_rule_executions", "dispatch_triggers")

    def __init__(self, database_url: str, interval: float = 60):
        super().__init__(daemon=True)
        self._db = None
        self._halt = threading.Event()
        self._interval = interval
        if database_url.startswith("sqlite:///"):
            return
        import psycopg  # only a PostgreSQL run needs the driver

        db = psycopg.connect(database_url, autocommit=True)  # VACUUM runs outside a transaction
        with db.cursor() as cursor:
            cursor.execute("SHOW autovacuum")
            if cursor.fetchone()[0] == "on":
                db.close()
                return
        self._db = db
        print("the PostgreSQL server runs with autovacuum off: the bench analyzes the seeded "
              f"tables and vacuums the executions every {interval:g} s in its stead")

    def analyze(self) -> None:
        if self._db is not None:
            with self._db.cursor() as cursor:
                cursor.execute(f"ANALYZE {', '.join(self.TABLES)}")

    def run(self) -> None:
        while self._db is not None and not self._halt.wait(self._interval):
            with self._db.cursor() as cursor:
                cursor.execute("VACUUM (ANALYZE) dispatch_executions")

    def stop(self) -> None:
        self._halt.set()
        if self.ident is not None:
            self.join(60)
        if self._db is not None:
            self._db.close()


def _stored_time(value) -> datetime:
    """A naive UTC time as the store keeps it: text on SQLite, a datetime on PostgreSQL."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def with_deadline(value, deadline: str):
    """``value`` (a rule row's JSON) with every page's ``deadline`` set to ``deadline``."""
    if isinstance(value, dict):
        return {key: deadline if key == "deadline" and isinstance(item, str)
                else with_deadline(item, deadline) for key, item in value.items()}
    if isinstance(value, list):
        return [with_deadline(item, deadline) for item in value]
    return value


# -- many parked waits from a few -------------------------------------------------------------


def seed_waits(database_url: str, templates: int, count: int, first_wake: datetime,
               spread: timedelta, deadline: datetime) -> float:
    """Copy the ``templates`` parked executions (GTOC-1000 and on, each parked by a real run)
    until ``count`` wait: copy ``n`` is GTOC-(1000 + n), an issue with template
    ``n % templates``'s assignee, with its own trigger, rule executions, dispatch context and
    ids, and a ``wake_at`` spread evenly over ``spread`` from ``first_wake`` and the time the
    writes took (a steady service's waits are due at even intervals). The action contexts are
    the template's, the same card (whose readers nobody is among), but for the page's
    ``deadline``, which is ``deadline`` (a wait parked for up to 15 minutes a page, and the run
    ends before it).
    Seconds."""
    started, started_at = time.perf_counter(), datetime.now(UTC)
    store = Store.for_url(database_url)
    try:
        sources = [read_template(store, f"GTOC-{1000 + n}") for n in range(templates)]
        for source in sources:  # one changed copy of each template's rules, shared by its copies
            source.rules[:] = [with_deadline(rule, format_time(deadline))
                               for rule in source.rules]
        db = store.db
        with unit_of_work(db):
            trigger_id, execution_id = next_id(TriggerRow), next_id(ExecutionRow)
        rows = []
        for n in range(templates, count):
            source = sources[n % templates]
            key, tid, eid = f"GTOC-{1000 + n}", trigger_id + n, execution_id + n
            old_key = source.execution["issue_key"]
            execution = dict(source.execution, id=eid, trigger=tid, issue_key=key,
                             live_lock_key=source.execution["live_lock_key"].replace(old_key,
                                                                                      key),
                             wake_at=first_wake + spread * (n / count))
            trigger = dict(source.trigger, id=tid, issue_key=key,
                           input_json={"issue_key": key}, output_json={"execution_ids": [eid]})
            rules = [{k: v for k, v in rule.items() if k != "id"} | {"execution": eid}
                     for rule in source.rules]
            rows.append((trigger, execution, rules, dict(source.context, issue_key=key)))
        with without_statement_timeouts(db):
            for position, model in enumerate((TriggerRow, ExecutionRow)):
                insert_all(db, model, (row[position] for row in rows))
            insert_all(db, RuleExecutionRow, (rule for row in rows for rule in row[2]))
            insert_all(db, ContextRow, (row[3] for row in rows))
            late = datetime.now(UTC) - started_at  # the writes' time: due from their end on
            with write_lock(db):
                if is_postgres(db):  # explicit ids leave the identity sequences behind
                    for table in ("dispatch_triggers", "dispatch_executions"):
                        db.execute_sql(f"SELECT setval(pg_get_serial_sequence('{table}', "
                                       f"'id'), (SELECT MAX(id) FROM {table}))")
                    db.execute_sql("UPDATE dispatch_executions SET wake_at = wake_at + %s "
                                   "WHERE id >= %s", (late, execution_id))
                else:
                    db.cursor().executemany(
                        "UPDATE dispatch_executions SET wake_at = ? WHERE id = ?",
                        [(time_param(row[1]["wake_at"] + late), row[1]["id"]) for row in rows])
    finally:
        store.close()
    return time.perf_counter() - started


# -- assign dispatches at a steady rate ---------------------------------------------------------


def fire(urls: list[str], keys: list[str], rate: float) -> list[tuple[int, datetime]]:
    """Open loop: POST ``i`` is sent at ``i / rate`` from a pool, so a slow answer delays no
    later one, to the replicas in turn; each trigger's id with the wall-clock time its POST
    was sent."""
    local = threading.local()

    def one(url: str, key: str) -> tuple[int, datetime]:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        sent = datetime.now(UTC)
        return post_trigger(local.session, url, "jira_automation", key), sent

    futures: list[Future] = []
    with ThreadPoolExecutor(32) as pool:
        start = time.perf_counter()
        for n, key in enumerate(keys):
            time.sleep(max(0.0, start + n / rate - time.perf_counter()))
            futures.append(pool.submit(one, urls[n % len(urls)], key))
        return [future.result() for future in futures]


# Where a dispatch's latency goes, from the times the server stamps: the POST sent -> the
# trigger row (``created_at``) -> the trigger claimed (the execution's ``created_at``) -> its
# first action started -> its last action finished -> the execution completed.
STAGES = ("POST -> trigger row", "-> trigger claimed", "-> first action started",
          "-> last action finished", "-> completed")


def outcomes(url: str, fired: list[tuple[int, datetime]], timeout: float,
             ) -> list[tuple[float, str, tuple[float, ...] | None]]:
    """(milliseconds from the POST to the execution's ``completed_at``, final status, the
    milliseconds of each of ``STAGES``) of each dispatch. One slow poller, not one tight poller
    per dispatch: pollers share the HTTP threads with the sandbox fakes, and a first version
    polling every 10 ms from 64 threads slowed the very executions it timed. The server
    stamps its times from the same system clock as ``sent``."""
    deadline = time.monotonic() + timeout
    results = []
    with requests.Session() as session:
        for trigger_id, sent in fired:
            trigger = wait_for(session, f"{url}{API}/dispatch/triggers/{trigger_id}",
                               ("completed", "failed"), deadline)
            ids = trigger["output"]["execution_ids"]
            if not ids:
                results.append((float("nan"), f"trigger {trigger['status']}, no execution"))
                continue
            execution = wait_for(session, f"{url}{API}/dispatch/executions/{ids[0]}", TERMINAL,
                                 deadline)
            done = parse_rfc3339(execution["completed_at"])
            results.append(((done - sent).total_seconds() * 1000, execution["status"],
                            stages(sent, trigger, execution)))
    return results


def stages(sent: datetime, trigger: dict, execution: dict) -> tuple[float, ...] | None:
    """The milliseconds of each of ``STAGES`` (None for an execution that ran no action)."""
    actions = [action for rule in execution["rule_executions"]
               for action in rule["action_executions"] if action["started_at"]]
    if not actions or not all(action["finished_at"] for action in actions):
        return None
    times = [sent, parse_rfc3339(trigger["created_at"]), parse_rfc3339(execution["created_at"]),
             min(parse_rfc3339(action["started_at"]) for action in actions),
             max(parse_rfc3339(action["finished_at"]) for action in actions),
             parse_rfc3339(execution["completed_at"])]
    return tuple((later - earlier).total_seconds() * 1000 for earlier, later in pairwise(times))


def wait_for(session: requests.Session, url: str, statuses: tuple[str, ...],
             deadline: float) -> dict:
    while True:
        body = session.get(url, timeout=30).json()
        if body["status"] in statuses:
            return body
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} still {body['status']}; giving up")
        time.sleep(0.5)


# -- the run ------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def measure_phase(servers: list[Server], world: Server | None, keys: list[str], rate: float,
                  timeout: float) -> dict:
    """Fire the assign dispatches at the replicas in turn and wait for all of them; the pools
    as the admin view saw them every second meanwhile (summed over the replicas). CPU is the
    replicas' together, RSS the largest replica's."""
    server = servers[0]
    cpu, wall = sum(one.cpu() for one in servers), time.perf_counter()
    world_cpu = world.cpu() if world else 0.0
    pool: list[dict] = []
    stop = threading.Event()

    def sample_pool() -> None:
        while not stop.wait(1):
            views = [actors(one.url)["pool"] for one in servers]
            pool.append({name: sum(view[name] for view in views)
                         for name in ("parked", "queue_length")})

    sampler = threading.Thread(target=sample_pool, daemon=True)
    sampler.start()
    results = outcomes(server.url, fire([one.url for one in servers], keys, rate), timeout)
    stop.set()
    sampler.join()
    wall = time.perf_counter() - wall
    latencies = [ms for ms, status, _ in results if status == "succeeded"]
    split = [parts for _, status, parts in results if status == "succeeded" and parts]
    return {"count": len(results), "failed": len(results) - len(latencies),
            "stages": [percentile([parts[n] for parts in split], 50)
                       for n in range(len(STAGES))],
            "p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
            "max": max(latencies, default=float("nan")),
            "cpu": 100 * (sum(one.cpu() for one in servers) - cpu) / wall,
            "rss": max((one.rss_mib() for one in servers), key=lambda rss: rss[1]),
            "world_cpu": 100 * (world.cpu() - world_cpu) / wall if world else float("nan"),
            "parked": _range(sample["parked"] for sample in pool),
            "queue": _range(sample["queue_length"] for sample in pool)}


def _range(values) -> tuple[int, int]:
    values = list(values)
    return min(values, default=0), max(values, default=0)


def park_all(server: Server, watcher: WakeWatcher, count: int, timeout: float) -> float:
    """Post the reserved-source triggers; seconds until every execution waits for an ACK."""
    started = time.perf_counter()
    in_threads(lambda session, n: post_trigger(session, server.url, "jira_assignment_assignee",
                                               f"GTOC-{1000 + n}"), range(count))
    while watcher.waiting() < count:
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"only {watcher.waiting()} of {count} executions parked after "
                             f"{timeout:.0f} s; see the server log")
        time.sleep(0.5)
    return time.perf_counter() - started


def run_pace(args: argparse.Namespace, pace: float | None, poll: timedelta) -> dict:
    """One server idle, then ``--replicas`` with ``--executions`` parked, at ``pace`` looks a
    second each."""
    per_phase = max(1, round(args.rate * args.duration))
    templates = min(args.executions, len(ASSIGNEES))
    spread = (max(poll, timedelta(seconds=args.executions / (pace * args.replicas)))
              if pace else poll)
    shared = args.replicas > 1
    with tempfile.TemporaryDirectory() as tmp, \
            fresh_database(args.postgres_url) as database_url, \
            fresh_database(None) as world_url:
        logs = [Path(tmp) / f"server-{n}.log" for n in range(args.replicas)]
        world = Server(world_url, Path(tmp) / "world.log", WORLD_THREADS)
        servers: list[Server] = []
        watcher = vacuum = None

        def start(n: int, seeded: bool) -> Server:
            server = Server(database_url, logs[n], args.http_threads, world=world.url,
                            pace=pace, seeded=seeded, tree=args.tree, shared=shared)
            servers.append(server)
            return server

        try:
            server = start(0, seeded=False)
            watcher = WakeWatcher(database_url, args.sample)  # the server made the database
            idle_keys = [f"TCID-{10000 + n}" for n in range(per_phase)]
            loaded_keys = [f"TCID-{20000 + n}" for n in range(per_phase)]
            create_issues(world.url, [assign_issue(key) for key in idle_keys + loaded_keys]
                          + [notification_issue(n) for n in range(args.executions)])
            idle = measure_phase([server], world, idle_keys, args.rate, args.ramp_timeout)
            park_all(server, watcher, templates, args.ramp_timeout)
            servers.pop().stop()  # the others are copies of these, written while none runs
            now = datetime.now(UTC)
            seeding = seed_waits(database_url, templates, args.executions,
                                 now + timedelta(seconds=3), spread,
                                 deadline=now + spread + timedelta(seconds=args.deadline))
            vacuum = Autovacuum(database_url)
            vacuum.analyze()
            vacuum.start()
            booted = time.perf_counter()
            for n in range(args.replicas):
                start(n, seeded=True)
            boot = time.perf_counter() - booted
            watcher.start()
            watcher.begin("parked only")
            time.sleep(args.settle)
            views = [actors(one.url) for one in servers]
            reads = timed_reads(servers)
            watcher.begin("parked + dispatches")
            loaded = measure_phase(servers, world, loaded_keys, args.rate, args.ramp_timeout)
            watcher.end()
            waiting = watcher.waiting()
        except BaseException:
            for log in logs:
                if log.exists():
                    sys.stderr.write(log.read_text()[-4000:])
            raise
        finally:
            for server in servers:  # first: a failing watcher must not leave one running
                server.stop()
            world.stop()
            if watcher is not None:
                watcher.stop()
            if vacuum is not None:
                vacuum.stop()
    return {"pace": pace, "idle": idle, "loaded": loaded, "views": views, "reads": reads,
            "seeding": seeding, "boot": boot, "spread": spread, "waiting": waiting,
            "lateness": watcher.lateness, "seconds": watcher.seconds}


READS = (("admin view", f"{API}/admin/actors"), ("console parked list", "/console/parked"))


def timed_reads(servers: list[Server], times: int = 10) -> dict[str, tuple[float, float]]:
    """Each read's median and largest answer time in milliseconds, ``times`` from each
    replica, one after another."""
    timings: dict[str, tuple[float, float]] = {}
    with requests.Session() as session:
        for name, path in READS:
            took = []
            for server in servers:
                for _ in range(times):
                    started = time.perf_counter()
                    session.get(f"{server.url}{path}", timeout=30).raise_for_status()
                    took.append(1000 * (time.perf_counter() - started))
            timings[name] = (percentile(took, 50), max(took))
    return timings


def run(args: argparse.Namespace) -> None:
    policy = json.loads(NOTIFY_POLICY.read_text())
    page = next(action["page_assignment"] for rule in policy["rules"] for action in rule["then"]
                if action["type"] == "page_assignment")
    poll = parse_duration(page["poll_interval"])
    results = [run_pace(args, pace, poll) for pace in args.paces]
    report(args, page, results)


def pace_setting(text: str) -> float | None:
    return None if text == "default" else float(text)


def pace_name(pace: float | None) -> str:
    if pace is None:
        return "default"
    return f"{pace:g}/s" if pace else "unpaced"


def report(args, page, results: list[dict]) -> None:
    n = args.executions
    print(f"{n} urgent notification executions parked in page_assignment (poll "
          f"{page['poll_interval']}, ACK timeout {page['ack_timeout']}), execution_slots 10, "
          f"{'PostgreSQL' if args.postgres_url else 'SQLite'}"
          f"{f', {args.replicas} replicas in shared mode' if args.replicas > 1 else ''}, "
          "http.threads "
          f"{args.http_threads}, fakes in a serve --sandbox process of their own; "
          f"service tree {args.tree}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    for result in results:
        print(f"ack_watch.looks_per_second {pace_name(result['pace'])}: {n} waiting after "
              f"seeding ({result['seeding']:.1f} s, wake_at over "
              f"{result['spread'].total_seconds():.0f} s) and a boot of {result['boot']:.1f} s; "
              f"still waiting at the end: {result['waiting']}")
        for number, view in enumerate(result["views"]):
            watch = view.get("ack_watch", {})
            print(f"  replica {number + 1}, admin/actors {args.settle:g} s after the boot: parked "
                  f"{view['pool']['parked']}, watched {watch.get('watched', '-')}, round "
                  f"{watch.get('round_seconds', '-')} s, timers {view['scheduler']['timers']}")
        for name, (median_ms, most) in result["reads"].items():
            print(f"  {name}: median {median_ms:.1f} ms, largest {most:.1f} ms "
                  f"({10 * len(result['views'])} reads)")
    print()
    print(f"assign dispatches at {args.rate:g}/s for {args.duration:g} s "
          "(POST sent -> execution completed_at)")
    columns = [(f"idle, {pace_name(r['pace'])}", r["idle"]) for r in results] + \
              [(f"{n} parked, {pace_name(r['pace'])}", r["loaded"]) for r in results]
    print(f"  {'':28}" + "".join(f"{name:>24}" for name, _ in columns))
    rows = [("dispatches (failed)", lambda p: f"{p['count']} ({p['failed']})"),
            ("latency p50", lambda p: f"{p['p50']:.0f} ms"),
            ("latency p95", lambda p: f"{p['p95']:.0f} ms"),
            ("latency max", lambda p: f"{p['max']:.0f} ms"),
            ("pool parked (min-max)", lambda p: f"{p['parked'][0]}-{p['parked'][1]}"),
            ("pool queue (min-max)", lambda p: f"{p['queue'][0]}-{p['queue'][1]}"),
            ("servers' CPU", lambda p: f"{p['cpu']:.0f}% of a core"),
            ("fakes' process CPU", lambda p: f"{p['world_cpu']:.0f}% of a core"),
            ("largest VmRSS at end", lambda p: f"{p['rss'][0]:.1f} MiB"),
            ("largest VmHWM (peak)", lambda p: f"{p['rss'][1]:.1f} MiB")]
    for name, cell in rows:
        print(f"  {name:28}" + "".join(f"{cell(phase):>24}" for _, phase in columns))
    print("  where the p50 goes (each stage's median; server times, millisecond stamps)")
    for index, name in enumerate(STAGES):
        print(f"    {name:26}" + "".join(f"{phase['stages'][index]:>21.0f} ms"
                                         for _, phase in columns))
    for result in results:
        idle, loaded = result["idle"], result["loaded"]
        print(f"  {pace_name(result['pace'])}: p50 parked/idle "
              f"{loaded['p50'] / idle['p50']:.2f}x")
    print()
    print("wake lateness: when a look ran (its saved updated_at) minus the wake_at it was "
          "parked until")
    print(f"  {'pace':10}{'phase':22}{'looks':>7}{'looks/s':>9}{'p50':>10}{'p99':>10}"
          f"{'max':>10}")
    for result in results:
        for phase, values in result["lateness"].items():
            seconds = result["seconds"][phase]
            print(f"  {pace_name(result['pace']):10}{phase:22}{len(values):7}"
                  f"{len(values) / seconds:9.0f}{percentile(values, 50):8.0f}ms"
                  f"{percentile(values, 99):8.0f}ms{max(values, default=float('nan')):8.0f}ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=1000, help="parked notifications")
    parser.add_argument("--paces", type=pace_setting, nargs="+", default=[0.0, 50.0],
                        help="ack_watch.looks_per_second of each run, side by side (0: "
                             "unpaced, every wait at its poll; 'default': the setting not "
                             "given, for a tree from before it, whose waits are seeded over "
                             "one poll)")
    parser.add_argument("--rate", type=float, default=5, help="assign dispatches per second")
    parser.add_argument("--duration", type=float, default=15,
                        help="seconds of assign dispatches, idle and again loaded")
    parser.add_argument("--settle", type=float, default=10,
                        help="seconds of wake sampling with only the parked executions")
    parser.add_argument("--sample", type=float, default=0.5,
                        help="seconds between two reads of the parked executions' wake_at")
    parser.add_argument("--http-threads", type=int, default=16)
    parser.add_argument("--postgres-url", help="run the measured server on PostgreSQL (a "
                        "throw-away schema) instead of a temporary SQLite file")
    parser.add_argument("--replicas", type=int, default=1,
                        help="serve the parked waits from this many replicas in shared mode "
                             "(PostgreSQL only); the dispatches go to each in turn")
    parser.add_argument("--deadline", type=float, default=900,
                        help="seconds after the last seeded wake_at of the copies' page "
                             "deadline")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="the source tree whose service is measured (say a git worktree "
                             "of an earlier commit); the bench's own code seeds the database")
    parser.add_argument("--ramp-timeout", type=float, default=180,
                        help="give up when the first waits have not parked after this")
    args = parser.parse_args()
    if args.replicas > 1 and not args.postgres_url:
        parser.error("--replicas above 1 needs --postgres-url: replicas share PostgreSQL")
    run(args)


if __name__ == "__main__":
    main()
