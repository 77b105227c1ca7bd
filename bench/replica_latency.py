"""Latency from a trigger's 202 to the start of its execution: one replica in single mode next
to three replicas in shared mode, on PostgreSQL, with a fast Jira.

Shared mode puts the database between intake and execution: the replica that accepted a
trigger may hand it, or the execution it creates, to whichever replica claims it first
(``FOR UPDATE SKIP LOCKED`` under a lease, woken through ``LISTEN/NOTIFY``). That must not make
a dispatch noticeably slower to start: the goal is a median within 1.5x of single mode. Jira
answers every call after ``--jira-latency`` seconds (default 3 ms; tests/peer.py, served from a
thread of this process), so what is measured is the service's own work (intake, the trigger's
issue load, matching, creation, the claim or hand-over, the execution's issue load and rule
evaluation), not a slow peer.

Runs, each on a fresh PostgreSQL schema (bench/databases.py), with real
``python -m ticket_dispatcher serve --insecure-no-auth`` processes (bench/replicas.py starts
them: the first one migrates the schema before the others start), ``execution_slots`` 10,
``trigger_actors`` 4 (the defaults), the trigger rate limit off, log level WARNING:

- single: one replica, ``cluster.mode = "single"``;
- shared: ``--shared-replicas`` (default 3) replicas, ``cluster.mode = "shared"``
  (``cluster.drain`` 100 ms, so the run ends without waiting for more intake).

Each run seeds one active policy that round-robins every BENCH issue over 10 engineers (an
``assign`` action; no cached Jira accounts, so every execution also searches Jira for one),
warms up with one trigger per replica (waited for, not counted: a process's first request pays
for lazy imports and new connections), then posts ``--triggers`` (default 100) assign
triggers for distinct issues (so no live mutual exclusion holds one back) at a steady
``--rate`` (default 5 per second in total, so about 20 s), round-robin over the replicas, each
POST sent on schedule from a thread pool so a slow answer does not delay the next. Once every
execution is terminal, the bench reads, per trigger:

- the trigger's ``created_at`` (``GET /dispatch/triggers/{id}``), stamped by the server that
  answered 202 in the transaction that stored it, so it precedes the 202 by that commit and
  the answer (the median of that gap, as the client saw it, is printed below the table);
- its execution (the trigger's ``output.execution_ids``, exactly one here) with
  ``GET /dispatch/executions/{id}``: its ``created_at``, and the **start of the execution**,
  defined as the earliest non-null ``started_at`` over
  ``rule_executions[].action_executions[]``: the moment the first action began, after the
  execution was claimed, its actor started, the issue loaded and the rule evaluated.

The latency is start - trigger ``created_at``; creation is execution ``created_at`` - trigger
``created_at``. All times come from the servers, which run on this machine with one system
clock, in milliseconds. The table shows, per run, the median and p95 (nearest rank) of both,
the worst start, and the median of start - the execution's ``created_at`` (the part shared
mode changes most: the claim or hand-over, the actor's start, its issue load and the rule's
evaluation); below it the ratio shared / single of the medians against the goal
(<= 1.5), and of the p95s for information.

One round (a single run, then a shared one) takes under a minute. The figures move by a few
milliseconds with the machine's load, which on 2 cores is enough to move the ratio by 0.2 or
more: ``--rounds`` R alternates the two runs R times and pools each one's samples, so a load
that drifts weighs on both alike.

    python bench/replica_latency.py --postgres-url postgresql://postgres@127.0.0.1:5432/test
        [--triggers 100] [--rate 5] [--jira-latency 0.003] [--shared-replicas 3]
        [--rounds 1] [--timeout 60] [--show-log]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import requests
from databases import fresh_database  # also puts the repository root on sys.path
from replicas import (
    SlowJira,
    alive_replicas,
    issue_keys,
    log_levels,
    seed,
    show_log,
    start_replicas,
    stop_replicas,
)

from tests.process import BASE, Dispatcher
from ticket_dispatcher.timeutil import parse_rfc3339

GOAL = 1.5  # the shared median may be at most this many times the single one
ENGINEERS = 10
POSTERS = 8  # client threads, so a slow answer never holds the schedule back
TERMINAL = ("succeeded", "failed")
SAMPLE_SECONDS = 0.2  # between two looks at whether every execution ended


@dataclass(frozen=True)
class Sample:
    """One trigger's times, in seconds after its ``created_at``."""

    answered: float  # the 202 as the client received it (the client's clock, same machine)
    created: float  # the execution's created_at
    started: float  # the first action's started_at


@dataclass(frozen=True)
class RunResult:
    name: str
    replicas: int
    samples: list[Sample]
    missing: int  # triggers without an execution, or an execution no action of which started


# -- posting ------------------------------------------------------------------------------------


def post_steadily(replicas: list[Dispatcher], keys: list[str], rate: float
                  ) -> list[tuple[dict, datetime]]:
    """POST ``keys[i]`` to replica ``i mod N`` at ``i / rate`` seconds after the start: each
    202's body (the trigger) and when the client received it."""
    local = threading.local()

    def post(index: int, key: str) -> tuple[dict, datetime]:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        url = replicas[index % len(replicas)].url
        response = local.session.post(f"{url}{BASE}/dispatch/triggers", timeout=30, json={
            "source": "jira_automation", "input": {"issue_key": key}})
        received = datetime.now(UTC)
        if response.status_code != 202:
            raise SystemExit(f"POST trigger {key}: {response.status_code} {response.text}")
        return response.json(), received

    start = time.monotonic()
    futures: list[Future] = []
    with ThreadPoolExecutor(POSTERS) as pool:
        for index, key in enumerate(keys):
            time.sleep(max(0.0, start + index / rate - time.monotonic()))
            futures.append(pool.submit(post, index, key))
    return [future.result() for future in futures]


def terminal(replica: Dispatcher) -> int:
    return sum(replica.call("GET", "/dispatch/executions",
                            params={"status": status, "limit": 1})["total"]
               for status in TERMINAL)


def wait_terminal(replicas: list[Dispatcher], count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (done := terminal(replicas[0])) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {done} of {count} executions terminal after {timeout:g} s"
                             + "".join(f"\nreplica {n}:\n{r.log()[-2000:]}"
                                       for n, r in enumerate(replicas)))
        time.sleep(SAMPLE_SECONDS)


# -- reading the times --------------------------------------------------------------------------


def first_action_start(execution: dict) -> datetime | None:
    starts = [parse_rfc3339(action["started_at"])
              for rule in execution["rule_executions"]
              for action in rule["action_executions"] if action["started_at"]]
    return min(starts, default=None)


def sample(replica: Dispatcher, posted: dict, received: datetime) -> Sample | None:
    trigger = replica.call("GET", f"/dispatch/triggers/{posted['id']}")
    ids = trigger["output"]["execution_ids"]
    if len(ids) != 1:
        return None
    execution = replica.call("GET", f"/dispatch/executions/{ids[0]}")
    started = first_action_start(execution)
    if started is None:
        return None
    accepted = parse_rfc3339(trigger["created_at"])

    def after(moment: datetime) -> float:
        return (moment - accepted).total_seconds()

    return Sample(answered=after(received), created=after(parse_rfc3339(execution["created_at"])),
                  started=after(started))


# -- one run ------------------------------------------------------------------------------------


def settings(mode: str) -> dict[str, str]:
    """``TICKET_DISPATCHER_*`` settings (without the prefix) of every replica of a run."""
    return {"EXECUTION_SLOTS": "10", "TRIGGER_ACTORS": "4", "HTTP_TRIGGER_RATE": "0",
            "LOG_LEVEL": "WARNING", "CLUSTER_MODE": mode, "CLUSTER_DRAIN": "100ms"}


def run(args: argparse.Namespace, jira: SlowJira, run_number: int, mode: str,
        count: int) -> RunResult:
    with fresh_database(args.postgres_url) as database_url:
        replicas = start_replicas(database_url, jira, count, settings(mode))
        try:
            seed(replicas[0], jira, ENGINEERS)
            warm = issue_keys(jira, 2 * run_number, count)
            post_steadily(replicas, warm, rate=count)
            wait_terminal(replicas, len(warm), args.timeout)
            keys = issue_keys(jira, 2 * run_number + 1, args.triggers)
            posted = post_steadily(replicas, keys, args.rate)
            wait_terminal(replicas, len(warm) + len(keys), args.timeout)
            samples = [sample(replicas[0], trigger, received) for trigger, received in posted]
            seen, logged = alive_replicas(replicas[0]), log_levels(replicas)
            if args.show_log:
                show_log(replicas)
        finally:
            stop_replicas(replicas)  # before the schema is dropped
    name = f"{count} replica{'s' if count > 1 else ''}, {mode}"
    result = RunResult(name, count, [s for s in samples if s is not None],
                       sum(s is None for s in samples))
    print(f"  {name}: {len(result.samples)} triggers measured"
          + (f", {result.missing} without a started execution" if result.missing else "")
          + f"; the first replica's /admin/actors: {seen}; logged: {logged}")
    return result


# -- the report ---------------------------------------------------------------------------------


def pooled(results: list[RunResult]) -> list[RunResult]:
    """One result per configuration, with the samples of all its rounds (in first-run order)."""
    merged: dict[str, RunResult] = {}
    for result in results:
        if (earlier := merged.get(result.name)) is None:
            merged[result.name] = result
        else:
            merged[result.name] = RunResult(result.name, result.replicas,
                                            earlier.samples + result.samples,
                                            earlier.missing + result.missing)
    return list(merged.values())


def percentile(values: list[float], share: float) -> float:
    """Nearest rank: the smallest value at least ``share`` of the values do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    return f"{1000 * seconds:.0f} ms"


def report(args: argparse.Namespace, results: list[RunResult]) -> None:
    columns = [("run", 20), ("triggers", 8), ("start p50", 10), ("start p95", 10),
               ("start max", 10), ("created p50", 11), ("created p95", 11),
               ("created->start p50", 18)]
    print()
    print("  ".join(f"{name:>{width}}" for name, width in columns))
    for result in results:
        started = [s.started for s in result.samples]
        created = [s.created for s in result.samples]
        cells = [result.name, str(len(result.samples)), ms(statistics.median(started)),
                 ms(percentile(started, 0.95)), ms(max(started)),
                 ms(statistics.median(created)), ms(percentile(created, 0.95)),
                 ms(statistics.median(s.started - s.created for s in result.samples))]
        print("  ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, columns,
                                                                       strict=True)))
    print()
    by_mode = {result.name.rsplit(", ", 1)[1]: result for result in results}
    if {"single", "shared"} <= by_mode.keys():
        single, shared = by_mode["single"], by_mode["shared"]

        def ratio(statistic: Callable[[list[float]], float]) -> float:
            return (statistic([s.started for s in shared.samples])
                    / statistic([s.started for s in single.samples]))

        median_ratio = ratio(statistics.median)
        p95_ratio = ratio(lambda values: percentile(values, 0.95))
        print(f"Ratio shared / single, median start: {median_ratio:.2f}x (goal <= {GOAL:g}x, "
              + ("met" if median_ratio <= GOAL else "MISSED")
              + f"); p95: {p95_ratio:.2f}x (for information).")
    answered = [s.answered for result in results for s in result.samples]
    print(f"start: the first action's started_at - the trigger's created_at; created: the "
          f"execution's created_at - the trigger's created_at; created->start: the first "
          f"action's started_at - the execution's created_at (the claim, the actor's start, "
          f"its issue load and the rule's evaluation). The client received the 202 "
          f"{ms(statistics.median(answered))} after created_at at the median. Jira answers "
          f"after {1000 * args.jira_latency:g} ms plus its own overhead; {args.triggers} "
          f"triggers at {args.rate:g}/s in total per run, {args.rounds} round(s); machine: "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", required=True,
                        help="PostgreSQL server to run on (each run gets a throw-away schema)")
    parser.add_argument("--triggers", type=int, default=100, help="measured triggers per run")
    parser.add_argument("--rate", type=float, default=5.0,
                        help="triggers per second, in total over the run's replicas")
    parser.add_argument("--jira-latency", type=float, default=0.003,
                        help="seconds the fake Jira waits before answering each call")
    parser.add_argument("--shared-replicas", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1,
                        help="single and shared runs, alternating; their samples are pooled")
    parser.add_argument("--timeout", type=float, default=60,
                        help="seconds to wait for the executions of a run to end")
    parser.add_argument("--show-log", action="store_true",
                        help="print what the replicas logged (WARNING and above) after each run")
    args = parser.parse_args()
    print(f"{args.triggers} triggers at {args.rate:g}/s per run: 1 replica in single mode, "
          f"then {args.shared_replicas} in shared mode" + (f", {args.rounds} times"
                                                         if args.rounds > 1 else ""))
    results = []
    runs = [("single", 1), ("shared", args.shared_replicas)] * args.rounds
    with SlowJira(args.jira_latency) as jira:
        for run_number, (mode, count) in enumerate(runs, start=1):
            try:
                results.append(run(args, jira, run_number, mode, count))
            # the other runs still say something (a refused call is an AssertionError)
            except (SystemExit, AssertionError, requests.RequestException) as failed:
                print(f"  {count} replica(s), {mode}: run failed: {failed}")
    if results:
        report(args, pooled(results))

if __name__ == "__main__":
    main()
