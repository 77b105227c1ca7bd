"""Latency under load: from a trigger's 202 to its assign call reaching Jira, at half of the
saturation rate of a real service process.

The service and its world are those of ``e2e_dispatch.py``: a real ``python -m
ticket_dispatcher serve --insecure-no-auth`` process on a temporary SQLite file or, with
``--postgres-url``, a throw-away PostgreSQL schema, against tests/peer.py's fake Jira in a
process of its own (``python bench/floors.py jira``), one round-robin assign policy over 10
engineers, every issue P3, ``Todo``, unassigned, with the auto-assign label; 10 warm-up
dispatches first.

1. Saturation: ``--saturation-triggers`` triggers (default 600) posted from 10 threads as fast
   as the service answers, as ``e2e_dispatch.py`` posts them; dispatches per second from the
   first POST to the last execution's ``completed_at``. ``--saturation R`` skips this and
   takes R.
2. Half of it, open loop: for ``--seconds`` (default 20), trigger ``i`` is posted at
   ``i / rate`` (rate = saturation / 2, or ``--rate``) from a pool of threads, so a slow answer
   delays no later trigger. For each, the wall-clock time its 202 came back.
3. Once every execution is terminal, the fake Jira's call log gives the time each issue's
   ``PUT /rest/api/2/issue/{key}/assignee`` arrived (the same machine's wall clock, taken as
   the fake's WSGI app is called). Latency = that arrival minus the 202.

Printed: the rates, then p50, p95, p99 and the largest latency side by side, and the same for
the POST itself (sent to 202). Checks: every execution succeeded and Jira got exactly one PUT
assignee per issue. Goal: p99 < 50 ms on both engines. About a minute per engine.

    python bench/latency.py [--seconds 20] [--saturation-triggers 600] [--saturation R]
                            [--rate R] [--postgres-url URL] [--timeout 90]
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import requests
from databases import fresh_database  # also puts the repository root on sys.path
from e2e_dispatch import (
    PROJECT,
    WARM_UP,
    dispatch,
    executions_of,
    new_issues,
    post_all,
    seed,
    start_service,
    wait_terminal,
)
from floors import JiraProcess

from tests.process import BASE

GOAL_MS = 50
POSTING_THREADS = 32


def percentile(values: list[float], q: float) -> float:
    """Nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def fire(url: str, keys: list[str], rate: float) -> dict[str, tuple[float, float]]:
    """Open loop: POST ``n`` is sent at ``n / rate``; each key's (sent, 202) wall-clock
    times."""
    local = threading.local()

    def one(key: str) -> tuple[float, float]:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        sent = time.time()
        local.session.post(f"{url}{BASE}/dispatch/triggers", timeout=30, json={
            "source": "jira_automation", "input": {"issue_key": key}}).raise_for_status()
        return sent, time.time()

    futures: dict[str, Future] = {}
    with ThreadPoolExecutor(POSTING_THREADS) as pool:
        start = time.perf_counter()
        for n, key in enumerate(keys):
            time.sleep(max(0.0, start + n / rate - time.perf_counter()))
            futures[key] = pool.submit(one, key)
        return {key: future.result() for key, future in futures.items()}


def assign_arrivals(calls: list[dict]) -> dict[str, list[float]]:
    """Each issue's PUT assignee arrival times at the fake Jira."""
    arrivals: dict[str, list[float]] = {}
    for call in calls:
        if call["method"] == "PUT" and call["path"].endswith("/assignee") and call["key"]:
            arrivals.setdefault(call["key"], []).append(call["at"])
    return arrivals


def row(name: str, values: list[float]) -> str:
    cells = "".join(f"{percentile(values, q):9.1f}" for q in (50, 95, 99))
    return f"  {name:34}{cells}{max(values, default=float('nan')):9.1f}  ({len(values)})"


def run(args: argparse.Namespace) -> None:
    engine = "PostgreSQL" if args.postgres_url else "SQLite"
    with fresh_database(args.postgres_url) as database_url, JiraProcess() as jira:
        service = start_service(database_url, jira)
        try:
            seed(service, jira, 10)
            post_all(service, new_issues(jira, PROJECT, 1, WARM_UP))
            wait_terminal(service, WARM_UP, args.timeout)
            done = WARM_UP
            saturation = args.saturation
            if saturation is None:
                keys = new_issues(jira, PROJECT, 100_000, args.saturation_triggers)
                done += len(keys)
                saturation = dispatch(service, jira, keys, done, args.timeout).rate
            rate = args.rate or saturation / 2
            keys = new_issues(jira, PROJECT, 200_000, max(1, round(rate * args.seconds)))
            _, since = jira.calls()
            times = fire(service.url, keys, rate)
            done += len(keys)
            wait_terminal(service, done, args.timeout)
            ended = executions_of(service, set(keys))
            calls, _ = jira.calls(since)
        finally:
            service.kill()
    arrivals = assign_arrivals(calls)
    failed = [e["issue_key"] for e in ended if e["status"] != "succeeded"]
    twice = [key for key, at in arrivals.items() if len(at) != 1]
    missing = [key for key in keys if key not in arrivals]
    latency = [1000 * (arrivals[key][0] - times[key][1]) for key in keys if key in arrivals]
    posting = [1000 * (answered - sent) for sent, answered in times.values()]
    print(f"latency under load, {engine}: saturation {saturation:.1f} dispatches/s"
          f"{' (given)' if args.saturation else ''}; {len(keys)} triggers at {rate:.1f}/s "
          f"({rate / saturation:.2f} of saturation) for {args.seconds:g} s, open loop")
    print(f"  {'milliseconds':34}{'p50':>9}{'p95':>9}{'p99':>9}{'max':>9}")
    print(row("202 -> PUT assignee at Jira", latency))
    print(row("POST sent -> 202", posting))
    p99 = percentile(latency, 99)
    print(f"  goal p99 < {GOAL_MS} ms: {'met' if p99 < GOAL_MS else 'not met'}")
    for what, keys_wrong in (("not succeeded", failed), ("PUT assignee not once", twice),
                             ("no PUT assignee", missing)):
        if keys_wrong:
            print(f"  NOT OK, {what}: {len(keys_wrong)} (e.g. {', '.join(keys_wrong[:5])})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20,
                        help="how long the triggers at half of saturation are posted")
    parser.add_argument("--saturation-triggers", type=int, default=600,
                        help="triggers of the closed-loop run that measures saturation")
    parser.add_argument("--saturation", type=float,
                        help="take this saturation rate (dispatches/s) instead of measuring")
    parser.add_argument("--rate", type=float, help="post at this rate instead of half of "
                                                   "saturation")
    parser.add_argument("--postgres-url", help="run on PostgreSQL (a throw-away schema) "
                                               "instead of a temporary SQLite file")
    parser.add_argument("--timeout", type=float, default=90,
                        help="seconds the executions may take to end after the posting")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
