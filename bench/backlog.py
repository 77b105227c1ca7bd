"""A P0 behind a backlog: how soon its card goes out while 10,000 ordinary triggers wait.

After an outage Jira Automation replays what it could not send, thousands of ordinary triggers
at once. This bench starts a real ``serve`` on a database that holds ``--backlog`` pending
``jira_automation`` triggers (as the replay left them: boot recovery hands every one to the
trigger actors), then posts ``--p0`` notification triggers for P0 issues over HTTP, one every
``--every`` seconds, and prints, for each ``lanes.notification_share`` of ``--shares`` (``0``:
one line, first in first out, the order before lanes; ``4``: the default):

- from each P0 trigger's 202 to its card sent (the card action's ``finished_at``, a server
  time; the 202 is the client's, on the same machine and clock): median and p99;
- the backlog's drain: seconds from the server's start until the last ordinary trigger ended
  (the longest any ordinary trigger waited), and ordinary triggers ended per second over it.

``--flood N`` puts N pending notification triggers (P0s, for GTOC issues of their own) beside
the backlog at the start, written before it (a line in order of arrival serves them all first):
the worst case for the ordinary lane, a notification always waiting. It prints how many
ordinary triggers ended while notifications still waited, at what rate, and their part of all
the triggers that ended meanwhile, against the part docs/design.md ("Lanes") promises them:
at least one turn in ``share + 1``.

The fakes of Jira, Lark, Oncall and Core are a ``serve --sandbox`` process of their own (as
bench/parked_waits.py's ``--world own``): the measured server is a plain ``serve`` pointed at
them, on a database seeded with the examples (the TCID round robin, the P0 assignee family).
Its issues are created in the sandbox first: TCID-20001… (P3, ``auto-dispatch``) and GTOC-1000…
(P0, ``Todo``, ``notify-assignee``, an assignee with a phone).

    python bench/backlog.py [--backlog 10000] [--p0 20] [--every 0.5] [--shares 0 4]
                            [--flood 0] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import requests
from databases import fresh_database
from floors import wait_http
from intake import free_port
from parked_waits import (
    API,
    ROOT,
    create_issues,
    in_threads,
    notification_issue,
    post_trigger,
    seed,
    world_settings,
)

from ticket_dispatcher.store import Store, unit_of_work
from ticket_dispatcher.store.models import TriggerRow
from ticket_dispatcher.timeutil import parse_rfc3339

ORDINARY, NOTIFY = "jira_automation", "jira_assignment_assignee"
FLOOD_FIRST = 50_000  # the flood's GTOC issues, clear of the P0s posted over HTTP
DRAIN_TIMEOUT_S = 900.0


def backlog_key(n: int) -> str:
    return f"TCID-{20_000 + n}"  # the example TCID round robin assigns them


def backlog_issue(n: int) -> dict:
    return {"key": backlog_key(n), "summary": "bench: replayed after an outage",
            "priority": "P3", "status": "WAITING FOR FIRST RESPONSE", "labels": ["auto-dispatch"]}


def flood_issue(n: int) -> dict:
    return notification_issue(FLOOD_FIRST - 1000 + n)


@contextmanager
def in_store(database_url: str) -> Iterator[Store]:
    """The measured server's database, opened for one unit of work of the bench's own."""
    store = Store.for_url(database_url)
    try:
        with unit_of_work(store.db):
            yield store
    finally:
        store.close()


def flood_key(n: int) -> str:
    return f"GTOC-{FLOOD_FIRST + n}"  # P0 notification issues of their own


def pending_backlog(database_url: str, count: int, flood: int = 0) -> None:
    """``count`` pending ordinary triggers, as Jira Automation's replay leaves them, after
    ``flood`` pending notification triggers."""
    now = datetime.now(UTC)
    rows = [{"source": source, "issue_key": key, "input_json": {"issue_key": key},
             "status": "pending", "output_json": {"execution_ids": []},
             "created_at": now, "updated_at": now, "available_at": now}
            for source, key in [(NOTIFY, flood_key(n)) for n in range(flood)]
            + [(ORDINARY, backlog_key(n)) for n in range(1, count + 1)]]
    with in_store(database_url):
        for start in range(0, len(rows), 500):
            TriggerRow.insert_many(rows[start:start + 500]).execute()


def open_triggers(database_url: str) -> int:
    with in_store(database_url):
        return TriggerRow.select().where(TriggerRow.status.in_(("pending", "processing"))
                                         ).count()


def last_end(database_url: str, source: str) -> datetime | None:
    """When the last trigger of ``source`` ended."""
    with in_store(database_url):
        row = (TriggerRow.select(TriggerRow.completed_at).where(TriggerRow.source == source)
               .order_by(TriggerRow.completed_at.desc()).first())
        return row.completed_at if row else None


def ended_by(database_url: str, source: str, moment: datetime) -> int:
    """Triggers of ``source`` ended at or before ``moment``."""
    with in_store(database_url):
        return TriggerRow.select().where((TriggerRow.source == source)
                                         & (TriggerRow.completed_at <= moment)).count()


def card_sent(session: requests.Session, url: str, trigger_id: int,
              timeout: float = DRAIN_TIMEOUT_S) -> datetime:
    """When the card of the trigger's execution was sent (its action's ``finished_at``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trigger = session.get(f"{url}{API}/dispatch/triggers/{trigger_id}", timeout=30).json()
        for execution_id in trigger["output"]["execution_ids"]:
            execution = session.get(f"{url}{API}/dispatch/executions/{execution_id}",
                                    timeout=30).json()
            card = execution["rule_executions"][0]["action_executions"][0]
            if card["finished_at"]:
                return parse_rfc3339(card["finished_at"])
        time.sleep(0.2)
    raise SystemExit(f"trigger {trigger_id}: no card within {timeout:g} s")


def percentile(values: list[float], q: float) -> float:
    """Nearest rank; NaN for no values (``--p0 0``: the drain alone)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(args: argparse.Namespace, world: str, share: int) -> dict:
    with fresh_database(args.postgres_url) as database_url:
        seed(database_url)
        pending_backlog(database_url, args.backlog, args.flood)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = dict(os.environ, TICKET_DISPATCHER_DATABASE_URL=database_url,
                   TICKET_DISPATCHER_HTTP_TRIGGER_RATE="0",
                   TICKET_DISPATCHER_LOG_LEVEL="WARNING",
                   TICKET_DISPATCHER_LANES_NOTIFICATION_SHARE=str(share), **world_settings(world))
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "ticket_dispatcher", "serve", "--port", str(port),
                 "--insecure-no-auth"], env=env, cwd=ROOT, stderr=log,
                stdout=subprocess.DEVNULL)
        try:
            wait_http(f"{url}/readyz", process, timeout=120)
            started = datetime.now(UTC)
            session = requests.Session()
            posted = []
            for n in range(args.p0):
                sent = datetime.now(UTC)
                posted.append((post_trigger(session, url, NOTIFY, f"GTOC-{1000 + n}"), sent))
                time.sleep(args.every)
            latencies = [(card_sent(session, url, trigger_id) - sent).total_seconds()
                         for trigger_id, sent in posted]
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while open_triggers(database_url) and time.monotonic() < deadline:
                time.sleep(0.5)
            drained = (last_end(database_url, ORDINARY) - started).total_seconds()
            flooded = None  # (seconds, ordinary triggers ended) while the flood waited
            if args.flood:
                flood_end = last_end(database_url, NOTIFY)
                flooded = ((flood_end - started).total_seconds(),
                           ended_by(database_url, ORDINARY, flood_end))
        finally:
            process.terminate()
            process.wait(30)
    return {"share": share, "p50": statistics.median(latencies) if latencies else float("nan"),
            "p99": percentile(latencies, 0.99), "drain": drained,
            "rate": args.backlog / drained, "flooded": flooded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--p0", type=int, default=20, help="P0 notification triggers posted")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between two P0s")
    parser.add_argument("--shares", type=int, nargs="+", default=[0, 4],
                        help="lanes.notification_share values to run (0: first in first out)")
    parser.add_argument("--flood", type=int, default=0,
                        help="pending notification triggers beside the backlog at the start")
    parser.add_argument("--postgres-url")
    args = parser.parse_args()
    world_port = free_port()
    world = f"http://127.0.0.1:{world_port}"
    with tempfile.TemporaryDirectory() as tmp:
        fakes = subprocess.Popen(
            [sys.executable, "-m", "ticket_dispatcher", "serve", "--sandbox", "--port",
             str(world_port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=dict(os.environ, TICKET_DISPATCHER_DATABASE_URL=f"sqlite:///{tmp}/world.db",
                     TICKET_DISPATCHER_HTTP_THREADS="16", TICKET_DISPATCHER_LOG_LEVEL="WARNING"))
        try:
            wait_http(f"{world}/readyz", fakes, timeout=60)
            print(f"creating {args.backlog} backlog issues and {args.p0} P0 issues in the "
                  f"sandbox", flush=True)
            create_issues(world, [backlog_issue(n) for n in range(1, args.backlog + 1)])
            create_issues(world, [notification_issue(n) for n in range(args.p0)])
            create_issues(world, [flood_issue(n) for n in range(args.flood)])
            results = []
            for share in args.shares:
                # the same issues for each run: put the labels back that a run consumed
                in_threads(lambda session, n: session.post(
                    f"{world}/sandbox/_control/issues", json=notification_issue(n),
                    timeout=30).raise_for_status(), range(args.p0))
                in_threads(lambda session, n: session.post(
                    f"{world}/sandbox/_control/issues", json=backlog_issue(n),
                    timeout=30).raise_for_status(), range(1, args.backlog + 1))
                in_threads(lambda session, n: session.post(
                    f"{world}/sandbox/_control/issues", json=flood_issue(n),
                    timeout=30).raise_for_status(), range(args.flood))
                print(f"lanes.notification_share = {share}: {args.backlog} pending, "
                      f"{args.p0} P0s one every {args.every:g} s", flush=True)
                results.append(run(args, world, share))
        finally:
            fakes.terminate()
            fakes.wait(30)
    engine = "PostgreSQL" if args.postgres_url else "SQLite"
    print(f"\n{engine}, {args.backlog} ordinary triggers pending at the start, "
          f"{args.p0} P0 notifications posted one every {args.every:g} s")
    print("the backlog is drained when its last trigger ends: that is also the longest an "
          "ordinary trigger waited")
    print(f"{'notification_share':>18}  {'P0 202→card p50':>15}  {'p99':>7}  "
          f"{'backlog drained':>15}  {'ordinary/s':>10}")
    for r in results:
        label = f"{r['share']}" + (" (FIFO)" if r["share"] == 0 else "")
        print(f"{label:>18}  {r['p50']:>13.2f} s  {r['p99']:>5.2f} s  {r['drain']:>13.1f} s  "
              f"{r['rate']:>10.0f}")
    if args.flood:
        print(f"\nwith {args.flood} notification triggers pending beside the backlog at the "
              "start (written first):")
        for r in results:
            seconds, ordinary = r["flooded"]
            share = r["share"]
            turns = ordinary / (ordinary + args.flood)
            floor = f"at least 1/{share + 1} = {1 / (share + 1):.0%}" if share else "none"
            print(f"  share {share}: the flood's last trigger ended after {seconds:.1f} s; "
                  f"{ordinary} ordinary triggers ended meanwhile ({ordinary / seconds:.1f}/s), "
                  f"{turns:.0%} of the triggers that ended (the rule: {floor}); the last "
                  f"ordinary one after {r['drain']:.1f} s")


if __name__ == "__main__":
    main()
