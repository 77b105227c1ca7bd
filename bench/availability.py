"""People-aware dispatch under a realistic roster: an ordinary dispatch's latency with 1,000
engineers and 20,000 time-off entries, next to the same service before the feature.

Every assign action now makes one more read than before people-aware dispatch (those of the
candidates it has something to judge of, with their time off, ``EngineerRepository.hindered``)
and judges them (time off at the business time, working hours, caps). This bench
measures what that costs an ordinary dispatch, by ``latency.py``'s method: a real ``python -m
ticket_dispatcher serve --insecure-no-auth`` process (tests/process.py's ``Dispatcher``, log
level WARNING, the trigger rate limit off, default slots) against tests/peer.py's fake Jira in
a process of its own (``floors.py jira``), triggers posted open loop at ``--rate`` (default
20/s) for ``--seconds`` (default 15), so a slow answer delays no later trigger. A dispatch's
latency is the fake Jira's arrival time of its issue's ``PUT …/assignee`` minus the wall-clock
time the trigger's 202 came back (one machine, one clock).

Three setups, each on a fresh database (a temporary SQLite file, or a throw-away PostgreSQL
schema with ``--postgres-url``), alternated round by round (``--rounds``, default 3; the order
turns by one setup each round) against one fake Jira process, every sample of a setup pooled:

1. before: the service of ``--tree`` (a git worktree of 2134fc9, the commit before any
   availability code; its services import that tree's package, through ``PYTHONPATH`` and
   ``PYTHONSAFEPATH`` as compare.py does, checked before the first round);
2. after, loaded: the working tree's service, plus ``--time-off`` entries (default 20,000);
3. after, no time off: the working tree's service on the same engineers without time off,
   which separates the code's cost from the data's.

The roster, seeded through the API in every setup: ``--engineers`` engineers (default 1,000),
dispatch-enabled, each with a cached Jira account ID (no user search), and one active policy
that assigns every BENCH issue carrying the auto-assign label round robin over a rotation of
``--rotation`` of them (default 50, every 20th); in the after setups every engineer also has a
time zone (one of eight) and working hours (Monday to Friday, 09:00-18:00), which an ordinary
policy does not require, and no cap on open issues (a cap makes Jira count open issues: not an
ordinary dispatch). Each issue is P3, ``Todo``, unassigned, with the auto-assign label; one
warm-up dispatch per rotation member first, not counted.

The time off (after, loaded), 20 entries an engineer on average, 4 hours to 14 days each: 70 %
in the last two years (ended at least an hour ago), 30 % in the next year (starting a day from
now or later), so some end within the week before (the action's return window) and some start
within the fortnight after (its look-ahead), as a real history does; currently away:
``--away`` of the rotation (default 5, evenly spaced: the round robin skips them) and 5 % of
the others. The rotation's current absences are posted through the API (``POST
/engineers/{email}/time-off``); the rest are written in batches of 500 rows through the
store's model (``TimeOffRow.insert_many`` in one ``write_lock``, what a calendar feed's
refresh does), with the source ``api``, in under a second. On PostgreSQL the bench then
ANALYZEs the seeded tables, in every setup, as autovacuum would a minute after a bulk write
(the test server runs without it).

Printed per round and setup, then pooled per setup: p50, p95 and p99 of the latency, the
dispatches completed, the service's CPU per dispatch while posting; then each after setup's
p50 over the before p50. Goal: after, loaded p50 <= 1.1x before on both engines. Checks,
which exit non-zero with a message (the latencies are a figure, not a test): every execution
succeeded, Jira got one PUT assignee per issue, and in the loaded setup no execution's
``context.assign.assignee`` was on time off at its action's ``planned_at`` (by the entries the
bench seeded), none of the rotation's absent engineers was assigned, and Jira got the
account of the engineer the context names. About 20 s a setup, 3 minutes for 3 rounds.

    git worktree add /tmp/td-before 2134fc9
    python bench/availability.py [--tree /tmp/td-before] [--rounds 3] [--seconds 15]
        [--rate 20] [--engineers 1000] [--rotation 50] [--time-off 20000] [--away 5]
        [--postgres-url URL] [--timeout 90]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import requests
from compare import check_trees, use_tree
from databases import fresh_database  # also puts the repository root on sys.path
from e2e_dispatch import (
    PROJECT,
    account,
    engineer,
    executions_of,
    in_threads,
    new_issues,
    post_all,
    start_service,
    wait_terminal,
)
from floors import ROOT, JiraProcess, cpu_seconds
from latency import assign_arrivals, fire, percentile

from tests.process import BASE, Dispatcher, round_robin_policy
from ticket_dispatcher.domain.issues import DEFAULT_AUTO_ASSIGN_LABEL
from ticket_dispatcher.store.connect import open_database
from ticket_dispatcher.store.database import bind, execute, write_lock
from ticket_dispatcher.store.models import EngineerRow, TimeOffRow
from ticket_dispatcher.store.time_off import API_SOURCE, INSERT_BATCH
from ticket_dispatcher.timeutil import format_time, parse_rfc3339

GOAL = 1.1  # after, loaded p50 / before p50
ZONES = ("UTC", "Europe/London", "Europe/Paris", "Asia/Shanghai", "Asia/Kolkata",
         "America/New_York", "America/Los_Angeles", "Australia/Sydney")
WORKING_HOURS = {day: ["09:00-18:00"] for day in ("mon", "tue", "wed", "thu", "fri")}
REASONS = ("vacation", "conference", "sick leave", "public holiday", "training",
           "parental leave")
OTHERS_AWAY = 0.05  # of the engineers outside the rotation, currently away
PAST_SHARE = 0.7  # of the other entries, in the past; the rest in the future


@dataclass(frozen=True)
class Setup:
    name: str
    tree: Path
    availability: bool  # engineers get a time zone and working hours (the feature's API)
    time_off: bool


@dataclass(frozen=True)
class Absence:
    email: str
    start: datetime
    end: datetime
    reason: str

    def covers(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


@dataclass
class Samples:
    """One setup's samples, pooled over its rounds."""

    latency_ms: list[float] = field(default_factory=list)
    p50s: list[float] = field(default_factory=list)  # one per round
    dispatches: int = 0
    cpu_ms: list[float] = field(default_factory=list)  # one per round


@dataclass(frozen=True)
class Roster:
    engineers: list[str]
    rotation: list[str]
    away: list[str]  # the rotation's members currently on time off


# -- the roster and its time off ------------------------------------------------------------------


def roster(args: argparse.Namespace) -> Roster:
    engineers = [engineer(n) for n in range(args.engineers)]
    step = max(1, args.engineers // args.rotation)
    rotation = engineers[::step][:args.rotation]
    away = [rotation[n * len(rotation) // args.away] for n in range(args.away)]
    return Roster(engineers, rotation, away)


def absences(people: Roster, total: int, now: datetime, rng: random.Random) -> list[Absence]:
    """``total`` entries spread over every engineer; the rotation's ``away`` and a share of the
    others are on time off now, every other entry ended an hour ago or more, or starts a day
    from now or later (no entry begins or ends while the bench runs)."""
    others = [email for email in people.engineers if email not in people.rotation]
    away = set(people.away) | set(rng.sample(others, round(OTHERS_AWAY * len(others))))
    entries = [Absence(email, now - timedelta(hours=rng.uniform(12, 6 * 24)),
                       now + timedelta(hours=rng.uniform(36, 10 * 24)), rng.choice(REASONS))
               for email in sorted(away)]
    while len(entries) < total:
        email = people.engineers[len(entries) % len(people.engineers)]
        length = timedelta(hours=rng.uniform(4, 14 * 24))
        if rng.random() < PAST_SHARE:
            end = now - timedelta(hours=rng.uniform(1, 2 * 365 * 24))
            start = end - length
        else:
            start = now + timedelta(hours=rng.uniform(24, 365 * 24))
            end = start + length
        entries.append(Absence(email, start.replace(microsecond=0), end.replace(microsecond=0),
                               rng.choice(REASONS)))
    return entries


def seed(service: Dispatcher, jira: JiraProcess, setup: Setup, people: Roster) -> None:
    """The engineers (through the API, from 10 threads) and the round-robin policy."""
    def put(session: requests.Session, item: object) -> None:
        number, email = cast(tuple[int, str], item)
        body: dict = {"dispatch_enabled": True, "jira_account_id": account(number)}
        if setup.availability:
            body |= {"timezone": ZONES[number % len(ZONES)], "working_hours": WORKING_HOURS}
        session.put(f"{service.url}{BASE}/engineers/{email}", json=body,
                    timeout=30).raise_for_status()

    in_threads(put, list(enumerate(people.engineers)))
    policy = round_robin_policy("bench availability", "every BENCH issue, round robin",
                                PROJECT, people.rotation)
    policy["trigger"]["issue_label_all"] = [DEFAULT_AUTO_ASSIGN_LABEL]  # as e2e_dispatch's
    created = service.call("POST", "/dispatch/policies", (201,), json=policy)
    service.call("POST", f"/dispatch/policies/{created['id']}/activate")


def post_absences(service: Dispatcher, entries: list[Absence]) -> None:
    for entry in entries:
        service.call("POST", f"/engineers/{entry.email}/time-off", (201,), json={
            "start": format_time(entry.start), "end": format_time(entry.end),
            "reason": entry.reason})


@contextmanager
def store(database_url: str) -> Iterator:
    db = open_database(database_url, max_connections=2)
    bind(db)
    try:
        yield db
    finally:
        db.close_all()


def write_absences(database_url: str, entries: list[Absence], now: datetime) -> None:
    """Rows as the API stores them, in batches, in one transaction."""
    rows = [{"email": e.email, "start_at": e.start, "end_at": e.end, "reason": e.reason,
             "source": API_SOURCE, "created_at": now} for e in entries]
    with store(database_url) as db, write_lock(db):
        for first in range(0, len(rows), INSERT_BATCH):
            TimeOffRow.insert_many(rows[first:first + INSERT_BATCH]).execute()


def analyze(database_url: str, time_off: bool) -> None:
    """What autovacuum does a minute after a bulk write; PostgreSQL only."""
    if database_url.startswith("sqlite:"):
        return
    tables = [EngineerRow._meta.table_name] + ([TimeOffRow._meta.table_name] if time_off else [])
    with store(database_url) as db, write_lock(db):
        execute(db, f"ANALYZE {', '.join(tables)}")


# -- one run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    latency_ms: list[float]
    cpu_ms: float
    problems: list[str]
    assignees: set[str]


def run_setup(setup: Setup, jira: JiraProcess, people: Roster, first: int,
              args: argparse.Namespace, rng: random.Random) -> Run:
    use_tree(setup.tree)
    with fresh_database(args.postgres_url) as database_url:
        service = start_service(database_url, jira)
        try:
            seed(service, jira, setup, people)
            entries: list[Absence] = []
            if setup.time_off:
                now = datetime.now(UTC)
                entries = absences(people, args.time_off, now, rng)
                through_api = [e for e in entries if e.email in people.away and e.covers(now)]
                post_absences(service, through_api)
                write_absences(database_url, [e for e in entries if e not in through_api], now)
            analyze(database_url, setup.time_off)
            warm = new_issues(jira, PROJECT, first, len(people.rotation))
            post_all(service, warm)
            wait_terminal(service, len(warm), args.timeout)
            keys = new_issues(jira, PROJECT, first + 10_000, round(args.rate * args.seconds))
            _, since = jira.calls()
            cpu = cpu_seconds(service.process.pid)
            times = fire(service.url, keys, args.rate)
            cpu = cpu_seconds(service.process.pid) - cpu
            wait_terminal(service, len(warm) + len(keys), args.timeout)
            ended = executions_of(service, set(keys))
            calls, _ = jira.calls(since)
        finally:
            service.kill()
    arrivals = assign_arrivals(calls)
    latency = [1000 * (arrivals[key][0] - times[key][1]) for key in keys if key in arrivals]
    problems = dispatch_problems(keys, ended, arrivals)
    assigned = assignments(ended)
    problems += [f"{key}: no context.assign.assignee with its planned_at" for key in keys
                 if key not in assigned]
    if setup.time_off:
        problems += availability_problems(assigned, entries, people, calls)
    return Run(latency, 1000 * cpu / len(keys), problems, {email for email, _ in assigned.values()})


def dispatch_problems(keys: list[str], ended: list[dict],
                      arrivals: dict[str, list[float]]) -> list[str]:
    statuses: dict[str, list[str]] = {}
    for execution in ended:
        statuses.setdefault(execution["issue_key"], []).append(execution["status"])
    return [f"{key}: executions {statuses.get(key, [])}, {len(arrivals.get(key, []))} PUT "
            f"assignee" for key in keys
            if statuses.get(key) != ["succeeded"] or len(arrivals.get(key, [])) != 1]


def assignments(ended: list[dict]) -> dict[str, tuple[str, datetime]]:
    """Issue key -> (``context.assign.assignee``, the action's ``planned_at``)."""
    found = {}
    for execution in ended:
        for rule in execution["rule_executions"]:
            for action in rule["action_executions"]:
                assign = action["context"].get("assign")
                if assign and assign.get("assignee") and action["planned_at"]:
                    found[execution["issue_key"]] = (assign["assignee"],
                                                     parse_rfc3339(action["planned_at"]))
    return found


def availability_problems(assigned: dict[str, tuple[str, datetime]], entries: list[Absence],
                          people: Roster, calls: list[dict]) -> list[str]:
    """Assignees on time off at the moment their action planned, a rotation member away
    assigned at all, and Jira given another account than the context names."""
    by_email: dict[str, list[Absence]] = {}
    for entry in entries:
        by_email.setdefault(entry.email, []).append(entry)
    problems = [f"{key}: {email} assigned at {format_time(at)} while on time off"
                for key, (email, at) in assigned.items()
                if any(entry.covers(at) for entry in by_email.get(email, ()))]
    problems += [f"{key}: {email} assigned, one of the rotation's absent engineers"
                 for key, (email, _) in assigned.items() if email in people.away]
    accounts = {account(n): email for n, email in enumerate(people.engineers)}
    for call in calls:
        key = call["key"]
        if call["method"] == "PUT" and call["path"].endswith("/assignee") and key in assigned:
            given = accounts.get((call["body"] or {}).get("accountId", ""))
            if given != assigned[key][0]:
                problems.append(f"{key}: Jira was given {given}, the context names "
                                f"{assigned[key][0]}")
    return problems


# -- the bench ------------------------------------------------------------------------------------


def cells(values: list[float]) -> str:
    return "".join(f"{percentile(values, q):8.1f}" for q in (50, 95, 99))


def report(engine: str, setups: list[Setup], samples: dict[str, Samples]) -> None:
    before = percentile(samples[setups[0].name].latency_ms, 50)
    print(f"\npooled over the rounds, {engine}, milliseconds from the 202 to the PUT assignee "
          f"at Jira:")
    print(f"  {'setup':22}{'p50':>8}{'p95':>8}{'p99':>8}  dispatches  CPU ms/dispatch"
          f"  p50/before  per round p50")
    for setup in setups:
        got = samples[setup.name]
        ratio = percentile(got.latency_ms, 50) / before
        rounds = ", ".join(f"{p50:.1f}" for p50 in got.p50s)
        cpu = sorted(got.cpu_ms)[len(got.cpu_ms) // 2]
        print(f"  {setup.name:22}{cells(got.latency_ms)}  {got.dispatches:10}  {cpu:15.1f}"
              f"  {ratio:10.2f}  {rounds}")
    loaded = percentile(samples[setups[1].name].latency_ms, 50) / before
    print(f"  goal: after, loaded p50 <= {GOAL}x before: {loaded:.2f}x, "
          f"{'met' if loaded <= GOAL else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path("/tmp/td-before"),
                        help="the source tree of the code before the feature (a git worktree "
                             "of 2134fc9)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15, help="posting time of a run")
    parser.add_argument("--rate", type=float, default=20, help="triggers a second, open loop")
    parser.add_argument("--engineers", type=int, default=1000)
    parser.add_argument("--rotation", type=int, default=50,
                        help="engineers in the policy's round robin")
    parser.add_argument("--time-off", type=int, default=20_000, help="entries in all")
    parser.add_argument("--away", type=int, default=5,
                        help="members of the rotation on time off now")
    parser.add_argument("--postgres-url", help="run on PostgreSQL (a throw-away schema a run) "
                                               "instead of a temporary SQLite file")
    parser.add_argument("--timeout", type=float, default=90,
                        help="seconds the executions of a run may take to end")
    parser.add_argument("--seed", type=int, default=1, help="of the time off's draws")
    args = parser.parse_args()
    tree = args.tree.resolve()
    if not (tree / "ticket_dispatcher" / "__init__.py").is_file():
        parser.error(f"{tree} holds no ticket_dispatcher package; make it with: git -C {ROOT} "
                     f"worktree add {tree} 2134fc9")
    check_trees([tree, ROOT])
    setups = [Setup(f"before ({tree.name})", tree, False, False),
              Setup("after, loaded", ROOT, True, True),
              Setup("after, no time off", ROOT, True, False)]
    people, rng = roster(args), random.Random(args.seed)
    engine = "PostgreSQL" if args.postgres_url else "SQLite"
    print(f"people-aware dispatch, {engine}: {args.engineers} engineers, round robin over "
          f"{len(people.rotation)} ({len(people.away)} of them away in the loaded setup), "
          f"{args.time_off} time-off entries; {round(args.rate * args.seconds)} triggers at "
          f"{args.rate:g}/s a run, open loop; {args.rounds} round(s); load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    samples = {setup.name: Samples() for setup in setups}
    failures: list[str] = []
    with JiraProcess() as jira:
        jira.add_users([(email, account(n)) for n, email in enumerate(people.engineers)])
        for number in range(args.rounds):
            for turn in range(len(setups)):
                setup = setups[(number + turn) % len(setups)]
                first = 1_000_000 * (1 + number * len(setups) + turn)
                run = run_setup(setup, jira, people, first, args, rng)
                got = samples[setup.name]
                got.latency_ms += run.latency_ms
                got.p50s.append(percentile(run.latency_ms, 50))
                got.dispatches += len(run.latency_ms)
                got.cpu_ms.append(run.cpu_ms)
                print(f"round {number + 1}  {setup.name:22}{cells(run.latency_ms)} ms (p50, "
                      f"p95, p99)  {len(run.latency_ms)} dispatches  CPU {run.cpu_ms:.1f} "
                      f"ms/dispatch  {len(run.assignees)} distinct assignees", flush=True)
                for problem in run.problems[:10]:
                    print(f"        NOT OK {problem}")
                failures += [f"round {number + 1}, {setup.name}: {p}" for p in run.problems]
    report(engine, setups, samples)
    print(f"  machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed, the first: {failures[0]}")


if __name__ == "__main__":
    main()
