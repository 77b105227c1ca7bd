"""The burden report on a year of history: how long the report takes, and the plans of its
queries.

Goal: under 300 ms on SQLite and on PostgreSQL with a year of history of 100,000 executions,
30,000 of them paging (docs/burden-report.md).

For each engine (a temporary SQLite file, or a throw-away PostgreSQL schema with
``--postgres-url``) the bench migrates an empty database and writes, as the service's
checkpoints would have, the ``burden_events`` rows of a year (multi-row INSERTs of 500; the
database's trigger adds each to its monthly tallies, as it does for the service):

- ``--executions`` executions, ``--pages`` of them notification workflows: each a card, an
  App-urgent message and a page (a tenth of them escalated to a leader), three in four with
  an ACK (read or status change); the rest assignments in 5 projects by 40 rotations
  (``group:team-N``, 10 members each, their candidates and counts of open issues kept), two
  for each of 20 policy families: a rotation is the receiver of its policy's assign action,
  and each person is in two rotations, so works for one or two policies;
- the 200 engineers they name, in 6 time zones, half with working hours, and 2,000 time-off
  entries over the year;

then ``VACUUM ANALYZE`` (PostgreSQL's autovacuum would after such a load; SQLite is left
as the service leaves it). The report reads this table alone, never the executions, so none are
written.

Printed per engine and report (the default 28 days; the whole year; the 28 days of one
policy, one project and one rotation): the median and the slowest of ``--runs`` reports
(``BurdenRepository.report``, the JSON the API answers, built in this process), PASS or FAIL
against 300 ms; the same for the year answered by the falcon app over a real actor runtime
(bench/apps.py, as bench/console.py renders pages): the API's JSON and CSV with a viewer's
key, and the console page signed in as a viewer; and the plans of the report's reads for the
year and for one rotation (``BurdenRepository.explain``: SQLite's ``EXPLAIN QUERY PLAN``,
PostgreSQL's ``EXPLAIN``), which name the indexes they read: the monthly tallies' key for the
whole months, the time index (or the scope's) for the parts of months at the ends, the ACKed
cards' index.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps import signed_in  # noqa: E402
from databases import fresh_database  # noqa: E402
from falcon import testing  # noqa: E402

from ticket_dispatcher.domain.availability import ANY_TIME  # noqa: E402
from ticket_dispatcher.domain.availability_parsing import settings_of  # noqa: E402
from ticket_dispatcher.domain.burden import BurdenQuery, band_of  # noqa: E402
from ticket_dispatcher.domain.model import Engineer  # noqa: E402
from ticket_dispatcher.http import API_BASE  # noqa: E402
from ticket_dispatcher.store import Store  # noqa: E402
from ticket_dispatcher.store.connect import is_postgres  # noqa: E402
from ticket_dispatcher.store.database import write_lock  # noqa: E402
from ticket_dispatcher.store.models import (  # noqa: E402
    BurdenEventRow,
    EngineerRow,
    PolicyRow,
    TimeOffRow,
)
from ticket_dispatcher.timeutil import format_time  # noqa: E402

BUDGET_MS = 300.0
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
YEAR = timedelta(days=365)
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Shanghai", "Asia/Tokyo",
         "America/Los_Angeles")
HOURS = {day: ["09:00-18:00"] for day in ("mon", "tue", "wed", "thu", "fri")}
PROJECTS = ("PAY", "OPS", "WEB", "APP", "DATA")
BATCH = 500


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres-url", help="also bench PostgreSQL on this server")
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--pages", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=59)
    args = parser.parse_args()
    engines = [None] + ([args.postgres_url] if args.postgres_url else [])
    for server in engines:
        with fresh_database(server) as url:
            bench(url, args)
    return 0


def bench(url: str, args: argparse.Namespace) -> None:
    store = Store.for_url(url)
    try:
        store.migrate()
        started = time.perf_counter()
        rows = seed(store, args.executions, args.pages, random.Random(args.seed))
        engine = "postgres" if is_postgres(store.db) else "sqlite"
        print(f"\n{engine}: {rows:,} burden rows of {args.executions:,} executions "
              f"({args.pages:,} paging) seeded in {time.perf_counter() - started:.1f} s")
        for name, query in queries():
            times, report = timed(store, query, args.runs)
            median, worst = statistics.median(times), max(times)
            verdict = "PASS" if median < BUDGET_MS else "FAIL"
            print(f"  {name:<24} median {median:7.1f} ms  max {worst:7.1f} ms  {verdict}  "
                  f"({len(report['people'])} people, {len(report['rotations'])} rotations, "
                  f"{sum(p['pages'] for p in report['people']):,} pages)")
        for name, (times, status) in rendered(store, args.runs).items():
            median, worst = statistics.median(times), max(times)
            verdict = "PASS" if median < BUDGET_MS else "FAIL"
            print(f"  {name:<24} median {median:7.1f} ms  max {worst:7.1f} ms  {verdict}  "
                  f"(HTTP {status}, the falcon app)")
        for name, query in (("a year", queries()[1][1]), ("28 days, one rotation",
                                                          queries()[4][1])):
            print(f"  plans of the report's reads, {name}:")
            for line in store.burden.explain(query):
                print(f"    {line}")
    finally:
        store.close()


def queries() -> list[tuple[str, BurdenQuery]]:
    return [("28 days, everyone", BurdenQuery.of(None, None, NOW)),
            ("a year, everyone", BurdenQuery.of(NOW - YEAR, NOW, NOW)),
            ("28 days, one policy", BurdenQuery.of(None, None, NOW, policy="Policy 3")),
            ("28 days, one project", BurdenQuery.of(None, None, NOW, project="PAY")),
            ("28 days, one rotation", BurdenQuery.of(None, None, NOW, rotation="group:team-7"))]


def rendered(store: Store, runs: int) -> dict[str, tuple[list[float], int]]:
    """The year's report answered by the real falcon app over a real actor runtime on
    ``store`` (bench/apps.py): the API with a viewer's key, the console signed in as a viewer;
    each warmed, then timed ``runs`` times. The times and the status of each."""
    year = urlencode({"from": format_time(NOW - YEAR), "to": format_time(NOW)})
    with signed_in(store, NOW, "viewer") as (console, api):
        gets = {"a year, the API's JSON": lambda: api.simulate_get(
                    f"{API_BASE}/reports/burden", query_string=year),
                "a year, the API's CSV": lambda: api.simulate_get(
                    f"{API_BASE}/reports/burden", query_string=f"{year}&format=csv"),
                "a year, the console": lambda: console.get(f"/console/reports/burden?{year}")}
        return {name: _timed_get(get, runs) for name, get in gets.items()}


def _timed_get(get: Callable[[], testing.Result], runs: int) -> tuple[list[float], int]:
    status = get().status_code
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = get()
        times.append((time.perf_counter() - started) * 1000)
        if answer.status_code != status:
            raise SystemExit(f"answered {answer.status_code} after {status}")
    return times, status


def timed(store: Store, query: BurdenQuery, runs: int) -> tuple[list[float], dict]:
    store.burden.report(query)  # warm: the first connection, the statements' plans
    times, report = [], {}
    for _ in range(runs):
        started = time.perf_counter()
        report = store.burden.report(query)
        times.append((time.perf_counter() - started) * 1000)
    return times, report


def seed(store: Store, executions: int, pages: int, rng: random.Random) -> int:
    """The year's rows, the engineers and their time off, the policies; how many rows."""
    people = [f"person{n:03d}@example.com" for n in range(200)]
    leaders = people[:10]
    engineers = [Engineer(email, timezone=ZONES[n % len(ZONES)],
                          working_hours=HOURS if n % 2 else None)
                 for n, email in enumerate(people)]
    settings = {e.email: settings_of(e) for e in engineers}
    families = [f"pf_bench{n:07d}" for n in range(20)]
    rotations = [(f"group:team-{n}", families[n // 2], [people[(n * 5 + k) % len(people)]
                                                        for k in range(10)])
                 for n in range(40)]
    write(store, EngineerRow, [{
        "email": e.email, "display_name": e.email.split("@")[0], "jira_account_id": "",
        "dispatch_enabled": True, "last_dispatched_issue": "", "timezone": e.timezone,
        "working_hours_json": e.working_hours, "created_at": NOW, "updated_at": NOW}
        for e in engineers])
    write(store, PolicyRow, [{
        "family_id": family, "version": 1, "status": "active", "name": f"Policy {n}",
        "description": "", "trigger_json": {}, "created_at": NOW, "updated_at": NOW}
        for n, family in enumerate(families)])
    off = []
    for _ in range(2_000):
        start = NOW - YEAR + timedelta(hours=rng.randrange(365 * 24))
        off.append({"email": rng.choice(people), "start_at": start,
                    "end_at": start + timedelta(days=rng.choice((1, 2, 5, 10))),
                    "reason": "leave", "source": "api", "created_at": NOW})
    write(store, TimeOffRow, off)
    rows: list[dict] = []
    for execution_id in range(1, executions + 1):
        sent = NOW - YEAR + timedelta(seconds=rng.randrange(int(YEAR.total_seconds())))
        rotation, family, members = rng.choice(rotations)
        project = PROJECTS[execution_id % len(PROJECTS)]
        key, person = f"{project}-{execution_id}", rng.choice(members)
        base = {"version": 1, "execution_id": execution_id, "issue_key": key,
                "project": project, "policy_id": 1, "policy_family_id": family,
                "rotation": rotation, "leader": "", "members_json": None,
                "hours_required": False, "open_counts_json": None, "band": None,
                "ack_source": None, "ack_at": None, "ack_seconds": None, "email": person}
        if execution_id > pages:
            rows.append({**base, "rule_sequence": 0, "action_index": 0, "kind": "assignment",
                         "sent_at": sent, "members_json": members,
                         "open_counts_json": {m: rng.randrange(6) for m in members}})
            continue
        band = band_of(sent, settings.get(person, ANY_TIME)).value
        acked = rng.random() < 0.75
        seconds = rng.randrange(30, 1800)
        ack = ({"ack_source": rng.choice(("card_read", "status_change")),
                "ack_at": sent + timedelta(seconds=seconds), "ack_seconds": seconds}
               if acked else {})
        rows.append({**base, **ack, "rule_sequence": 0, "action_index": 0, "kind": "card",
                     "sent_at": sent})
        rows.append({**base, "rule_sequence": 1, "action_index": 0, "kind": "urgent",
                     "sent_at": sent, "band": band})
        rows.append({**base, "rule_sequence": 1, "action_index": 1, "kind": "page",
                     "sent_at": sent + timedelta(seconds=5), "band": band})
        if not acked and rng.random() < 0.4:
            rows.append({**base, "rule_sequence": 1, "action_index": 2, "kind": "escalation",
                         "sent_at": sent + timedelta(minutes=15),
                         "leader": rng.choice(leaders)})
    write(store, BurdenEventRow, rows)
    if is_postgres(store.db):
        with store.db.open_connection() as conn:  # autocommit: VACUUM takes no transaction
            conn.execute("VACUUM ANALYZE")
    return len(rows)


def write(store: Store, model: type, rows: list[dict]) -> None:
    for start in range(0, len(rows), BATCH):
        with write_lock(store.db):
            model.insert_many(rows[start:start + BATCH]).execute()


if __name__ == "__main__":
    raise SystemExit(main())
