"""Parked ACK waits: what 1,000 executions waiting in ``page_assignment`` cost.

A parked execution holds no slot; the ACK watcher polls its wait (a Jira search per 100
issues, the Lark read of each card) and hands it back to the pool only on a verdict or at its
deadline (docs/design.md, "ACK waits without a slot"). Every page of an urgent notification is
such a wait, polled every ``poll_interval``.
This bench parks ``--executions`` of them at once and prints, idle next to loaded:

- the latency of ordinary assign dispatches fired at a steady ``--rate`` for ``--duration``
  (the POST sent to the execution's ``completed_at``, read from the API once it is terminal;
  same machine, same system clock), p50/p95, and where the p50 goes: the median of each stage
  between the times the server stamps (trigger row, claim, first action, last action, end);
- the server's resident memory (``VmRSS`` from ``/proc/PID/status``) and its CPU use;
- how late a parked wait is really looked at against its ``wake_at``, p50/p99.

The service runs as a real ``python -m ticket_dispatcher serve`` process (a temporary SQLite
file, or with ``--postgres-url`` a throw-away PostgreSQL schema; ``execution_slots`` 10, real
time, trigger rate limit off, authentication off), not in-process: the RSS and CPU figures must
be the server's alone, not the server's plus this client's threads and responses. By default
(``--world own``) the fake Jira, Lark, Oncall and Core are the sandbox of a second ``serve
--sandbox`` process, as a real Jira and Lark are on other machines, and the measured one is a
plain ``serve`` pointed at them, on a database seeded with the same examples; its CPU is printed
as the fakes' own. ``--world same`` measures ``serve --sandbox`` itself: then every poll's reads
are also served by the measured process's HTTP threads, and its CPU and RSS include the fake
world's.

The notification policy is the example ``priority-assignee`` family the sandbox activates
(poll 5 s, ACK timeout 5 min), unchanged: 5 s is the production poll, and no execution reaches
its deadline before the run ends, so all of them stay in attempt 1's wait. Its issues are
GTOC-1000…, P0 in ``Todo`` with ``notify-assignee`` and an assignee with a phone; nobody
reads a card, so nothing ACKs. The assign dispatches use TCID issues at P3, which the example
assign policy round-robins to alice, bob and carol (no time window involved).

Wake lateness comes from persisted state: a look at a wait that has no verdict yet saves
``wake_at = look + poll_interval``, as the execution's own poll would park it, so when an
execution's ``wake_at`` moves from W to W', a look ran at ``W' - poll_interval``; lateness is
that minus W. The bench reads ``dispatch_executions`` from the database (on SQLite a read-only
connection: WAL, so a reader never blocks the server) every ``--sample`` seconds, far below the
5 s between two looks at one wait, so no move is missed. (The admin view lists only the 50
soonest parked executions, too few to follow 1,000.)

About two minutes at the defaults on a 2-core machine, most of it the 1,000 executions
reaching their wait.

    python bench/parked_waits.py [--executions 1000] [--rate 5] [--duration 15]
                                 [--settle 10] [--sample 0.5] [--http-threads 16]
                                 [--postgres-url URL] [--world own|same] [--ramp-timeout 180]
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

from ticket_dispatcher.sandbox import service_urls
from ticket_dispatcher.seeding import seed_store
from ticket_dispatcher.store import Store
from ticket_dispatcher.timeutil import parse_duration, parse_rfc3339

ROOT = Path(__file__).resolve().parents[1]
API = "/api/v1/ticketmanager"
EXAMPLES = ROOT / "ops/examples"
NOTIFY_POLICY = EXAMPLES / "policies/priority-assignee.json"
ASSIGNEES = ("alice@example.com", "bob@example.com", "dave@example.com", "eve@example.com")
TERMINAL = ("succeeded", "failed")
WORLD_THREADS = 32  # the fakes' process answers every poll's reads at once


# -- the server ---------------------------------------------------------------------------------


class Server:
    """``ticket-dispatcher serve`` in its own process; its stderr goes to a file shown on
    failure. ``world`` is None for ``serve --sandbox`` (the fakes in the same process), or the
    URL of another process's sandbox: then this one is a plain ``serve --insecure-no-auth``
    whose clients call that sandbox, on a database seeded with the same examples."""

    def __init__(self, database_url: str, log: Path, http_threads: int, *, slots: int = 10,
                 world: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = dict(os.environ, TICKET_DISPATCHER_DATABASE_URL=database_url,
                   TICKET_DISPATCHER_EXECUTION_SLOTS=str(slots),
                   TICKET_DISPATCHER_HTTP_TRIGGER_RATE="0",
                   TICKET_DISPATCHER_HTTP_THREADS=str(http_threads),
                   TICKET_DISPATCHER_LOG_LEVEL="WARNING")
        command = [sys.executable, "-m", "ticket_dispatcher", "serve", "--port", str(self.port)]
        if world is None:
            command.append("--sandbox")
        else:
            seed(database_url)
            env.update(world_settings(world))
            command.append("--insecure-no-auth")
        with self.log.open("w") as stderr:
            self.process = subprocess.Popen(command, env=env, cwd=ROOT, stderr=stderr,
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
    store = Store.open(database_url)
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
    """Follows every parked execution's ``wake_at`` in the database; each move W -> W' is one
    poll that ran at ``W' - poll`` (see the module docstring), ``lateness = W' - poll - W``."""

    def __init__(self, database_url: str, poll: timedelta, interval: float):
        super().__init__(daemon=True)
        if database_url.startswith("sqlite:///"):
            self._db = sqlite3.connect(f"file:{database_url.removeprefix('sqlite:///')}?mode=ro",
                                       uri=True, check_same_thread=False, timeout=10)
        else:
            import psycopg2  # only a PostgreSQL run needs the driver

            self._db = psycopg2.connect(database_url)
            self._db.autocommit = True  # each read sees what the server committed since
        self._poll, self._interval = poll, interval
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
        while not self._halt.wait(self._interval):
            rows = self._rows("SELECT id, wake_at FROM dispatch_executions WHERE status "
                              "= 'executing' AND wake_at IS NOT NULL")
            for execution_id, stored in rows:  # naive UTC: text on SQLite, a datetime on PG
                wake_at = datetime.fromisoformat(stored) if isinstance(stored, str) else stored
                before = self._last.get(execution_id)
                self._last[execution_id] = wake_at
                if before is not None and wake_at != before and self.phase:
                    ran_at = wake_at - self._poll
                    self.lateness[self.phase].append(
                        (ran_at - before).total_seconds() * 1000)

    def stop(self) -> None:
        self._halt.set()
        if self.ident is not None:  # started
            self.join(5)
        self._db.close()


# -- assign dispatches at a steady rate ---------------------------------------------------------


def fire(url: str, keys: list[str], rate: float) -> list[tuple[int, datetime]]:
    """Open loop: POST ``i`` is sent at ``i / rate`` from a pool, so a slow answer delays no
    later one; each trigger's id with the wall-clock time its POST was sent."""
    local = threading.local()

    def one(key: str) -> tuple[int, datetime]:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        sent = datetime.now(UTC)
        return post_trigger(local.session, url, "jira_automation", key), sent

    futures: list[Future] = []
    with ThreadPoolExecutor(32) as pool:
        start = time.perf_counter()
        for n, key in enumerate(keys):
            time.sleep(max(0.0, start + n / rate - time.perf_counter()))
            futures.append(pool.submit(one, key))
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


def measure_phase(server: Server, world: Server | None, keys: list[str], rate: float,
                  timeout: float) -> dict:
    """Fire the assign dispatches and wait for all of them; the pool as the admin view saw it
    every second meanwhile."""
    cpu, wall = server.cpu(), time.perf_counter()
    world_cpu = world.cpu() if world else 0.0
    pool: list[dict] = []
    stop = threading.Event()

    def sample_pool() -> None:
        while not stop.wait(1):
            pool.append(actors(server.url)["pool"])

    sampler = threading.Thread(target=sample_pool, daemon=True)
    sampler.start()
    results = outcomes(server.url, fire(server.url, keys, rate), timeout)
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
            "cpu": 100 * (server.cpu() - cpu) / wall, "rss": server.rss_mib(),
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


def run(args: argparse.Namespace) -> None:
    policy = json.loads(NOTIFY_POLICY.read_text())
    page = next(action["page_assignment"] for rule in policy["rules"] for action in rule["then"]
                if action["type"] == "page_assignment")
    poll, ack_timeout = parse_duration(page["poll_interval"]), parse_duration(page["ack_timeout"])
    per_phase = max(1, round(args.rate * args.duration))
    with tempfile.TemporaryDirectory() as tmp, \
            fresh_database(args.postgres_url) as database_url, \
            fresh_database(None) as world_url:
        world = server = None
        try:
            if args.world == "own":
                world = Server(world_url, Path(tmp) / "world.log", WORLD_THREADS)
            server = Server(database_url, Path(tmp) / "server.log", args.http_threads,
                            world=world.url if world else None)
        except BaseException:
            for process in (server, world):
                if process is not None:
                    process.stop()
            raise
        fakes = world or server
        watcher = WakeWatcher(database_url, poll, args.sample)
        try:
            rss_start = server.rss_mib()
            idle_keys = [f"TCID-{10000 + n}" for n in range(per_phase)]
            loaded_keys = [f"TCID-{20000 + n}" for n in range(per_phase)]
            create_issues(fakes.url, [assign_issue(key) for key in idle_keys + loaded_keys]
                          + [notification_issue(n) for n in range(args.executions)])
            idle = measure_phase(server, world, idle_keys, args.rate, args.ramp_timeout)
            watcher.start()
            first_page = time.perf_counter()
            ramp = park_all(server, watcher, args.executions, args.ramp_timeout)
            view = actors(server.url)
            watcher.begin("parked only")
            time.sleep(args.settle)
            watcher.begin("parked + dispatches")
            loaded = measure_phase(server, world, loaded_keys, args.rate, args.ramp_timeout)
            watcher.end()
            ran = timedelta(seconds=time.perf_counter() - first_page)
        except BaseException:
            sys.stderr.write(server.log.read_text()[-4000:])
            raise
        finally:
            server.stop()  # first: a failing watcher must not leave the server running
            if world is not None:
                world.stop()
            watcher.stop()
    if ran >= ack_timeout - poll:  # a wait clamped at its deadline breaks W' - poll
        print(f"warning: the run outlasted the ACK timeout ({page['ack_timeout']}); "
              "some lateness samples may be wrong")
    report(args, page, idle, loaded, rss_start, ramp, view, watcher, poll)


def report(args, page, idle, loaded, rss_start, ramp, view, watcher, poll) -> None:
    n = args.executions
    print(f"{n} urgent notification executions parked in page_assignment (poll "
          f"{page['poll_interval']}, ACK timeout {page['ack_timeout']}), execution_slots 10, "
          f"{'PostgreSQL' if args.postgres_url else 'SQLite'}, "
          f"http.threads {args.http_threads}, "
          + ("fakes in the same process (serve --sandbox)" if args.world == "same" else
             "fakes in a serve --sandbox process of their own"))
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"all {n} were in their ACK wait {ramp:.1f} s after the first trigger; admin/actors "
          f"then: parked "
          f"{view['pool']['parked']}, busy {view['pool']['busy']}, queue "
          f"{view['pool']['queue_length']}, timers {view['scheduler']['timers']}")
    print()
    print(f"assign dispatches at {args.rate:g}/s for {args.duration:g} s "
          "(POST sent -> execution completed_at)")
    print(f"  {'':28}{'idle':>14}{f'{n} parked':>16}")
    rows = [("dispatches (failed)", lambda p: f"{p['count']} ({p['failed']})"),
            ("latency p50", lambda p: f"{p['p50']:.0f} ms"),
            ("latency p95", lambda p: f"{p['p95']:.0f} ms"),
            ("latency max", lambda p: f"{p['max']:.0f} ms"),
            ("pool parked (min-max)", lambda p: f"{p['parked'][0]}-{p['parked'][1]}"),
            ("pool queue (min-max)", lambda p: f"{p['queue'][0]}-{p['queue'][1]}"),
            ("server CPU", lambda p: f"{p['cpu']:.0f}% of a core"),
            ("fakes' process CPU", lambda p: f"{p['world_cpu']:.0f}% of a core"),
            ("server VmRSS at end", lambda p: f"{p['rss'][0]:.1f} MiB"),
            ("server VmHWM (peak)", lambda p: f"{p['rss'][1]:.1f} MiB")]
    for name, cell in rows:
        print(f"  {name:28}{cell(idle):>14}{cell(loaded):>16}")
    print("  where the p50 goes (each stage's median; server times, millisecond stamps)")
    for name, at_idle, under_load in zip(STAGES, idle["stages"], loaded["stages"], strict=True):
        print(f"    {name:26}{at_idle:>11.0f} ms{under_load:>13.0f} ms")
    print(f"  (VmRSS right after start: {rss_start[0]:.1f} MiB)")
    print()
    expected = n / poll.total_seconds()
    print(f"wake lateness: the poll's start minus its wake_at (expected {expected:.0f} wakes/s)")
    print(f"  {'phase':22}{'wakes':>7}{'wakes/s':>9}{'p50':>10}{'p99':>10}{'max':>10}")
    for phase, values in watcher.lateness.items():
        print(f"  {phase:22}{len(values):7}{len(values) / watcher.seconds[phase]:9.0f}"
              f"{percentile(values, 50):8.0f}ms{percentile(values, 99):8.0f}ms"
              f"{max(values, default=float('nan')):8.0f}ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=1000, help="parked notifications")
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
    parser.add_argument("--world", choices=("own", "same"), default="own",
                        help="the sandbox fakes in a process of their own (as a real Jira and "
                             "Lark are elsewhere), or served by the measured process")
    parser.add_argument("--ramp-timeout", type=float, default=180,
                        help="give up when not every execution has parked after this")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
