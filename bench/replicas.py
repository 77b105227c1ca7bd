"""Dispatches per second at 1, 2 and 3 replicas on one PostgreSQL database, with a slow Jira.

Scale-out is worth it when the peers, not the CPU, are the limit: an assign dispatch spends
most of its life waiting for Jira, so each replica's ``execution_slots`` bound how many wait at
once, and N replicas should give about N times the dispatches. This bench checks that on an
I/O-bound mix, on a 2-core machine:

- one fake Jira (tests/peer.py, served from a thread of this process, a thread per request)
  answers every call after ``--latency`` seconds (default 1 s): the issue loads, the user
  search and the PUT assignee an ``assign`` dispatch makes. Its issues carry no auto-assign
  label, so no label edit follows the assignment;
- for each N in ``--replicas`` (default 1 2 3): a fresh PostgreSQL schema (bench/databases.py),
  N real ``python -m ticket_dispatcher serve --insecure-no-auth`` processes on it (the first
  one started, and its migrations done, before the others), each with
  ``execution_slots`` 10, ``trigger_actors`` ``--trigger-actors``, the trigger rate limit off,
  log level WARNING, and ``cluster.mode`` shared. The 1-replica run uses shared mode too, so
  the same code is compared (``--baseline-mode single`` runs it in single mode instead);
- seeded once through the HTTP API of the first replica: one active policy that round-robins
  every BENCH issue over ``--per-replica`` x max(N) engineers, none with a cached Jira account,
  so nearly every dispatch searches Jira for its engineer's account (the same engineer count
  in every run, so a dispatch costs the same in each);
- ``--per-replica`` x N assign triggers (default 60 x N, distinct issue keys, so no live mutual
  exclusion holds one back) are posted round-robin over the replicas, all at once from 8
  threads; the bench waits until every execution is terminal.

Throughput is the dispatches over the time from the first POST to the last execution's
``completed_at`` (the servers stamp it from the same system clock). The table shows it next to
the ratio to 1 replica and the goals (2 replicas >= 1.8x, 3 replicas >= 2.5x), the Jira calls
per dispatch, the PUT assignee calls Jira got for the run's issues (one per dispatch: more
would be work done twice), the mean busy execution slots (sampled from each replica's
/admin/actors) and the machine's CPU (all processes, PostgreSQL included, from /proc/stat).
Below the table: the bound the slots alone set, N x 10 / (the execution's Jira calls x the
latency), where the execution's calls are the calls per dispatch less the trigger's issue
load, which a trigger actor makes. Above it, one line per run: the replicas' own CPU, how many
replicas the first one's /admin/actors lists as alive (N, when they serve as one), how many
lines each log level got (``--show-log`` prints them), and the tail: when 95% of the
executions had ended and when the last one was created and ended.

Trigger actors: each trigger's issue load holds a trigger actor for one Jira latency, so the
default 4 would feed a replica at most 4 triggers/s, about what 10 slots finish when an
execution makes 3 slow calls: raised to 8 by default so intake is not the bottleneck.

    python bench/replicas.py --postgres-url postgresql://postgres@127.0.0.1:5432/test
        [--replicas 1 2 3] [--per-replica 60] [--latency 1.0] [--trigger-actors 8]
        [--baseline-mode shared|single] [--timeout 180] [--show-log]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import requests
from databases import fresh_database  # also puts the repository root on sys.path
from intake import cpu_seconds

from tests.peer import FakeJira, Route, SlowJira
from tests.process import BASE, Dispatcher
from ticket_dispatcher.timeutil import parse_rfc3339

SLOTS = 10
PROJECT = "BENCH"
GOALS = {2: 1.8, 3: 2.5}  # replicas -> the least ratio to 1 replica
TERMINAL = ("succeeded", "failed")
POSTERS = 8  # client threads posting the triggers
SAMPLE_SECONDS = 0.5  # between two looks at the executions and the replicas' pools


@dataclass(frozen=True)
class RunResult:
    replicas: int
    mode: str
    dispatches: int
    failed: int
    seconds: float
    jira_calls: int
    assign_puts: int  # PUT assignee calls for this run's issues: one per dispatch, no more
    busy: list[float]  # mean busy execution slots, per replica
    machine_cpu: float  # share of all CPUs busy, 0..1
    tail: str  # when 95% had ended, and what the last execution did

    @property
    def rate(self) -> float:
        return self.dispatches / self.seconds


# -- the replicas -------------------------------------------------------------------------------


def settings(args: argparse.Namespace, mode: str) -> dict[str, str]:
    """``TICKET_DISPATCHER_*`` settings (without the prefix) of every replica."""
    return {
        "EXECUTION_SLOTS": str(SLOTS),
        "TRIGGER_ACTORS": str(args.trigger_actors),
        "HTTP_TRIGGER_RATE": "0",
        "LOG_LEVEL": "WARNING",
        "CLUSTER_MODE": mode,
        # a Jira slower than the default 10 s read timeout would fail every call
        "INTEGRATIONS_READ_TIMEOUT": f"{max(10.0, 3 * args.latency):g}s",
    }


def wait_ready(replica: Dispatcher, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if replica.process.poll() is not None:
            raise SystemExit(f"replica on port {replica.port} exited with "
                             f"{replica.process.returncode} before it was ready:\n"
                             f"{replica.log()[-3000:]}")
        try:
            if requests.get(f"{replica.url}/readyz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise SystemExit(f"replica on port {replica.port} not ready within {timeout:g} s:\n"
                     f"{replica.log()[-3000:]}")


def start_replicas(database_url: str, jira: FakeJira, count: int,
                   environment: dict[str, str]) -> list[Dispatcher]:
    """The first replica migrates the fresh schema alone; the others start once it is ready."""
    replicas = [Dispatcher(database_url, jira, environment)]
    try:
        wait_ready(replicas[0])
        replicas += [Dispatcher(database_url, jira, environment) for _ in range(count - 1)]
        for replica in replicas[1:]:
            wait_ready(replica)
    except BaseException:
        stop_replicas(replicas)
        raise
    return replicas


def stop_replicas(replicas: list[Dispatcher]) -> None:
    """SIGTERM to all at once (a shared-mode replica drains for a while), then wait for each."""
    for replica in replicas:
        if replica.process.poll() is None:
            replica.terminate()
    for replica in replicas:
        replica.kill()  # SIGKILL only if SIGTERM did not end it in time


# -- the world ----------------------------------------------------------------------------------


def engineer(n: int) -> str:
    return f"eng{n:04d}@example.com"  # zero-padded: Jira's fuzzy search finds exactly one


def seed(replica: Dispatcher, jira: FakeJira, engineers: int) -> None:
    """Engineers without a cached Jira account, and one active round-robin policy."""
    emails = [engineer(n) for n in range(engineers)]
    for n, email in enumerate(emails):
        jira.add_user(email, f"acc-{n:04d}")
        replica.call("PUT", f"/engineers/{email}", (200, 201), json={"dispatch_enabled": True})
    policy = replica.call("POST", "/dispatch/policies", (201,), json={
        "name": "bench round robin", "description": "every BENCH issue, round robin",
        "trigger": {"enable": True, "source_in": [], "project_key_in": [PROJECT],
                    "issue_label_all": []},
        "rules": [{"name": "everything", "priority": 10, "when": {"always": True},
                   "then": [{"type": "assign", "assign": {
                       "receiver": {"type": "users", "users": emails},
                       "strategy": "round_robin"}}],
                   "transition": {"on_success": "terminate"}}]})
    replica.call("POST", f"/dispatch/policies/{policy['id']}/activate")


def issue_keys(jira: FakeJira, run_number: int, count: int) -> list[str]:
    """``count`` new issues; the run's number in the key keeps runs apart in the one fake."""
    keys = [f"{PROJECT}-{run_number * 10_000 + n}" for n in range(1, count + 1)]
    for key in keys:
        jira.add_issue(key, priority="P3", status="Todo")
    return keys


# -- load and measure ---------------------------------------------------------------------------


def post_all(replicas: list[Dispatcher], keys: list[str]) -> None:
    """Trigger ``keys[i]`` on replica ``i mod N``, from ``POSTERS`` threads."""
    local = threading.local()

    def post(indexed: tuple[int, str]) -> None:
        index, key = indexed
        if not hasattr(local, "session"):
            local.session = requests.Session()
        url = replicas[index % len(replicas)].url
        local.session.post(f"{url}{BASE}/dispatch/triggers", timeout=30, json={
            "source": "jira_automation", "input": {"issue_key": key}}).raise_for_status()

    with ThreadPoolExecutor(POSTERS) as pool:
        list(pool.map(post, enumerate(keys)))


def total(replica: Dispatcher, status: str) -> int:
    return replica.call("GET", "/dispatch/executions", params={"status": status,
                                                              "limit": 1})["total"]


def alive_replicas(replica: Dispatcher) -> str:
    """How many replicas this one's /admin/actors lists as alive: all N when they serve as
    one cluster."""
    views = replica.call("GET", "/admin/actors").get("replicas")
    if not isinstance(views, list):
        return "no replica list"
    return f"{sum(1 for view in views if view.get('alive'))} alive"


def log_levels(replicas: list[Dispatcher]) -> str:
    """How many log lines each level got over all replicas (the start's WARNING that
    authentication is off included); anything but that is worth a look, with ``--show-log``."""
    levels: Counter[str] = Counter()
    for replica in replicas:
        for line in replica.lines:
            try:
                levels[json.loads(line).get("level", "?")] += 1
            except (ValueError, AttributeError):
                levels["not JSON"] += 1
    return ", ".join(f"{count} {level}" for level, count in sorted(levels.items())) or "nothing"


def show_log(replicas: list[Dispatcher]) -> None:
    for number, replica in enumerate(replicas):
        for line in replica.lines:
            if "AUTHENTICATION IS OFF" not in line:
                print(f"    replica {number}: {line.rstrip()}")


def busy_slots(replicas: list[Dispatcher]) -> list[int]:
    return [replica.call("GET", "/admin/actors")["pool"]["busy"] for replica in replicas]


def wait_terminal(replicas: list[Dispatcher], count: int, timeout: float) -> list[list[int]]:
    """Every ``SAMPLE_SECONDS`` until ``count`` executions are terminal: each replica's busy
    slots, one list per sample."""
    deadline = time.monotonic() + timeout
    samples = []
    while True:
        samples.append(busy_slots(replicas))
        done = sum(total(replicas[0], status) for status in TERMINAL)
        if done >= count:
            return samples
        if time.monotonic() > deadline:
            raise SystemExit(f"only {done} of {count} executions terminal after {timeout:g} s"
                             + "".join(f"\nreplica {n}:\n{r.log()[-2000:]}"
                                       for n, r in enumerate(replicas)))
        time.sleep(SAMPLE_SECONDS)


def executions(replica: Dispatcher) -> list[dict]:
    items: list[dict] = []
    while True:
        page = replica.call("GET", "/dispatch/executions",
                            params={"limit": 200, "offset": len(items)})
        items += page["items"]
        if len(items) >= page["total"] or not page["items"]:
            return items


def cpu_times() -> tuple[int, int]:
    """(all, idle) jiffies of the whole machine so far (the first line of /proc/stat)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]  # idle + iowait


def measure(replicas: list[Dispatcher], jira: FakeJira, keys: list[str], mode: str,
            timeout: float) -> RunResult:
    calls_before, (cpu_all, cpu_idle) = len(jira.calls()), cpu_times()
    wanted = set(keys)
    first_post = datetime.now(UTC)
    post_all(replicas, keys)
    samples = wait_terminal(replicas, len(keys), timeout)
    cpu_all_after, cpu_idle_after = cpu_times()
    ended = executions(replicas[0])
    last_end = max(parse_rfc3339(e["completed_at"]) for e in ended)
    return RunResult(
        replicas=len(replicas), mode=mode, dispatches=len(ended),
        failed=sum(e["status"] != "succeeded" for e in ended),
        seconds=(last_end - first_post).total_seconds(),
        jira_calls=len(jira.calls()) - calls_before,
        assign_puts=sum(call.key in wanted for call in jira.calls(Route.ASSIGN)),
        busy=[statistics.fmean(column) for column in zip(*samples, strict=True)],
        machine_cpu=1 - (cpu_idle_after - cpu_idle) / max(1, cpu_all_after - cpu_all),
        tail=tail(ended, first_post))


def tail(ended: list[dict], first_post: datetime) -> str:
    """A straggler stretches the run: when 95% of the executions had ended, and when the
    last one was created and ended, in seconds after the first POST."""
    def after(text: str) -> float:
        return (parse_rfc3339(text) - first_post).total_seconds()

    ends = sorted(after(e["completed_at"]) for e in ended)
    last = max(ended, key=lambda e: e["completed_at"])
    return (f"95% ended by +{ends[int(0.95 * (len(ends) - 1))]:.1f} s; the last, "
            f"{last['issue_key']}, was created at +{after(last['created_at']):.1f} s and "
            f"ended at +{ends[-1]:.1f} s")


def run(args: argparse.Namespace, jira: SlowJira, run_number: int, count: int) -> RunResult:
    mode = args.baseline_mode if count == 1 else "shared"
    engineers = args.per_replica * max(args.replicas)
    with fresh_database(args.postgres_url) as database_url:
        replicas = start_replicas(database_url, jira, count, settings(args, mode))
        try:
            seed(replicas[0], jira, engineers)
            keys = issue_keys(jira, run_number, args.per_replica * count)
            cpu_before = sum(cpu_seconds(r.process.pid) for r in replicas)
            result = measure(replicas, jira, keys, mode, args.timeout)
            cpu = sum(cpu_seconds(r.process.pid) for r in replicas) - cpu_before
            seen = alive_replicas(replicas[0])
            logged = log_levels(replicas)
            if args.show_log:
                show_log(replicas)
        finally:
            stop_replicas(replicas)  # before the schema is dropped
    print(f"  {count} replica(s), {mode}: {result.dispatches} dispatches in "
          f"{result.seconds:.1f} s; replicas' CPU {100 * cpu / result.seconds:.0f}% of a core; "
          f"the first replica's /admin/actors: {seen}; logged: {logged}\n    {result.tail}")
    return result


# -- the report ---------------------------------------------------------------------------------


def report(args: argparse.Namespace, results: list[RunResult]) -> None:
    base = next((r.rate for r in results if r.replicas == 1), None)
    columns: list[tuple[str, int, Callable[[RunResult], str]]] = [
        ("replicas", 8, lambda r: str(r.replicas)),
        ("mode", 7, lambda r: r.mode),
        ("dispatches", 10, lambda r: f"{r.dispatches}" + (f" ({r.failed} failed)"
                                                          if r.failed else "")),
        ("seconds", 8, lambda r: f"{r.seconds:.1f}"),
        ("dispatches/s", 12, lambda r: f"{r.rate:.2f}"),
        ("ratio", 6, lambda r: f"{r.rate / base:.2f}x" if base else "-"),
        ("goal", 13, lambda r: goal(r, base)),
        ("Jira calls/dispatch", 19, lambda r: f"{r.jira_calls / r.dispatches:.1f}"),
        ("PUT assignee", 12, lambda r: str(r.assign_puts)),
        ("busy slots/replica", 18, lambda r: " ".join(f"{b:.1f}" for b in r.busy)),
        ("machine CPU", 11, lambda r: f"{100 * r.machine_cpu:.0f}%"),
    ]
    print()
    print("  ".join(f"{name:>{width}}" for name, width, _ in columns))
    for result in results:
        print("  ".join(f"{cell(result):>{width}}" for _, width, cell in columns))
    print()
    calls = results[0].jira_calls / results[0].dispatches - 1  # less the trigger's load
    bound = SLOTS / (calls * args.latency)
    print(f"Jira answers every call after {args.latency:g} s; {SLOTS} execution slots and "
          f"{args.trigger_actors} trigger actors per replica (the default 4 trigger actors "
          f"would cap a replica's intake at {4 / args.latency:g} triggers/s); machine: "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end.")
    print(f"The slots alone bound N replicas at N x {SLOTS} / ({calls:.1f} calls x "
          f"{args.latency:g} s) = N x {bound:.2f} dispatches/s; the measured time also holds "
          "the first trigger's load and the last execution's tail.")
    print(f"Busy slots: mean of /admin/actors samples every {SAMPLE_SECONDS:g} s; machine "
          "CPU: share of all CPUs busy (every process, PostgreSQL and this bench included) "
          "from the first POST to the end.")


def goal(result: RunResult, base: float | None) -> str:
    least = GOALS.get(result.replicas)
    if least is None or not base:
        return "-"
    return f">= {least:g}x " + ("met" if result.rate / base >= least else "MISSED")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", required=True,
                        help="PostgreSQL server to run on (each run gets a throw-away schema)")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--per-replica", type=int, default=60,
                        help="dispatches per replica in each run (K = this x N)")
    parser.add_argument("--latency", type=float, default=1.0,
                        help="seconds the fake Jira takes to answer every call")
    parser.add_argument("--trigger-actors", type=int, default=8)
    parser.add_argument("--baseline-mode", choices=("shared", "single"), default="shared",
                        help="cluster mode of the 1-replica run (more replicas are shared)")
    parser.add_argument("--timeout", type=float, default=180,
                        help="seconds a run may take before the bench gives up")
    parser.add_argument("--show-log", action="store_true",
                        help="print what the replicas logged (WARNING and above) after each run")
    args = parser.parse_args()
    print(f"{len(args.replicas)} runs: {', '.join(map(str, args.replicas))} replica(s), "
          f"{args.per_replica} dispatches per replica, Jira latency {args.latency:g} s")
    results = []
    with SlowJira(args.latency) as jira:
        for run_number, count in enumerate(args.replicas, start=1):
            try:
                results.append(run(args, jira, run_number, count))
            # the other runs still say something (a refused call is an AssertionError)
            except (SystemExit, AssertionError, requests.RequestException) as failed:
                print(f"  {count} replica(s): run failed: {failed}")
    if results:
        report(args, results)


if __name__ == "__main__":
    main()
