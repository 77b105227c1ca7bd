"""The operator console on a real database: how long each page takes to render, and how many
SQL statements a render sends.

Goal: every page's median render under 100 ms on SQLite and on PostgreSQL, with a history of
100,000 triggers and 20,000 executions, a few hundred policies and engineers; and a bounded
number of statements per page, whatever the rows it shows.

For each engine (a temporary SQLite file, or a throw-away PostgreSQL schema):

1. a real ``python -m ticket_dispatcher serve --sandbox`` migrates the database, seeds the
   examples, and runs the day's kinds of work, each to its end: a round-robin assignment
   (TCID-2), a trigger for an issue Jira does not know (failed, with Jira's 404 as its
   reason), a trigger no policy takes (OPS-1), a dry-run of the assign policy (TCID-1), an
   urgent assignee notification that is ACKed (GTOC-1, its card's Acknowledge pressed) and
   one left parked in its first page's ACK wait (GTOC-1000), the balanced version of the
   assign policy put in shadow beside the live one (TCID-3), and an assignment that fails
   because none of its candidates is dispatch-enabled (TCID-2 again). Then it stops. Those
   rows are the templates;
2. the bench deletes those triggers and executions and writes ``--triggers`` triggers over the
   last 30 days, ids in time order, from four sources over 6,000 issue keys of three projects
   (5 % of them for 20 lively issues of each): a fifth of them with one execution each
   (``--executions``: assignments, failed assignments, dry-runs, notifications, the newest
   ``--parked`` notifications parked in their wait with a ``wake_at`` one to two hours
   ahead), 12 % failed with the reasons Jira gives, the rest taken by no policy. Every
   execution has its rule executions and action contexts as the templates have them, and
   every issue a context. Beside the sandbox's policies: ``--families`` more families of one
   to four versions (active, superseded, inactive, drafts) with the assign policy's rules,
   ``--engineers`` engineers, and ``--shadows`` more drafts in shadow with 100 decisions each
   (a quarter of those shadows stopped since). Multi-row INSERTs of 500 rows (the ``Insert``
   of ``recovery.py``), not the service's one-by-one path; then ``ANALYZE`` on PostgreSQL, as
   its autovacuum would after such a load (SQLite is left as the service leaves it);
3. the console is rendered server-side in this process: the real falcon app (bench/apps.py:
   ``create_app`` with the console mounted, as tests/console/conftest.py ``build_app`` does,
   authentication on, signed in as an operator) over that store and a real actor runtime
   (tests/harness.py, its clock stopped at the end of the seeded history, so boot recovery has
   parked every waiting execution in the pool and nothing wakes meanwhile). Each page is
   requested twice to warm up, then ``--runs`` times; the same data through the JSON API
   beside it where the API has it.

Printed per engine and page: the median and p95 of a render, the statements a render sent
(peewee's query hooks, counted as tests/conftest.py ``QueryCounter`` counts them; "3-4" when
renders differ) and the slowest of them (each read of the last render run again alone,
every row fetched: on SQLite the hook's own time ends at the first row), PASS or FAIL
against the 100 ms budget, and the API's median and statements. A page that answers 404 is
reported as not built and skipped, so the bench runs before every page exists.
``--show-queries`` prints each page's reads with their time; ``--profile DIR`` writes a
pyinstrument profile (``pip install pyinstrument``) of every page over budget (with
``--pages``, of every page chosen) to ``DIR/ENGINE-PAGE.txt``.

At the defaults a run takes about half a minute per engine on a 2-core machine: the sandbox
session a few seconds, seeding 5 to 10 s, the pages
the rest.

    python bench/console.py [--engine sqlite|postgres|both] [--triggers 100000]
                            [--executions 20000] [--parked 200] [--runs 30]
                            [--postgres-url URL] [--pages TEXT ...] [--show-queries]
                            [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests
from apps import signed_in
from databases import fresh_database  # also puts the repository root on sys.path
from recovery import TEMPLATE_ISSUE, Server, insert_all

from tests.conftest import PG_URL_ENV, QueryCounter
from tests.console.conftest import Console
from ticket_dispatcher.http import API_BASE
from ticket_dispatcher.http.dispatch import encode_cursor
from ticket_dispatcher.store import Store, write_lock
from ticket_dispatcher.store.connect import is_postgres
from ticket_dispatcher.store.database import unit_of_work, without_statement_timeouts
from ticket_dispatcher.store.models import (
    ContextRow,
    EngineerRow,
    ExecutionRow,
    PolicyRow,
    RuleExecutionRow,
    RuleRow,
    ShadowDecisionRow,
    ShadowRow,
    TriggerRow,
)
from ticket_dispatcher.store.policies import new_family_id
from ticket_dispatcher.timeutil import format_time

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
BUDGET_MS = 100.0
WARM_UP = 2  # renders before the timed ones: templates compiled, caches filled
HISTORY = timedelta(days=30)  # the seeded triggers' creation times span this, up to the clock
PARKED_FROM, PARKED_SPAN = timedelta(hours=1), timedelta(hours=1)  # wake_at: [1 h, 2 h) ahead
PROJECTS = (("TCID", 0.6), ("GTOC", 0.3), ("OPS", 0.1))
ISSUES_PER_PROJECT = 2_000
HOT_ISSUES, HOT_SHARE = 20, 0.05  # 5 % of the triggers are for the first 20 issues of a project
# Where the triggers come from, and how often (the notification sources carry the notification
# executions; the others the assignments).
SOURCES = (("jira_automation", 0.70), ("jira_assignment_assignee", 0.20),
           ("jira_assignment_l2", 0.06), ("servicedesk_webhook", 0.04))
FAILED_SHARE = 0.12  # triggers that failed (their issue could not be loaded)
EXECUTION_KINDS = (("assign", 0.55), ("assign_failed", 0.08), ("dry_run", 0.04),
                   ("notification", 0.33))
DECISIONS_PER_SHADOW = 100
SESSION_TIMEOUT = 60  # seconds a sandbox step may take to reach its end
TERMINAL = ("succeeded", "failed")


# -- the sandbox session: one real run of each kind of work ---------------------------------------


class Sandbox:
    """The sandbox's API and control endpoints, without authentication (as ``--sandbox``)."""

    def __init__(self, server: Server):
        self.url = server.url
        self.api = server.url + API_BASE
        self.http = requests.Session()

    def call(self, method: str, path: str, **kw) -> dict:
        answer = self.http.request(method, path if path.startswith("http") else self.api + path,
                                   timeout=30, **kw)
        if answer.status_code >= 400:
            raise SystemExit(f"{method} {path}: {answer.status_code} {answer.text[:500]}")
        return answer.json() if answer.content else {}

    def control(self, method: str, path: str, **kw) -> dict:
        return self.call(method, f"{self.url}/sandbox/_control{path}", **kw)

    def trigger(self, source: str, issue_key: str, **body) -> int:
        return self.call("POST", "/dispatch/triggers", json={
            "source": source, "input": {"issue_key": issue_key}, **body})["id"]

    def until(self, what: str, done) -> object:
        deadline = time.monotonic() + SESSION_TIMEOUT
        while time.monotonic() < deadline:
            value = done()
            if value:
                return value
            time.sleep(0.05)
        raise SystemExit(f"the sandbox never got there: {what}")

    def settled(self, trigger_id: int, *, parked: bool = False) -> list[dict]:
        """Wait until the trigger has ended and each of its executions has ended (``parked``:
        waits in its ACK wait); its executions."""
        def ended():
            trigger = self.call("GET", f"/dispatch/triggers/{trigger_id}")
            if trigger["status"] not in ("completed", "failed"):
                return None
            items = self.call("GET", "/dispatch/executions",
                              params={"trigger_id": trigger_id})["items"]
            if all(e["status"] in TERMINAL or (parked and e["wake_at"]) for e in items):
                return items or [trigger]
            return None
        return self.until(f"trigger {trigger_id} settled", ended)

    def shadow_judged(self, policy_id: int, seen: int) -> None:
        self.until(f"{seen} shadow decisions judged", lambda: (
            (report := self.call("GET", f"/dispatch/policies/{policy_id}/shadow"))["seen"]
            >= seen and not report["pending"]))


def sandbox_session(database_url: str, log: Path) -> None:
    """Run each kind of work the console shows once, in a real ``serve --sandbox``."""
    server = Server(database_url, log)
    try:
        server.wait_ready()
        box = Sandbox(server)
        assign = next(p["id"] for p in box.call("GET", "/dispatch/policies",
                                                params={"status": "active"})["items"]
                      if p["name"] == "Assign TCID tickets")
        box.settled(box.trigger("jira_automation", "TCID-2"))
        box.settled(box.trigger("jira_automation", "NOPE-1"))
        box.control("POST", "/issues", json={"key": "OPS-1", "summary": "Disk full on build "
                                             "agent", "priority": "P3", "status": "Todo"})
        box.settled(box.trigger("jira_automation", "OPS-1"))
        box.settled(box.trigger("jira_automation", "TCID-1", policy_id=assign, dryrun={}))
        # An urgent notification, ACKed once its first page waits: alice presses the card's
        # Acknowledge (a card with buttons is not acknowledged by being read).
        notified = box.trigger("jira_assignment_assignee", "GTOC-1")
        box.settled(notified, parked=True)
        card = box.control("GET", "/messages")["items"][-1]["message_id"]
        box.control("POST", f"/lark/messages/{card}/press", json={"action": "ack"})
        box.settled(notified)
        # One more, left in its wait.
        box.control("POST", "/issues", json=TEMPLATE_ISSUE)
        box.settled(box.trigger("jira_assignment_assignee", TEMPLATE_ISSUE["key"]), parked=True)
        # The balanced version of the assign policy in shadow, then a live assignment beside it.
        balanced = box.call("POST", f"/dispatch/policies/{assign}/replacements",
                            json=json.loads((ROOT / "ops/examples/policies/balanced-tcid.json")
                                            .read_text()))["id"]
        box.call("POST", f"/dispatch/policies/{balanced}/shadow")
        box.settled(box.trigger("jira_automation", "TCID-3"))
        box.shadow_judged(balanced, 1)
        # An assignment none of whose candidates may receive tickets.
        for email in ("alice", "bob", "carol"):
            box.call("PUT", f"/engineers/{email}@example.com", json={"dispatch_enabled": False})
        box.control("POST", "/issues/TCID-2/rearm")
        box.settled(box.trigger("jira_automation", "TCID-2"))
        box.shadow_judged(balanced, 2)
        for email in ("alice", "bob", "carol"):
            box.call("PUT", f"/engineers/{email}@example.com", json={"dispatch_enabled": True})
    finally:
        server.stop()


@dataclass
class Template:
    """One kind of work as the sandbox stored it: its trigger, execution, rules and context."""

    trigger: dict
    execution: dict | None = None
    rules: list[dict] = field(default_factory=list)
    context: dict | None = None


def read_templates(store: Store) -> tuple[dict[str, Template], dict]:
    """The templates by kind, and one judged shadow decision."""
    with unit_of_work(store.db):
        triggers = {row["id"]: row for row in TriggerRow.select().dicts()}
        contexts = {row["issue_key"]: row for row in ContextRow.select().dicts()}
        kinds: dict[str, Template] = {}
        for execution in ExecutionRow.select().order_by(ExecutionRow.id).dicts():
            kind = {("TCID-2", "succeeded"): "assign", ("TCID-2", "failed"): "assign_failed",
                    ("TCID-1", "succeeded"): "dry_run", ("GTOC-1", "succeeded"): "notification",
                    (TEMPLATE_ISSUE["key"], "executing"): "parked",
                    }.get((execution["issue_key"], execution["status"]))
            if kind is None or kind in kinds:
                continue
            rules = list(RuleExecutionRow.select()
                         .where(RuleExecutionRow.execution == execution["id"])
                         .order_by(RuleExecutionRow.sequence).dicts())
            kinds[kind] = Template(triggers[execution["trigger"]], execution, rules,
                                   contexts.get(execution["issue_key"]))
        for row in triggers.values():
            if row["issue_key"] == "NOPE-1":
                kinds["failed"] = Template(row)
            elif row["issue_key"] == "OPS-1":
                kinds["unmatched"] = Template(row)
        decision = (ShadowDecisionRow.select().where(ShadowDecisionRow.verdict.is_null(False))
                    .order_by(ShadowDecisionRow.id).dicts().first())
    wanted = {"assign", "assign_failed", "dry_run", "notification", "parked", "failed",
              "unmatched"}
    if wanted - set(kinds) or decision is None:
        raise SystemExit(f"the sandbox session left no {sorted(wanted - set(kinds))} "
                         f"(decision: {decision is not None})")
    return kinds, decision


# -- the history -----------------------------------------------------------------------------------


@dataclass
class Seeded:
    """What was written, and the rows the pages are asked about."""

    counts: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    busy_key: str = ""  # the issue key with the most triggers
    assign_id: int = 0  # the newest assignment
    notification_id: int = 0  # the newest notification that ended
    deep_cursor: str = ""  # a trigger page 95 % of the way back
    policy_id: int = 0  # the example assign policy, its family's first version
    other_policy_id: int = 0  # the balanced version beside it (in shadow)


def pick(rng: random.Random, weighted) -> str:
    names, weights = zip(*weighted, strict=True)
    return rng.choices(names, weights)[0]


def issue_key(rng: random.Random) -> str:
    # A few lively issues see many triggers (a flapping label, a long incident); the rest
    # a handful each.
    number = rng.randint(1, HOT_ISSUES) if rng.random() < HOT_SHARE \
        else rng.randint(1, ISSUES_PER_PROJECT)
    return f"{pick(rng, PROJECTS)}-{number}"


def failure_reason(template: str, key: str, rng: random.Random) -> str:
    """The sandbox's 404 for this key, or another answer a Jira gives."""
    not_found = template.replace("NOPE-1", key)
    head = not_found.split(" failed: ")[0]
    return rng.choice((
        not_found, not_found, not_found,
        f"{head} failed: HTTP 401: Unauthorized",
        f"{head} failed: HTTP 503: Service Unavailable (gave up after 5 attempts)",
        f"{head} timed out after 10.0 s",
        f"{head} failed: HTTP 429: Too Many Requests (gave up after 5 attempts)",
    ))


def history(kinds: dict[str, Template], n_triggers: int, n_executions: int, n_parked: int,
            now: datetime, rng: random.Random) -> Iterator[tuple[dict, dict | None, list, str]]:
    """(trigger, execution or None, rule rows, kind) in id order, the newest last."""
    with_execution = set(rng.sample(range(n_triggers), n_executions))
    # The newest executions are the notifications still waiting; each waits on an issue of
    # its own (one live lock per issue and policy).
    parked = set(sorted(with_execution)[-n_parked:]) if n_parked else set()
    start = now - HISTORY
    for n in range(n_triggers):
        created = start + HISTORY * ((n + rng.random()) / n_triggers)
        trigger_id, key = n + 1, issue_key(rng)
        if n in with_execution:
            kind = "parked" if n in parked else pick(rng, EXECUTION_KINDS)
            source = ("jira_assignment_assignee" if kind in ("notification", "parked")
                      else "jira_automation")
            if kind == "parked":
                key = f"GTOC-{100_000 + n}"
            elif kind == "notification":
                key = "GTOC-" + key.split("-")[1]
            template = kinds[kind]
        else:
            source = pick(rng, SOURCES)
            kind = "failed" if rng.random() < FAILED_SHARE else "unmatched"
            template = kinds[kind]
        trigger = dict(template.trigger, id=trigger_id, source=source, issue_key=key,
                       input_json={"issue_key": key}, available_at=created, created_at=created,
                       updated_at=created, completed_at=created)
        if kind == "failed":
            trigger["failure_reason"] = failure_reason(template.trigger["failure_reason"], key,
                                                       rng)
        execution, rules = None, []
        if template.execution is not None:
            source_row = template.execution
            lived = source_row["updated_at"] - source_row["created_at"]
            execution = dict(source_row, trigger=trigger_id, issue_key=key,
                             business_now=created, created_at=created,
                             updated_at=created + lived,
                             completed_at=created + lived if source_row["completed_at"] else None,
                             lease_owner=None, lease_expires_at=None)
            if kind == "parked":
                execution["wake_at"] = now + PARKED_FROM + PARKED_SPAN * rng.random()
                execution["live_lock_key"] = source_row["live_lock_key"].replace(
                    source_row["issue_key"], key)
            rules = template.rules
        yield trigger, execution, rules, kind


def seed(store: Store, kinds: dict[str, Template], decision: dict, args: argparse.Namespace,
         now: datetime) -> Seeded:
    """Replace the session's triggers and executions by the history; add policies,
    engineers and shadows."""
    started, rng, db, seeded = time.perf_counter(), random.Random(1), store.db, Seeded()
    with without_statement_timeouts(db):
        with write_lock(db):
            for model in (ShadowDecisionRow, RuleExecutionRow, ExecutionRow, TriggerRow,
                          ContextRow):
                model.delete().execute()
        triggers, executions, rules, contexts = [], [], [], {}
        keys: Counter = Counter()
        for trigger, execution, rule_rows, kind in history(
                kinds, args.triggers, args.executions, args.parked, now, rng):
            triggers.append(trigger)
            keys[trigger["issue_key"]] += 1
            if execution is None:
                continue
            execution["id"] = len(executions) + 1
            trigger["output_json"] = {"execution_ids": [execution["id"]]}
            executions.append(execution)
            rules += [{k: v for k, v in rule.items() if k != "id"}
                      | {"execution": execution["id"]} for rule in rule_rows]
            context = kinds[kind].context
            if context is not None:
                contexts[trigger["issue_key"]] = dict(
                    context, issue_key=trigger["issue_key"], created_at=trigger["created_at"],
                    updated_at=execution["updated_at"])
            if kind == "assign":
                seeded.assign_id = execution["id"]
            elif kind == "notification":
                seeded.notification_id = execution["id"]
            seeded.counts[f"execution {kind}"] += 1
        seeded.counts["triggers"] = insert_all(db, TriggerRow, triggers)
        seeded.counts["executions"] = insert_all(db, ExecutionRow, executions)
        seeded.counts["rule executions"] = insert_all(db, RuleExecutionRow, rules)
        seeded.counts["contexts"] = insert_all(db, ContextRow, contexts.values())
        seeded.counts["failed triggers"] = sum(t["status"] == "failed" for t in triggers)
        seeded.busy_key = keys.most_common(1)[0][0]
        seeded.deep_cursor = encode_cursor(max(2, len(triggers) // 20))
        with unit_of_work(db):
            sandbox_policies = list(PolicyRow.select().order_by(PolicyRow.id).dicts())
        assign = next(p for p in sandbox_policies if p["name"] == "Assign TCID tickets")
        seeded.policy_id = assign["id"]
        seeded.other_policy_id = next(p["id"] for p in sandbox_policies
                                      if p["family_id"] == assign["family_id"]
                                      and p["id"] != assign["id"])
        seed_policies(store, assign, args.families, args.shadows, decision, executions,
                      now, rng, seeded)
        seed_engineers(store, args.engineers, now, rng, seeded)
        with write_lock(db):
            if is_postgres(db):  # explicit ids leave the identity sequences behind
                for table in ("dispatch_triggers", "dispatch_executions", "dispatch_policies",
                              "dispatch_rules", "dispatch_rule_executions",
                              "dispatch_shadow_decisions"):
                    db.execute_sql(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                   f"(SELECT MAX(id) FROM {table}))")
        if is_postgres(db):
            with unit_of_work(db):
                db.execute_sql("ANALYZE")
    seeded.seconds = time.perf_counter() - started
    return seeded


def seed_policies(store: Store, assign: dict, families: int, shadows: int, decision: dict,
                  executions: list[dict], now: datetime, rng: random.Random,
                  seeded: Seeded) -> None:
    """``families`` more families of one to four versions with the assign policy's rules;
    the newest draft of ``shadows`` of them in shadow, with judged and pending decisions."""
    db = store.db
    with unit_of_work(db):
        first_policy = (PolicyRow.select(PolicyRow.id).order_by(PolicyRow.id.desc())
                        .scalar() or 0) + 1
        first_rule = (RuleRow.select(RuleRow.id).order_by(RuleRow.id.desc()).scalar() or 0) + 1
        first_decision = (ShadowDecisionRow.select(ShadowDecisionRow.id)
                          .order_by(ShadowDecisionRow.id.desc()).scalar() or 0) + 1
        assign_rules = list(RuleRow.select().where(RuleRow.policy == assign["id"])
                            .order_by(RuleRow.id).dicts())
    policies, rules, shadow_rows, decisions = [], [], [], []
    lived = [e for e in executions if e["status"] in TERMINAL and e["mode"] == "live"]
    verdicts = ("agreed", "agreed", "agreed", "other_assignee", "other_rule", None)
    for f in range(families):
        family, project = new_family_id(), f"P{f:03d}"
        versions = rng.choice((1, 2, 2, 3, 3, 4))
        statuses = ["superseded"] * (versions - 2) + ["active", "draft"][:versions]
        if versions == 1:
            statuses = [rng.choice(("active", "inactive", "draft"))]
        born = now - HISTORY * rng.random()
        for version, status in enumerate(statuses, start=1):
            policy_id = first_policy + len(policies)
            at = born + timedelta(days=version)
            policies.append(dict(
                assign, id=policy_id, family_id=family, version=version, status=status,
                name=f"Assign {project} tickets", trigger_json=dict(
                    assign["trigger_json"], project_key_in=[project]),
                created_at=at, updated_at=at,
                activated_at=at if status in ("active", "superseded", "inactive") else None))
            for rule in assign_rules:
                rules.append(dict(rule, id=first_rule + len(rules), policy=policy_id))
        if f < shadows and statuses[-1] == "draft":
            policy_id = first_policy + len(policies) - 1
            if f % 4 != 3:  # a quarter stopped: only their decisions remain
                shadow_rows.append({"family_id": family, "policy_id": policy_id,
                                    "started_at": now - timedelta(days=2),
                                    "dropped": rng.randint(0, 5)})
            for _ in range(DECISIONS_PER_SHADOW):
                live = rng.choice(lived)
                verdict = rng.choice(verdicts)
                decisions.append(dict(
                    decision, id=first_decision + len(decisions), policy_id=policy_id,
                    family_id=family, trigger_id=live["trigger"], issue_key=live["issue_key"],
                    live_execution_id=live["id"], verdict=verdict,
                    live_json=decision["live_json"] if verdict else None,
                    created_at=live["created_at"],
                    decided_at=live["updated_at"] if verdict else None))
    seeded.counts["policies"] = insert_all(db, PolicyRow, policies) + first_policy - 1
    with unit_of_work(db):
        seeded.counts["active policies"] = (PolicyRow.select()
                                            .where(PolicyRow.status == "active").count())
    seeded.counts["rules"] = insert_all(db, RuleRow, rules)
    seeded.counts["shadows"] = insert_all(db, ShadowRow, shadow_rows) + 1
    seeded.counts["stopped shadows"] = len({d["policy_id"] for d in decisions}) + 1 \
        - seeded.counts["shadows"]
    seeded.counts["shadow decisions"] = insert_all(db, ShadowDecisionRow, decisions)


def seed_engineers(store: Store, count: int, now: datetime, rng: random.Random,
                   seeded: Seeded) -> None:
    rows = []
    for n in range(count):
        dispatched = now - HISTORY * rng.random() if rng.random() < 0.8 else None
        rows.append({"email": f"engineer{n:04d}@example.com",
                     "display_name": f"Engineer {n:04d}", "jira_account_id": f"acc-{n:04d}",
                     "dispatch_enabled": rng.random() < 0.9, "last_dispatched_at": dispatched,
                     "last_dispatched_issue": f"TCID-{rng.randint(1, 2000)}" if dispatched
                     else "", "created_at": now - HISTORY, "updated_at": now - HISTORY})
    seeded.counts["engineers"] = insert_all(store.db, EngineerRow, rows) + 6


# -- the pages -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    name: str
    path: str  # under /console
    api: str | None = None  # the same data from the JSON API (under the API base), if it has it


def pages(seeded: Seeded, now: datetime) -> list[Page]:
    key, hour_ago = seeded.busy_key, format_time(now - timedelta(hours=1))
    offset = (seeded.counts["executions"] // 50) * 50
    return [
        Page("overview", "/", "/admin/actors"),
        Page("triggers", "/triggers", "/dispatch/triggers"),
        Page("triggers, failed", "/triggers?status=failed", "/dispatch/triggers?status=failed"),
        Page(f"triggers, issue {key}", f"/triggers?issue_key={key}",
             f"/dispatch/triggers?issue_key={key}"),
        Page("triggers, since 1h", "/triggers?since=1h",
             f"/dispatch/triggers?created_after={hour_ago.replace('+', '%2B')}"),
        Page("triggers, failed, since 1h", "/triggers?status=failed&since=1h",
             f"/dispatch/triggers?status=failed&created_after={hour_ago.replace('+', '%2B')}"),
        Page("triggers, deep cursor", f"/triggers?cursor={seeded.deep_cursor}",
             f"/dispatch/triggers?cursor={seeded.deep_cursor}"),
        Page("triggers, failed, deep cursor",
             f"/triggers?status=failed&cursor={seeded.deep_cursor}",
             f"/dispatch/triggers?status=failed&cursor={seeded.deep_cursor}"),
        Page("executions", "/executions", "/dispatch/executions"),
        Page(f"executions, issue {key}", f"/executions?issue_key={key}",
             f"/dispatch/executions?issue_key={key}"),
        Page("executions, failed", "/executions?status=failed",
             "/dispatch/executions?status=failed"),
        Page("executions, last page", f"/executions?offset={offset}",
             f"/dispatch/executions?offset={offset}"),
        Page("execution, assign", f"/executions/{seeded.assign_id}",
             f"/dispatch/executions/{seeded.assign_id}"),
        Page("execution, notification", f"/executions/{seeded.notification_id}",
             f"/dispatch/executions/{seeded.notification_id}"),
        Page("parked", "/parked", "/admin/actors"),
        Page("engineers", "/engineers", "/engineers"),
        Page("policies", "/policies", "/dispatch/policies"),
        Page("policy", f"/policies/{seeded.policy_id}",
             f"/dispatch/policies/{seeded.policy_id}"),
        Page("policy diff", f"/policies/diff?a={seeded.policy_id}&b={seeded.other_policy_id}"),
        Page("policy validate", "/policies/validate"),
        Page("shadows", "/shadows"),
        Page("shadow report", f"/policies/{seeded.other_policy_id}/shadow",
             f"/dispatch/policies/{seeded.other_policy_id}/shadow"),
    ]


@dataclass
class Timing:
    status: int
    times: list[float]  # seconds
    queries: list[int]
    slowest: tuple[float, str] = (0.0, "")  # seconds, statement
    # the last render's reads, each timed again alone with every row fetched
    statements: list[tuple[float, str]] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1000

    @property
    def p95_ms(self) -> float:
        ordered = sorted(self.times)
        return ordered[max(0, round(0.95 * len(ordered)) - 1)] * 1000

    @property
    def query_text(self) -> str:
        low, high = min(self.queries), max(self.queries)
        return str(low) if low == high else f"{low}-{high}"


class TimedStatements(QueryCounter):
    """The statements counted as the tests count them, with their parameters."""

    def __init__(self, db):
        super().__init__(db)
        self.sent: list[tuple[str, tuple]] = []

    def _record(self, event) -> None:
        super()._record(event)
        self.sent.append((event.sql, tuple(event.params or ())))


def timed_again(store: Store, sent: list[tuple[str, tuple]]) -> list[tuple[float, str]]:
    """Each read of a render run again by itself (the best of three), every row fetched: the
    hook's own time stops when ``execute`` returns, which on SQLite is at the first row."""
    timed = []
    with store.connection():
        for sql, params in sent:
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            best = float("inf")
            for _ in range(3):  # the best of three: one run alone is at the machine's mercy
                started = time.perf_counter()
                store.db.execute_sql(sql, params).fetchall()
                best = min(best, time.perf_counter() - started)
            timed.append((best, sql))
    return timed


def measure(get, store: Store, path: str, runs: int) -> Timing:
    """``get(path)`` ``WARM_UP`` times, then ``runs`` times, timed, its statements counted."""
    for _ in range(WARM_UP):
        status = get(path).status_code
        if status != 200:  # not built (404), or broken: nothing worth timing
            return Timing(status, [], [])
    timing = Timing(status, [], [])
    for _ in range(runs):
        with TimedStatements(store.db) as queries:
            started = time.perf_counter()
            result = get(path)
            timing.times.append(time.perf_counter() - started)
        if result.status_code != status:
            raise SystemExit(f"{path} answered {result.status_code} after {status}")
        timing.queries.append(queries.count)
    timing.statements = timed_again(store, queries.sent)  # those of the last render
    timing.slowest = max([(0.0, ""), *timing.statements])
    return timing


@dataclass
class Row:
    page: Page
    console: Timing
    api: Timing | None


def bench_pages(store: Store, seeded: Seeded, now: datetime, args: argparse.Namespace,
                engine: str) -> list[Row]:
    """Every page through the real app over a real runtime on the seeded store."""
    with signed_in(store, now, "operator") as (console, api):
        rows = []
        for page in pages(seeded, now):
            if args.pages and not any(text in page.name for text in args.pages):
                continue
            shown = measure(lambda path: console.get("/console" + path.rstrip("/")),
                            store, page.path, args.runs)
            bare = None
            if page.api and shown.status == 200:
                bare = measure(lambda path: api.simulate_get(API_BASE + path.split("?")[0],
                                                             query_string=path.partition("?")[2]),
                               store, page.api, args.runs)
            rows.append(Row(page, shown, bare))
            if args.profile and shown.status == 200 and (
                    args.pages or shown.median_ms >= BUDGET_MS):
                profile(console, page, Path(args.profile) / f"{engine}-{slug(page.name)}.txt")
        return rows


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def profile(console: Console, page: Page, path: Path) -> None:
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise SystemExit("--profile needs pyinstrument (pip install pyinstrument)") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    profiler = Profiler(interval=0.0005)
    with profiler:
        for _ in range(5):
            console.get("/console" + page.path.rstrip("/"))
    path.write_text(profiler.output_text(unicode=True, show_all=False))
    print(f"  profile of {page.name}: {path}")


# -- the report ------------------------------------------------------------------------------------


def report(engine: str, seeded: Seeded, rows: list[Row], show_queries: bool) -> None:
    c = seeded.counts
    print(f"{engine}: {c['triggers']:,} triggers ({c['failed triggers']:,} failed), "
          f"{c['executions']:,} executions ({c['execution parked']} parked), "
          f"{c['rule executions']:,} rule executions, {c['policies']} policies "
          f"({c['active policies']} active), "
          f"{c['engineers']} engineers, {c['shadows']} shadows and {c['stopped shadows']} "
          f"stopped "
          f"({c['shadow decisions']:,} decisions); seeded in {seeded.seconds:.1f} s")
    print(f"  {'page':<32} {'median':>8} {'p95':>8} {'queries':>7} {'slowest':>8}  "
          f"{'budget':<6} | {'API median':>10} {'p95':>8} {'queries':>7}")
    for row in rows:
        name, shown = row.page.name, row.console
        if shown.status != 200:
            print(f"  {name:<32} {'not built' if shown.status == 404 else shown.status:>8}")
            continue
        verdict = "PASS" if shown.median_ms < BUDGET_MS else "FAIL"
        bare = (f"{row.api.median_ms:8.1f} ms {row.api.p95_ms:5.1f} ms {row.api.query_text:>7}"
                if row.api else f"{'—':>10}")
        print(f"  {name:<32} {shown.median_ms:5.1f} ms {shown.p95_ms:5.1f} ms "
              f"{shown.query_text:>7} {shown.slowest[0] * 1000:5.1f} ms  {verdict:<6} | {bare}")
        if show_queries:
            for seconds, sql in shown.statements:
                print(f"      {seconds * 1000:6.2f} ms  {' '.join(sql.split())[:220]}")


def run(engine: str, args: argparse.Namespace) -> tuple[Seeded, list[Row]]:
    postgres = args.postgres_url if engine == "PostgreSQL" else None
    now = datetime.now(UTC).replace(microsecond=0)
    with tempfile.TemporaryDirectory() as scratch, fresh_database(postgres) as url:
        sandbox_session(url, Path(scratch) / "sandbox.log")
        store = Store.for_url(url)
        try:
            kinds, decision = read_templates(store)
            seeded = seed(store, kinds, decision, args, now)
            rows = bench_pages(store, seeded, now, args, engine)
        finally:
            store.close()
    return seeded, rows


def summary(results: dict[str, list[Row]]) -> None:
    """Both engines side by side: the median, the statements, the verdict."""
    engines = list(results)
    print("\nmedian render (statements), against the 100 ms budget:")
    print(f"  {'page':<32} " + " ".join(f"{e:>24}" for e in engines))
    for index, row in enumerate(results[engines[0]]):
        cells = []
        for engine in engines:
            shown = results[engine][index].console
            if shown.status != 200:
                cells.append(f"{'not built' if shown.status == 404 else shown.status:>24}")
            else:
                verdict = "PASS" if shown.median_ms < BUDGET_MS else "FAIL"
                cells.append(f"{shown.median_ms:9.1f} ms ({shown.query_text:>3}) {verdict}")
        print(f"  {row.page.name:<32} " + " ".join(cells))
    failed = [(e, r.page.name) for e, rows in results.items() for r in rows
              if r.console.status == 200 and r.console.median_ms >= BUDGET_MS]
    broken = [(e, r.page.name) for e, rows in results.items() for r in rows
              if r.console.status not in (200, 404)]
    failed += broken
    built = sum(r.console.status == 200 for rows in results.values() for r in rows)
    print(f"  {built} page renders measured; "
          + ("every one under budget" if not failed else
             "over budget: " + ", ".join(f"{p} ({e})" for e, p in failed)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--triggers", type=int, default=100_000)
    parser.add_argument("--executions", type=int, default=20_000,
                        help="of the triggers, how many have an execution (one each)")
    parser.add_argument("--parked", type=int, default=200,
                        help="of the executions, the newest notifications left in their wait")
    parser.add_argument("--families", type=int, default=120,
                        help="policy families beside the sandbox's, 1 to 4 versions each")
    parser.add_argument("--engineers", type=int, default=300)
    parser.add_argument("--shadows", type=int, default=20,
                        help="of the families, how many have their draft in shadow")
    parser.add_argument("--runs", type=int, default=30, help="timed renders of each page")
    parser.add_argument("--postgres-url",
                        default=os.environ.get(PG_URL_ENV) or DEFAULT_POSTGRES,
                        help=f"the PostgreSQL server (default ${PG_URL_ENV}, else "
                             f"{DEFAULT_POSTGRES}); each run takes a throw-away schema")
    parser.add_argument("--pages", nargs="+", metavar="TEXT",
                        help="only the pages whose name holds one of these texts")
    parser.add_argument("--show-queries", action="store_true",
                        help="print each page's statements and their time")
    parser.add_argument("--profile", metavar="DIR",
                        help="write a pyinstrument profile of each page over budget (with "
                             "--pages: of each page chosen) to DIR")
    args = parser.parse_args()
    if not 0 < args.executions <= args.triggers or args.parked > args.executions // 10:
        parser.error("need 0 < --executions <= --triggers and --parked <= --executions / 10")
    engines = {"sqlite": ["SQLite"], "postgres": ["PostgreSQL"],
               "both": ["SQLite", "PostgreSQL"]}[args.engine]
    results = {}
    for engine in engines:
        seeded, rows = run(engine, args)
        report(engine, seeded, rows, args.show_queries)
        results[engine] = rows
    summary(results)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
          f"python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
