"""Checks a chaos run's history against the promises the service makes under faults.

Its summary also shows the Jira reads, searches and writes per issue for each kind of work
(tests/chaos/costs.py), so that a fault's extra cost shows.

The history is one run directory (run.json, requests.jsonl, faults.jsonl, calls.jsonl,
logs/*.log, final.json; see the soak's contract). Nothing here talks to a process: the checker
reads what the load generator sent, what each fake peer received, what the nemesis did, what
every replica logged and what the database held at the end, and proves over the whole run:

1. **Every accepted trigger ended.** Each trigger id answered 202 in requests.jsonl is in
   final.json with status ``completed`` or ``failed``. A 202 without an id is counted in the
   summary (there is nothing to look up).
2. **Every execution ended, or waits as it should.** Each execution is ``succeeded`` or
   ``failed``, or parked: ``created``/``executing`` with a ``wake_at`` no more than
   ``ack_bound_s`` before run.json's ``ended_at``, and every unfinished page of it with a
   deadline no more than ``ack_bound_s`` before ``ended_at`` either.
3. **No side effect twice.** Only calls the fake applied (``applied: true``) count; a faulted or
   refused call changed nothing.

   - Lark cards: no two applied sends with one ``uuid`` (an applied send created a message).
     The uuid ``td-<execution>-<rule>-<action>`` must be the ``card_uuid`` of that card.
   - App-urgent: no two applied calls for one message id (a card's ``message_id``).
   - Oncall pages: no two applied pages with one ``dedup_key`` (``td-<execution>-<rule>-
     <action>``: the page action of one attempt), hence none for one (execution, attempt).
   - Jira assignee PUTs, L2 field writes (``PUT /issue/{key}`` setting ``jira.l2_field_id``)
     and the workflow's internal comments (the card's ``Urgent: no``, a page's ``Urgent: yes``
     with its attempt, the ACK) carry no execution id. Each applied one is attributed by
     issue, value and time to a *write slot* of final.json: a live ``assign``/``assign_l2``
     action that chose someone (its ``account_id``, when saved), an escalation's intent (its
     ``to_account_id``, for the role it escalates), a comment whose phase was saved
     ``started`` or ``finished`` (the target's email in the ``Target:`` line). A slot is open
     from its execution's ``created_at`` to its ``completed_at`` (no end while it has none),
     ``ATTRIBUTION_SLACK_S`` either side, and takes at most one call. The calls are matched
     to the slots (a largest bipartite matching: the most generous attribution there is); a
     call left over is a second write for one slot, or a write no execution accounts for.
   - Ordinary dispatch assigns an issue once. When the assign policy requires a label that
     the assignment removes (run.json ``assign_label``, the documented ``auto-dispatch``), an
     execution that assigned the issue and removed the label is the issue's last to assign
     it: a later trigger for it (a re-sent request whose first copy was stored late, a
     further trigger) matches nothing. A removal that failed leaves the label, and a later
     assignment is then what the label asks for.
4. **No overlap.** No two live executions of one (issue, ``policy_family_id``) overlapped:
   sorted by ``created_at``, each starts at or after every earlier one's ``completed_at`` (an
   unfinished one never ends). Dry runs are left out. The product locks an ordinary policy
   per version and a notification family per family; with one version per family, as a soak
   runs, the two are the same, and the violation says when two versions were involved.
5. **ACK waits end on time.** Each page action with a ``deadline`` and a ``finished_at`` has
   ``finished_at <= deadline + ack_bound_s``; where a fault that stops the service itself
   (the database gone or stalled, SQLite's write lock held, the replica holding the wait killed,
   paused or restarted) lasts past the deadline, until that fault's end plus ``ack_bound_s``
   plus the retry backoff's cap (``RETRY_MAX_S``): nothing can end a wait without the
   database. A peer's fault extends nothing: Jira or Lark failing or slow at the deadline is
   no verdict, and the wait ends (the next page goes out) within the bound.
6. **The round robin is even.** The turns of live ``round_robin`` assign actions
   (``turn_taken``, whatever the execution's end: a turn, once taken, moved the rotation) are
   counted per rule and per set of enabled candidates (``context.assign.candidates``). Over a
   fixed set of engineers the turns cycle, so any member's count is within one of any
   other's. A group whose members were also dispatched by another group or another strategy
   cannot be judged alone: the summary lists it as not judged, never as a violation.
7. **The intake degrades politely.** No request was answered 500 (nor any 5xx but 503), and
   every 503 carried ``Retry-After``.
8. **Every ERROR has a cause.** Each ERROR/CRITICAL line of logs/*.log (and each line that is
   not JSON, but for a torn last line of a killed process) falls within the window of a fault,
   ``t_start - LOG_LEAD_S`` to ``t_end + lease_seconds + LOG_GRACE_EXTRA_S``, that can explain
   it: ``db_cut``/``db_stall`` on ``db-<i>`` a line about the database from replica i,
   ``sqlite_lock`` one from any replica; ``jira_*``, ``lark_*``, ``oncall_*`` a line naming
   that peer (by name, or by the host:port run.json's settings give it); ``kill9``,
   ``sigstop``, ``sigterm_restart`` any line of the replica they hit (a rolling deploy hits
   them all), and a stop also database lines of every replica (its open transaction held row
   locks until the server ended it). The unexplained lines are listed, grouped by message.
9. **A passing fault is never final.** No trigger or execution ends ``failed`` for a transient
   cause that ended within the retry budget. A failure is transient when its reason (a
   trigger's ``failure_reason``; an execution's, or its failed action's ``error``) names a
   peer's call that was answered ``HTTP 429`` or ``HTTP 5xx``, got ``no answer within the
   read timeout``, or whose ``connection failed`` (refused, reset, timed out connecting):
   the texts integrations/http.py writes, which the trigger's ``issue load failed: ...``,
   the assign action's ``Jira refused to set the ...: ...`` and the others carry. A
   permanent answer (400, 401, 403, 404), no candidates, a cancel and the like are no
   business of this promise. A transient failure is allowed only when its reason says the
   budget was spent (``past the retry budget``) and faults of the peer its reason names
   (``jira_*``, ``lark_*``, ``oncall_*``; any peer's when it names none) covered the whole
   budget before it: they began by the failure's time minus the budget and lasted until
   the failure's time minus the read timeout (its last try was sent while they lasted), each
   edge give or take ``BUDGET_SLACK_S``. Faults less than ``BACKOFF_CAP_S`` apart count as
   one stretch: a retry backoff at its cap may step over the gap. The budget is run.json's
   ``transient_retry_budget_s``, else the replicas' ``TRANSIENT_RETRY_BUDGET`` setting,
   else the default, 30 minutes. Each other transient failure is listed with its reason,
   its retries (a trigger's ``retries``) and the faults around it.

What the history cannot prove, and why:

- Jira writes and comments are attributed by issue, value and time, not by identity. When
  two executions of one issue could each have made a call, the matching gives it to either,
  so a duplicate shows as a call more than the issue's executions account for, not always
  against the execution that made it; and two executions that chose the same engineer and
  both wrote are two slots: both writes are allowed.
- A request that never reached a fake (cut on the way) is in no log, and was no side effect.
  A fake that applied a call whose answer was lost shows one applied call: the product
  settles that case by reading again, and a second write would show. A read can come before
  a slow write has landed, and the same value is then written again: Jira keeps one value and
  no second change, so an assignee or L2 write repeating the one just before it, whose
  answer the service lost to its read timeout (run.json ``read_timeout_s``), counts once.
- A round-robin turn is taken in its own transaction, before the plan that records it is
  saved. A step that died in between took a turn final.json does not show, so a spread off
  by more than one, with a kill, stop or database fault listed beside it, may be that.
- Log lines are explained by kind and time only: a real bug that logs inside the window of a
  fault of the right kind passes as explained.
- final.json is one snapshot after the run settled: a wait that was late at some moment in
  between shows only through its action's ``finished_at``.
- A failure is judged transient by the words of its reason only: a cause the service words
  differently (a Lark envelope's rate-limit code under HTTP 200) passes as permanent, and a
  reason that names a transient cause beside a permanent one counts as transient.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.chaos.costs import cost_lines, jira_costs

FAULT_CONTEXT_S = 30.0  # faults this close to a violation are printed with it
ATTRIBUTION_SLACK_S = 1.0  # a call this far outside its execution's span still fits it
LOG_LEAD_S = 1.0  # a fault explains lines from this long before its recorded start
LOG_GRACE_EXTRA_S = 10.0  # ... until lease_seconds + this after its end
DEFAULT_L2_FIELD_ID = "customfield_10053"
DEFAULT_READ_TIMEOUT_S = 10.0  # integrations.read_timeout's default
TERMINAL_TRIGGER = ("completed", "failed")
TERMINAL_EXECUTION = ("succeeded", "failed")
NO_END = math.inf
# A step that the database or its replica's loss stopped is tried again after a backoff capped
# at this (the service's actors/leases.py RETRY_MAX).
RETRY_MAX_S = 30.0
STOPS_THE_SERVICE = ("db_", "sqlite_lock", "kill9", "sigstop", "sigterm_restart")
DEFAULT_RETRY_BUDGET_S = 1800.0  # transient_retry_budget's default, "30m"
# A transient retry's backoff doubles from 5 s up to this: a gap between two faults of one
# peer shorter than it may fall between two tries, which then see one fault.
BACKOFF_CAP_S = 300.0
BUDGET_SLACK_S = 5.0  # a budget's edges, judged against the faults' recorded times
PAST_THE_BUDGET = "past the retry budget"

PROMISES = {
    1: "every accepted trigger reached an end",
    2: "every execution ended, or is parked with its wake and deadline ahead",
    3: "no side effect twice",
    4: "no two live executions of one issue and policy family at once",
    5: "every ACK wait ended by its deadline plus the bound",
    6: "the round robin spread evenly",
    7: "the intake never answered 500, and every 503 carried Retry-After",
    8: "no ERROR log line without a cause the nemesis injected",
    9: "no trigger or execution failed for a transient cause that ended within the retry "
       "budget",
}


# -- the history -------------------------------------------------------------------------------


class HistoryUnreadable(Exception):
    """A file of the run directory is missing or is not what the contract says."""


@dataclass(frozen=True)
class Fault:
    t_start: float
    t_end: float
    kind: str
    target: str
    detail: dict

    def near(self, start: float, end: float, margin: float) -> bool:
        return self.t_start - margin <= end and start <= self.t_end + margin


@dataclass(frozen=True)
class Call:
    """One request a fake received (line ``line`` of calls.jsonl)."""

    line: int
    t: float
    service: str
    method: str
    path: str
    route: str | None
    body: Any
    status: int | None
    applied: bool
    fault: int | None
    key: str | None
    t_end: float | None = None  # when the fake answered (None: never)


@dataclass(frozen=True)
class LogLine:
    file: str
    number: int
    replica: str  # "replica-<i>", from the file name
    t: float | None  # None: not JSON, and no earlier line of its file had a time
    level: str  # "UNPARSED" for a line that is not one JSON object
    text: str
    entry: dict | None


@dataclass
class History:
    directory: Path
    run: dict
    requests: list[dict]
    acks: list[dict]
    faults: list[Fault]
    calls: list[Call]
    logs: list[LogLine]
    log_files: int
    triggers: dict[int, dict]
    executions: dict[int, dict]

    @property
    def started_at(self) -> float:
        return float(self.run["started_at"])

    @property
    def ended_at(self) -> float:
        return float(self.run["ended_at"])

    @property
    def ack_bound_s(self) -> float:
        return float(self.run["ack_bound_s"])

    @property
    def read_timeout_s(self) -> float:
        """The service's read timeout for its peers: a call that took this long lost its
        answer."""
        return float(self.run.get("read_timeout_s") or DEFAULT_READ_TIMEOUT_S)

    @property
    def log_grace_s(self) -> float:
        return float(self.run["lease_seconds"]) + LOG_GRACE_EXTRA_S

    def setting(self, name: str) -> str | None:
        """A serve setting by its name without ``TICKET_DISPATCHER_`` (either spelling)."""
        settings = self.run.get("settings") or {}
        value = settings.get(name, settings.get(f"TICKET_DISPATCHER_{name}"))
        return None if value is None else str(value)

    @property
    def l2_field_id(self) -> str:
        return self.setting("JIRA_L2_FIELD_ID") or DEFAULT_L2_FIELD_ID

    @property
    def retry_budget_s(self) -> float:
        """How long the service retries a transient failure, in seconds: run.json's
        ``transient_retry_budget_s``, else the replicas' setting, else the default."""
        if self.run.get("transient_retry_budget_s") is not None:
            return float(self.run["transient_retry_budget_s"])
        return duration_s(self.setting("TRANSIENT_RETRY_BUDGET") or "") \
            or DEFAULT_RETRY_BUDGET_S

    def live(self) -> Iterator[dict]:
        return (e for e in self.executions.values() if e.get("mode") == "live")

    def span(self, execution: dict) -> tuple[float, float]:
        """From created_at to completed_at (no end while it has none)."""
        return (epoch(execution["created_at"]),
                epoch(execution["completed_at"]) if execution.get("completed_at") else NO_END)


_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)\s*")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str) -> float | None:
    """A setting's duration (``"500ms"``, ``"90s"``, ``"30m"``) in seconds; None when it is
    not one."""
    found = _DURATION.fullmatch(text)
    return float(found.group(1)) * _UNIT_S[found.group(2)] if found else None


def epoch(text: str) -> float:
    """An RFC 3339 time as the API writes it (``2026-01-05T09:30:00.123Z``), in epoch s."""
    value = datetime.fromisoformat(text.replace("z", "Z"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def load(run_dir: str | Path) -> History:
    """The run directory read into memory; ``HistoryUnreadable`` names what is wrong."""
    directory = Path(run_dir)
    if not directory.is_dir():
        raise HistoryUnreadable(f"{directory} is not a directory")
    run = _read_json(directory / "run.json")
    final = _read_json(directory / "final.json")
    requests = _read_jsonl(directory / "requests.jsonl")
    raw_faults = _read_jsonl(directory / "faults.jsonl")
    raw_calls = _read_jsonl(directory / "calls.jsonl")
    acks = _read_jsonl(directory / "acks.jsonl") if (directory / "acks.jsonl").exists() else []
    try:
        for key in ("started_at", "ended_at", "ack_bound_s", "lease_seconds"):
            float(run[key])
        faults = [Fault(float(f["t_start"]),
                        float(f["t_end"] if f.get("t_end") is not None else run["ended_at"]),
                        str(f["kind"]), str(f.get("target") or ""), f.get("detail") or {})
                  for f in raw_faults]
        calls = [_call(number, c) for number, c in enumerate(raw_calls, start=1)]
        triggers = {int(t["id"]): t for t in final["triggers"]}
        executions = {int(e["id"]): e for e in final["executions"]}
        for execution in executions.values():
            epoch(execution["created_at"])
        for request in requests:
            float(request["t"])
    except (KeyError, TypeError, ValueError) as exc:
        raise HistoryUnreadable(f"{directory}: a record lacks or misstates {exc}") from None
    logs, files = _read_logs(directory / "logs")
    return History(directory, run, requests, acks, faults, calls, logs, files, triggers,
                   executions)


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except OSError as exc:
        raise HistoryUnreadable(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise HistoryUnreadable(f"{path}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise HistoryUnreadable(f"{path}: not a JSON object")
    return value


def _read_jsonl(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise HistoryUnreadable(f"{path}: {exc.strerror or exc}") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = _json_object(line)
        if record is None:
            raise HistoryUnreadable(f"{path}:{number}: not one JSON object")
        records.append(record)
    return records


def _json_object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _call(number: int, raw: dict) -> Call:
    return Call(number, float(raw["t"]), str(raw["service"]), str(raw["method"]).upper(),
                str(raw["path"]).split("?", 1)[0], raw.get("route"), raw.get("body"),
                raw.get("status"), bool(raw.get("applied")), raw.get("fault"), raw.get("key"),
                None if raw.get("t_end") is None else float(raw["t_end"]))


_REPLICA_FILE = re.compile(r"^(replica-\d+)")


def _read_logs(directory: Path) -> tuple[list[LogLine], int]:
    """Every line of every replica log. Lines in a row that are not JSON (a traceback on
    stderr) are one ``UNPARSED`` entry with the time of the line before them; the last line of
    a file cut short (a killed process) is dropped."""
    if not directory.is_dir():
        return [], 0
    lines: list[LogLine] = []
    files = sorted(directory.glob("*.log"))
    for path in files:
        found = _REPLICA_FILE.match(path.name)
        replica = found.group(1) if found else path.stem
        rows = path.read_text(errors="replace").split("\n")
        rows.pop()  # "" after the last newline, or a line torn by the process's death
        last_t: float | None = None
        for number, text in enumerate(rows, start=1):
            if not text.strip():
                continue
            entry = _json_object(text)
            if entry is None:
                previous = lines[-1] if lines and lines[-1].file == path.name else None
                if previous is not None and previous.entry is None:  # the same block goes on
                    lines[-1] = replace(previous, text=previous.text + "\n" + text)
                else:
                    lines.append(LogLine(path.name, number, replica, last_t, "UNPARSED", text,
                                         None))
                continue
            try:
                last_t = epoch(str(entry.get("ts")))
            except ValueError:
                pass
            lines.append(LogLine(path.name, number, replica, last_t,
                                 str(entry.get("level") or ""), text, entry))
    return lines, len(files)


def actions(execution: dict) -> Iterator[tuple[dict, dict]]:
    """(rule execution, action execution) in order."""
    for rule in execution.get("rule_executions") or []:
        for action in rule.get("action_executions") or []:
            yield rule, action


def state(action: dict, key: str) -> dict:
    """The action's saved state under ``key`` of its context ({} when none)."""
    value = (action.get("context") or {}).get(key)
    return value if isinstance(value, dict) else {}


# -- the report --------------------------------------------------------------------------------


@dataclass
class Violation:
    """One broken promise, with what a person needs to find it in the run."""

    promise: int
    title: str
    detail: list[str] = field(default_factory=list)
    t_from: float | None = None
    t_to: float | None = None
    trigger_id: int | None = None
    issue_key: str | None = None
    execution_ids: list[int] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    log_lines: list[LogLine] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)


@dataclass
class Report:
    run_dir: str
    violations: list[Violation]
    summary: dict

    def text(self) -> str:
        return _Printer(self).text()


def check(run_dir: str | Path) -> Report:
    """Every promise over the run's whole history."""
    history = load(run_dir)
    summary = _summary(history)
    violations: list[Violation] = []
    for promise in _PROMISE_CHECKS:
        violations.extend(promise(history, summary))
    for violation in violations:
        _complete(history, violation)
    violations.sort(key=lambda v: (v.promise, NO_END if v.t_from is None else v.t_from))
    return Report(str(run_dir), violations, summary)


def _complete(history: History, violation: Violation) -> None:
    """Fill in the trigger, the issue and the faults around it from what the check named."""
    first = history.executions.get(violation.execution_ids[0]) \
        if violation.execution_ids else None
    if violation.trigger_id is None and first is not None:
        violation.trigger_id = first.get("trigger_id")
    if violation.issue_key is None:
        if violation.trigger_id in history.triggers:
            violation.issue_key = history.triggers[violation.trigger_id].get("issue_key")
        elif first is not None:
            violation.issue_key = first.get("issue_key")
    times = [t for t in (violation.t_from, violation.t_to) if t is not None and t != NO_END]
    times += [c.t for c in violation.calls] + [ln.t for ln in violation.log_lines if ln.t]
    if times:
        violation.faults = sorted((f for f in history.faults
                                   if f.near(min(times), max(times), FAULT_CONTEXT_S)),
                                  key=lambda f: (f.t_start, f.kind))


# -- 1: every accepted trigger ended -----------------------------------------------------------


def _triggers_ended(history: History, summary: dict) -> Iterator[Violation]:
    accepted: dict[int, dict] = {}
    for request in history.requests:
        if request.get("status") == 202 and request.get("trigger_id") is not None:
            accepted.setdefault(int(request["trigger_id"]), request)
    for trigger_id, request in sorted(accepted.items()):
        trigger = history.triggers.get(trigger_id)
        answered = float(request.get("t_end") or request["t"])
        if trigger is None:
            yield Violation(1, f"trigger {trigger_id}, answered 202, is not in the database",
                            [f"{_describe_request(request)} at {_clock_of(history, answered)}"],
                            t_from=answered, trigger_id=trigger_id,
                            issue_key=request.get("issue_key"))
        elif trigger.get("status") not in TERMINAL_TRIGGER:
            yield Violation(1, f"trigger {trigger_id}, answered 202, is still "
                               f"{trigger.get('status')} at the end",
                            [f"{_describe_request(request)} at {_clock_of(history, answered)}",
                             f"created {trigger.get('created_at')}, never completed or failed"],
                            t_from=answered, trigger_id=trigger_id,
                            issue_key=trigger.get("issue_key"),
                            execution_ids=list(trigger.get("execution_ids") or []))


# -- 2: every execution ended, or is parked as it should be ------------------------------------


def _executions_ended(history: History, summary: dict) -> Iterator[Violation]:
    end, bound = history.ended_at, history.ack_bound_s
    for execution in sorted(history.executions.values(), key=lambda e: e["id"]):
        status = execution.get("status")
        if status in TERMINAL_EXECUTION:
            continue
        described = _describe_execution(history, execution)
        if status not in ("created", "executing") or not execution.get("wake_at"):
            yield Violation(2, f"execution {execution['id']} is {status} at the end, and not "
                               f"parked", [described, "it has no wake_at: no timer resumes it"],
                            t_from=end, execution_ids=[execution["id"]])
            continue
        wake = epoch(execution["wake_at"])
        if wake + bound < end:
            yield Violation(2, f"execution {execution['id']} is parked with a wake long past",
                            [described, f"wake_at {_clock_of(history, wake)} is "
                                        f"{end - wake:.1f} s before the end (bound {bound:g} s)"],
                            t_from=wake, t_to=end, execution_ids=[execution["id"]])
        for _, action in actions(execution):
            page = state(action, "page")
            if action.get("type") != "page_assignment" or not page.get("deadline") \
                    or action.get("finished_at") or action.get("status") != "executing":
                continue
            deadline = epoch(page["deadline"])
            if deadline + bound < end:
                yield Violation(2, f"execution {execution['id']} still waits in page "
                                   f"{page.get('attempt')}, past its deadline",
                                [described, f"the deadline {_clock_of(history, deadline)} is "
                                            f"{end - deadline:.1f} s before the end (bound "
                                            f"{bound:g} s); polls {page.get('polls', 0)}"],
                                t_from=deadline, t_to=end, execution_ids=[execution["id"]])


# -- 3: no side effect twice -------------------------------------------------------------------


_ASSIGNEE_PATH = re.compile(r"/rest/api/2/issue/([^/]+)/assignee$")
_ISSUE_PATH = re.compile(r"/rest/api/2/issue/([^/]+)$")
_COMMENT_PATH = re.compile(r"/rest/servicedeskapi/request/([^/]+)/comment$")
_SEND_PATH = re.compile(r"/open-apis/im/v1/messages$")
_URGENT_PATH = re.compile(r"/open-apis/im/v1/messages/([^/]+)/urgent_app$")
_PAGE_PATH = re.compile(r"/api/v1/page$")
_IDEMPOTENCY_KEY = re.compile(r"^td-(\d+)-(\d+)-(\d+)$")
_TARGET_LINE = re.compile(r"^Target: .*\(([^()]*)\)\s*$", re.MULTILINE)
_PAGE_COMMENT = re.compile(r"Urgent: yes\s*\n\s*Attempt: (\d+)")
_WRITTEN_PHASES = ("started", "finished")

WHAT = {"assignee": "Jira assignee write", "l2": "Jira L2 assignee write",
        "comment:card": "card comment (Urgent: no)", "comment:ack": "ACK comment",
        "comment:other": "internal comment of no workflow kind"}


@dataclass(frozen=True)
class _Slot:
    """One write an execution may have made: at most one applied call fits it."""

    execution_id: int
    what: str
    value: str | None  # what the call must carry (an account ID, the target's email); None: any
    start: float
    end: float

    def fits(self, call: Call, value: str | None) -> bool:
        same = self.value is None or value is None or self.value.lower() == value.lower()
        return same and \
            self.start - ATTRIBUTION_SLACK_S <= call.t <= self.end + ATTRIBUTION_SLACK_S


def _side_effects_once(history: History, summary: dict) -> Iterator[Violation]:
    yield from _keyed_side_effects(history)
    yield from _jira_side_effects(history)
    yield from _assigned_after_the_label_went(history)


def _assigned_after_the_label_went(history: History) -> Iterator[Violation]:
    """An issue assigned again by a live execution after an earlier one assigned it and
    removed the policy's label (the module's promise 3, ordinary dispatch)."""
    label = history.run.get("assign_label")
    if not label:
        return
    assigned: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for execution in sorted(history.live(), key=lambda e: (e.get("created_at") or "", e["id"])):
        for _, action in actions(execution):
            assign = state(action, "assign")
            if action.get("type") == "assign" and assign.get("jira_updated"):
                assigned[execution["issue_key"]].append((execution, assign))
    for issue_key, writes in sorted(assigned.items()):
        for (first, first_assign), (later, _) in zip(writes, writes[1:], strict=False):
            if first_assign.get("label_removed") != label:
                continue
            yield Violation(3, f"{issue_key}: assigned again by execution {later['id']} after "
                               f"execution {first['id']} assigned it and removed {label!r}",
                            [_describe_execution(history, first),
                             _describe_execution(history, later),
                             f"the policy requires {label!r}: no trigger after the removal "
                             f"should have matched"],
                            t_from=history.span(first)[0], issue_key=issue_key,
                            execution_ids=[first["id"], later["id"]],
                            trigger_id=later.get("trigger_id"))


def _applied(history: History, service: str) -> Iterator[Call]:
    return (c for c in history.calls if c.service == service and c.applied)


def _idempotency_owner(history: History, key: str | None) -> tuple[dict, dict, dict] | None:
    """The (execution, rule, action) a ``td-<execution>-<rule>-<action>`` key names."""
    found = _IDEMPOTENCY_KEY.match(key or "")
    if not found:
        return None
    execution_id, sequence, index = (int(g) for g in found.groups())
    execution = history.executions.get(execution_id)
    for rule, action in actions(execution or {}):
        if rule.get("sequence") == sequence and action.get("index") == index:
            return execution, rule, action
    return None


def _key_execution(key: str) -> list[int]:
    found = _IDEMPOTENCY_KEY.match(key or "")
    return [int(found.group(1))] if found else []


def _keyed_side_effects(history: History) -> Iterator[Violation]:
    """Cards by uuid, App-urgents by message, pages by dedup key: each at most once."""
    cards: dict[str, list[Call]] = defaultdict(list)
    urgents: dict[str, list[Call]] = defaultdict(list)
    pages: dict[str, list[Call]] = defaultdict(list)
    for call in _applied(history, "lark"):
        body = call.body if isinstance(call.body, dict) else {}
        if call.method == "POST" and _SEND_PATH.search(call.path):
            cards[str(call.key or body.get("uuid") or "")].append(call)
        elif call.method == "PATCH" and (found := _URGENT_PATH.search(call.path)):
            urgents[unquote(found.group(1))].append(call)
    for call in _applied(history, "oncall"):
        body = call.body if isinstance(call.body, dict) else {}
        if call.method == "POST" and _PAGE_PATH.search(call.path):
            pages[str(call.key or body.get("dedup_key") or "")].append(call)
    yield from _cards_once(history, cards)
    yield from _urgents_once(history, urgents)
    yield from _pages_once(history, pages)


def _cards_once(history: History, cards: dict[str, list[Call]]) -> Iterator[Violation]:
    for uuid, sends in sorted(cards.items()):
        owner = _idempotency_owner(history, uuid)
        card = state(owner[2], "notification") if owner else {}
        if owner is None or card.get("card_uuid") != uuid:
            yield Violation(3, f"a Lark card (uuid {uuid or 'none'}) no card in the database "
                               f"accounts for",
                            [f"{len(sends)} applied send(s); no send_assignment_notification "
                             f"has this card_uuid"],
                            t_from=sends[0].t, calls=sends, execution_ids=_key_execution(uuid))
        elif len(sends) > 1:
            execution = owner[0]
            yield Violation(3, f"{len(sends)} Lark messages for one card (uuid {uuid})",
                            [_describe_execution(history, execution),
                             f"the card saved message_id {card.get('message_id')!r}; each "
                             f"of these sends created a message"],
                            t_from=sends[0].t, calls=sends, execution_ids=[execution["id"]])


def _urgents_once(history: History, urgents: dict[str, list[Call]]) -> Iterator[Violation]:
    owners: dict[str, list[int]] = defaultdict(list)
    for execution in history.executions.values():
        for _, action in actions(execution):
            message_id = state(action, "notification").get("message_id")
            if message_id:
                owners[message_id].append(execution["id"])
    for message_id, calls in sorted(urgents.items()):
        named = owners.get(message_id, [])
        if len(calls) > 1 or not named:
            why = (f"the card of execution {', '.join(map(str, named))}" if named else
                   "no card in the database has this message_id")
            yield Violation(3, f"{len(calls)} applied App-urgent call(s) for message "
                               f"{message_id}" + ("" if named else ", whose card is unknown"),
                            [why], t_from=calls[0].t, calls=calls, execution_ids=named)


def _pages_once(history: History, pages: dict[str, list[Call]]) -> Iterator[Violation]:
    by_attempt: dict[tuple, list[Call]] = defaultdict(list)
    for dedup_key, calls in sorted(pages.items()):
        owner = _idempotency_owner(history, dedup_key)
        if owner is None or owner[2].get("type") != "page_assignment":
            yield Violation(3, f"an Oncall page (dedup_key {dedup_key or 'none'}) no page "
                               f"action in the database accounts for",
                            [f"{len(calls)} applied page(s)"], t_from=calls[0].t, calls=calls,
                            execution_ids=_key_execution(dedup_key))
            continue
        execution, _, action = owner
        attempt = ((action.get("action") or {}).get("page_assignment") or {}).get("attempt")
        by_attempt[(execution["id"], attempt)].extend(calls)
    for (execution_id, attempt), calls in sorted(by_attempt.items(), key=lambda kv: kv[0]):
        if len(calls) > 1:
            execution = history.executions[execution_id]
            yield Violation(3, f"{len(calls)} Oncall pages for execution {execution_id}, "
                               f"attempt {attempt}", [_describe_execution(history, execution)],
                            t_from=min(c.t for c in calls), calls=sorted(calls, key=lambda c: c.t),
                            execution_ids=[execution_id])


def _jira_side_effects(history: History) -> Iterator[Violation]:
    """Assignee and L2 writes and workflow comments, attributed to the write slots of their
    issue's live executions (the module's promise 3). An assignee or L2 write that repeats the
    write just before it, whose answer the service lost to its read timeout, is that slot's
    too: the re-read came before the slow write landed, and the same value was written again
    (the field keeps it, with no second change)."""
    written: dict[tuple[str, str], list[tuple[Call, str | None]]] = defaultdict(list)
    for call in _applied(history, "jira"):
        write = _jira_write(call, history.l2_field_id)
        if write is not None:
            kind, issue_key, value = write
            written[(kind, issue_key)].append((call, value))
    slots = _write_slots(history)
    for (kind, issue_key), calls in sorted(written.items()):
        calls.sort(key=lambda cv: cv[0].t)
        candidates = slots.get((kind, issue_key), [])
        owner, left = _attribute(calls, candidates)
        if not kind.startswith("comment:"):
            left = [i for i in left if not _repeat_of_a_lost_answer(history, calls, i, owner,
                                                                    candidates)]
        if left:
            yield _unaccounted(history, kind, issue_key, calls, candidates, owner, left)


def _repeat_of_a_lost_answer(history: History, calls: list[tuple[Call, str | None]],
                             index: int, owner: dict[int, int], slots: list[_Slot]) -> bool:
    """Call ``index`` writes the value of the call before it, which took the service's whole
    read timeout (its answer was lost) and is accounted for by a slot this one fits too."""
    if index == 0:
        return False
    (call, value), (before, before_value) = calls[index], calls[index - 1]
    if (value or "").lower() != (before_value or "").lower() or before.t_end is None \
            or before.t_end - before.t < history.read_timeout_s:
        return False
    return any(taker == index - 1 and slots[slot].fits(call, value)
               for slot, taker in owner.items())


def _jira_write(call: Call, l2_field_id: str) -> tuple[str, str, str | None] | None:
    """(kind, issue key, value) of a Jira side effect the checker counts; None for the rest
    (reads, and label edits: a label added or removed by name is idempotent)."""
    body = call.body if isinstance(call.body, dict) else {}
    if call.method == "PUT" and (found := _ASSIGNEE_PATH.search(call.path)):
        return "assignee", unquote(found.group(1)), body.get("accountId")
    if call.method == "PUT" and (found := _ISSUE_PATH.search(call.path)):
        fields = body.get("fields") if isinstance(body.get("fields"), dict) else {}
        if l2_field_id not in fields:
            return None
        value = fields[l2_field_id]
        return "l2", unquote(found.group(1)), \
            value.get("accountId") if isinstance(value, dict) else None
    if call.method == "POST" and (found := _COMMENT_PATH.search(call.path)):
        text = str(body.get("body") or "")
        target = _TARGET_LINE.search(text)
        return _comment_kind(text), unquote(found.group(1)), target.group(1) if target else None
    return None


def _comment_kind(text: str) -> str:
    if "Assignment notification acknowledged" in text:
        return "comment:ack"
    found = _PAGE_COMMENT.search(text)
    if found:
        return f"comment:page {found.group(1)}"
    if "Urgent: no" in text:
        return "comment:card"
    return "comment:other"


def _write_slots(history: History) -> dict[tuple[str, str], list[_Slot]]:
    """Every write a live execution may have made, by (kind, issue)."""
    slots: dict[tuple[str, str], list[_Slot]] = defaultdict(list)
    for execution in history.live():
        start, end = history.span(execution)
        for rule, action in actions(execution):
            where = f"rule {rule.get('sequence')} action {action.get('index')}"
            for kind, what, value in _action_writes(action):
                slots[(kind, execution["issue_key"])].append(
                    _Slot(execution["id"], f"{what} ({where})", value, start, end))
    return slots


def _action_writes(action: dict) -> Iterator[tuple[str, str, str | None]]:
    """(kind, what, value) of each write this action may have made, by its saved state."""
    kind = action.get("type")
    if kind in ("assign", "assign_l2"):
        assign = state(action, "assign")
        if assign.get("assignee") and action.get("status") != "skipped":
            yield ("l2" if kind == "assign_l2" else "assignee",
                   f"{kind} to {assign['assignee']}", assign.get("account_id") or None)
        return
    card = state(action, "notification")
    if card.get("notification_comment_phase") in _WRITTEN_PHASES:
        yield "comment:card", "card comment", _target_email(card.get("snapshot"))
    for key in ("urgent", "page", "escalation"):
        guarded = state(action, key)
        target = _target_email(guarded.get("expected"))
        if guarded.get("ack_comment_phase") in _WRITTEN_PHASES:
            yield "comment:ack", f"{key} ACK comment", target
        if key == "page" and guarded.get("notification_comment_phase") in _WRITTEN_PHASES:
            attempt = guarded.get("attempt")
            yield f"comment:page {attempt}", f"page {attempt} comment", target
        intent = guarded.get("intent") if key == "escalation" else None
        if isinstance(intent, dict) and intent.get("to_account_id"):
            role = (guarded.get("expected") or {}).get("role")
            yield ("l2" if role == "l2_assignee" else "assignee",
                   f"escalation to {intent.get('to_email') or intent['to_account_id']}",
                   intent["to_account_id"])


def _target_email(holder: Any) -> str | None:
    target = holder.get("target") if isinstance(holder, dict) else None
    return (target.get("email") or None) if isinstance(target, dict) else None


def _attribute(calls: list[tuple[Call, str | None]], slots: list[_Slot]
               ) -> tuple[dict[int, int], list[int]]:
    """A largest matching of calls to the slots they fit, one call a slot: slot index → call
    index, and the indexes of the calls left over. Augmenting paths (Kuhn), searched with a
    stack rather than recursion: an issue triggered again and again has many slots."""
    fits = [[i for i, slot in enumerate(slots) if slot.fits(call, value)]
            for call, value in calls]
    owner: dict[int, int] = {}

    def place(first: int) -> bool:
        seen: set[int] = set()
        stack = [(first, iter(fits[first]))]
        path: list[tuple[int, int]] = []  # (call, the slot it takes from the next call)
        while stack:
            call, options = stack[-1]
            slot = next((s for s in options if s not in seen), None)
            if slot is None:  # no way on from this call: back up
                stack.pop()
                if path:
                    path.pop()
                continue
            seen.add(slot)
            if slot not in owner:  # a free slot: shift every call on the path by one
                owner[slot] = call
                for taker, taken in path:
                    owner[taken] = taker
                return True
            path.append((call, slot))
            stack.append((owner[slot], iter(fits[owner[slot]])))
        return False

    left = [index for index in range(len(calls)) if not place(index)]
    return owner, left


def _unaccounted(history: History, kind: str, issue_key: str,
                 calls: list[tuple[Call, str | None]], slots: list[_Slot],
                 owner: dict[int, int], left: list[int]) -> Violation:
    what = WHAT.get(kind) or f"{kind.removeprefix('comment:')} comment (Urgent: yes)"
    detail = []
    for slot_index, slot in enumerate(slots):
        taken = owner.get(slot_index)
        by = "no call" if taken is None else \
            f"the call at {_clock_of(history, calls[taken][0].t)}"
        carries = "" if slot.value is None else f", carrying {slot.value}"
        detail.append(f"execution {slot.execution_id}: {slot.what}{carries}, accounts for "
                      f"{by}")
    if not slots:
        detail.append(f"no live execution of {issue_key} may have made a {what}")
    involved: list[int] = []
    for index in left:
        call, value = calls[index]
        fitting = sorted({s.execution_id for s in slots if s.fits(call, value)})
        involved += fitting
        where = (f"it fits execution {', '.join(map(str, fitting))}, already accounted for"
                 if fitting else "it fits no execution (by value and time)")
        detail.append(f"left over: the call at {_clock_of(history, call.t)} "
                      f"({value or 'no value'}): {where}")
    executions = list(dict.fromkeys(involved + [s.execution_id for s in slots]))
    detail += [_describe_execution(history, history.executions[e]) for e in executions[:5]]
    return Violation(3, f"{issue_key}: {len(calls)} applied {what}s, its executions account "
                        f"for {len(calls) - len(left)}", detail,
                     t_from=calls[left[0]][0].t, issue_key=issue_key,
                     execution_ids=executions, calls=[c for c, _ in calls])


# -- 4: no overlap -----------------------------------------------------------------------------


def _no_overlap(history: History, summary: dict) -> Iterator[Violation]:
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for execution in history.live():
        runs[(execution["issue_key"], str(execution.get("policy_family_id")))].append(execution)
    for (issue_key, family), executions in sorted(runs.items()):
        executions.sort(key=lambda e: (history.span(e)[0], e["id"]))
        latest: dict | None = None  # of those before, the one that ended last
        for execution in executions:
            start, end = history.span(execution)
            if latest is not None and start < history.span(latest)[1]:
                versions = sorted({latest.get("policy_id"), execution.get("policy_id")}, key=str)
                note = [] if len(versions) == 1 else [
                    f"policy versions {versions} of the family: an ordinary policy is locked "
                    f"per version"]
                yield Violation(4, f"{issue_key}: executions {latest['id']} and "
                                   f"{execution['id']} of family {family} overlapped",
                                [_describe_execution(history, latest),
                                 _describe_execution(history, execution), *note],
                                t_from=start, t_to=min(history.span(latest)[1], end),
                                issue_key=issue_key,
                                execution_ids=[latest["id"], execution["id"]])
            if latest is None or end > history.span(latest)[1]:
                latest = execution


# -- 5: ACK waits end on time ------------------------------------------------------------------


def wait_allowed_until(history: History, deadline: float) -> float:
    """The latest a wait with ``deadline`` may end: the deadline plus ``ack_bound_s``, and
    where a fault that stops the service itself (the database, the replica) lasts past the
    deadline, that fault's end plus the bound plus the retry backoff's cap: the step it stopped
    is tried again after that backoff. Jira or Lark failing extends nothing (no verdict)."""
    allowed = deadline + history.ack_bound_s
    blocking = [f for f in history.faults if f.kind.startswith(STOPS_THE_SERVICE)]
    for _ in range(len(blocking) + 1):  # each pass may only extend it: bounded
        extended = max([allowed] + [f.t_end + history.ack_bound_s + RETRY_MAX_S
                                    for f in blocking if f.t_start <= allowed
                                    and f.t_end >= deadline])
        if extended == allowed:
            break
        allowed = extended
    return allowed


def _waits_on_time(history: History, summary: dict) -> Iterator[Violation]:
    bound = history.ack_bound_s
    for execution in sorted(history.executions.values(), key=lambda e: e["id"]):
        for _, action in actions(execution):
            page = state(action, "page")
            if action.get("type") != "page_assignment" or not page.get("deadline") \
                    or not action.get("finished_at"):
                continue
            deadline, finished = epoch(page["deadline"]), epoch(action["finished_at"])
            allowed = wait_allowed_until(history, deadline)
            if finished > allowed:
                yield Violation(5, f"execution {execution['id']}: the wait of page "
                                   f"{page.get('attempt')} ended {finished - deadline:.1f} s "
                                   f"after its deadline",
                                [_describe_execution(history, execution),
                                 f"deadline {_clock_of(history, deadline)}, finished "
                                 f"{_clock_of(history, finished)} (allowed until "
                                 f"{_clock_of(history, allowed)}: bound {bound:g} s, and a "
                                 f"fault's end plus {RETRY_MAX_S:g} s where one stopped the "
                                 f"service), outcome {page.get('outcome')!r}, polls "
                                 f"{page.get('polls', 0)}"],
                                t_from=deadline, t_to=finished,
                                execution_ids=[execution["id"]])


# -- 6: the round robin is even ----------------------------------------------------------------


def _even_spread(history: History, summary: dict) -> Iterator[Violation]:
    turns: dict[tuple, list[tuple[str, dict]]] = defaultdict(list)
    movers: dict[str, set] = defaultdict(set)  # engineer -> what moved their turn
    for execution in history.live():
        for rule, action in actions(execution):
            if action.get("type") not in ("assign", "assign_l2"):
                continue
            assign = state(action, "assign")
            chosen = (assign.get("assignee") or "").lower()
            if not chosen:
                continue
            if assign.get("turn_taken") and assign.get("strategy") == "round_robin":
                group = (execution.get("policy_id"), rule.get("sequence"),
                         tuple(c.lower() for c in assign.get("candidates") or []))
                turns[group].append((chosen, execution))
                movers[chosen].add(group)
            elif assign.get("turn_taken") or assign.get("jira_updated"):
                movers[chosen].add(("another strategy", execution["id"]))
    groups = []
    for group, chosen in sorted(turns.items(), key=lambda kv: str(kv[0])):
        policy_id, sequence, members = group
        counts = Counter({member: 0 for member in members})
        counts.update(email for email, _ in chosen)
        entry = {"policy_id": policy_id, "rule": sequence, "turns": len(chosen),
                 "counts": dict(counts)}
        shared = sorted(m for m in members if movers[m] - {group})
        if shared:
            entry["not_judged"] = f"{', '.join(shared)} also dispatched elsewhere"
        groups.append(entry)
        spread = max(counts.values()) - min(counts.values())
        if shared or spread <= 1:
            continue
        succeeded = Counter(e for e, x in chosen if x.get("status") == "succeeded")
        times = [history.span(x)[0] for _, x in chosen]
        yield Violation(6, f"policy {policy_id} rule {sequence}: the round-robin turns "
                           f"differ by {spread}",
                        [f"turns per engineer over {len(chosen)} turns: "
                         + ", ".join(f"{m} {counts[m]}" for m in members),
                         "of them in succeeded executions: "
                         + ", ".join(f"{m} {succeeded[m]}" for m in members)],
                        t_from=min(times), t_to=max(times),
                        execution_ids=sorted(x["id"] for _, x in chosen)[:20])
    summary["round_robin"] = groups


# -- 7: the intake degrades politely -----------------------------------------------------------


def _polite_intake(history: History, summary: dict) -> Iterator[Violation]:
    for request in history.requests:
        status = request.get("status")
        if not isinstance(status, int):
            continue
        if status >= 500 and status != 503:
            yield Violation(7, f"the intake answered {status}", [_describe_request(request)],
                            t_from=float(request["t"]),
                            trigger_id=_int_or_none(request.get("trigger_id")),
                            issue_key=request.get("issue_key"))
        elif status == 503 and not request.get("retry_after"):
            yield Violation(7, "a 503 without Retry-After", [_describe_request(request)],
                            t_from=float(request["t"]), issue_key=request.get("issue_key"))


def _describe_request(request: dict) -> str:
    status = request.get("status")
    answer = "no answer" if status is None else f"answered {status}"
    if status in (429, 503):
        answer += f", Retry-After {request.get('retry_after')!r}"
    error = f", error {request['error']}" if request.get("error") else ""
    return (f"POST to replica {request.get('replica')}: {request.get('source')} "
            f"{request.get('issue_key')} ({request.get('mix')} mix, attempt "
            f"{request.get('attempt')}), {answer}{error}")


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- 8: every ERROR has a cause ----------------------------------------------------------------


_PEER_FAULTS = {"db_cut": "database", "db_stall": "database", "sqlite_lock": "database",
                "jira_5xx": "jira", "jira_429": "jira", "jira_slow": "jira",
                "lark_fail": "lark", "lark_slow": "lark",
                "oncall_fail": "oncall", "oncall_slow": "oncall"}
_OWN_DATABASE = re.compile(r"^db-(\d+)$")  # one replica's own link to the database
_DATABASE_WORDS = ("psycopg", "peewee", "sqlite", "database", "storeunavailable",
                   "store unavailable", "operationalerror", "interfaceerror",
                   "connection to server", "server closed the connection", "statement timeout",
                   "canceling statement", "cluster link", "ticket_dispatcher.store", "leaselost")
_PROBLEM_LEVELS = ("ERROR", "CRITICAL", "UNPARSED")


def _errors_explained(history: History, summary: dict) -> Iterator[Violation]:
    words = _peer_words(history)
    unexplained: dict[tuple, list[LogLine]] = defaultdict(list)
    for line in history.logs:
        if line.level not in _PROBLEM_LEVELS:
            continue
        classes = _classes(line, words)
        if not any(_explains(history, fault, line, classes) for fault in history.faults):
            entry = line.entry or {}
            message = entry.get("msg") if line.entry else line.text[:80]
            unexplained[(line.file, line.level, entry.get("logger"), message)].append(line)
    for (file, level, _, message), lines in sorted(
            unexplained.items(), key=lambda kv: NO_END if kv[1][0].t is None else kv[1][0].t):
        entry = lines[0].entry or {}
        classes = sorted(_classes(lines[0], words)) or ["no peer named"]
        shown = [f"{ln.file}:{ln.number} {ln.text[:300]}" for ln in lines[:5]]
        more = [f"... and {len(lines) - 5} more"] if len(lines) > 5 else []
        execution_id = _int_or_none(entry.get("execution_id"))
        yield Violation(8, f"{len(lines)} {level} line(s) of {file} with no injected cause: "
                           f"{message}", [f"about: {', '.join(classes)}", *shown, *more],
                        t_from=lines[0].t, t_to=lines[-1].t, log_lines=lines,
                        execution_ids=[] if execution_id is None else [execution_id],
                        trigger_id=_int_or_none(entry.get("trigger_id")),
                        issue_key=entry.get("issue_key"))


def _peer_words(history: History) -> dict[str, tuple[str, ...]]:
    """What in a log line names each peer: its name, and the host:port it is served on."""
    words: dict[str, tuple[str, ...]] = {"database": _DATABASE_WORDS, "jira": ("jira",),
                                         "lark": ("lark", "feishu"), "oncall": ("oncall",)}
    for peer, setting in (("jira", "JIRA_BASE_URL"), ("lark", "LARK_BASE_URL"),
                          ("oncall", "ONCALL_BASE_URL"), ("database", "DATABASE_URL")):
        url = history.setting(setting)
        netloc = urlsplit(url).netloc.rpartition("@")[2] if url and "://" in url else ""
        if netloc:
            words[peer] += (netloc.lower(),)
    return words


def _classes(line: LogLine, words: dict[str, tuple[str, ...]]) -> set[str]:
    text = line.text.lower()
    return {peer for peer, names in words.items() if any(name in text for name in names)}


def _explains(history: History, fault: Fault, line: LogLine, classes: set[str]) -> bool:
    """Whether ``fault`` can have caused ``line``, by its window and its kind (the module's
    promise 8). A database fault on ``db-<i>`` cut replica i's own link only; one on ``db``
    (the SQLite file's lock) and the peers' faults hit every replica; a rolling deploy
    (``replicas``) restarts them all."""
    if line.t is None or not (fault.t_start - LOG_LEAD_S <= line.t
                              <= fault.t_end + history.log_grace_s):
        return False
    if fault.kind in _PEER_FAULTS:
        own = _OWN_DATABASE.match(fault.target)
        return _PEER_FAULTS[fault.kind] in classes and (
            own is None or line.replica == f"replica-{own.group(1)}")
    if fault.kind == "sigstop" and "database" in classes:
        return True
    if fault.target == "replicas":
        return True
    return line.replica == fault.target  # a process fault, or a kind this checker lacks


# -- 9: a passing fault is never final ---------------------------------------------------------


# What integrations/http.py writes for a call that failed for now: a 429 or 5xx answer
# ("jira GET /rest/api/2/issue/A-1 failed: HTTP 503"), no answer ("jira PUT ...: no answer
# within the read timeout; the outcome is unknown"), or no connection ("jira GET ...:
# connection failed (ConnectionError)").
_TRANSIENT_STATUS = re.compile(r"\bHTTP (429|5[0-9][0-9])\b")
_TRANSIENT_WORDS = ("no answer within the read timeout", "connection failed",
                    "connection refused")
_CALL_OF_PEER = re.compile(r"\b(jira|lark|oncall|core) (?:GET|PUT|POST|PATCH|DELETE) /")
_PEERS_WITH_FAULTS = ("jira", "lark", "oncall")


def transient_cause(reason: str) -> str | None:
    """The transient cause a failure reason names (``HTTP 429``, ``HTTP 503``, ``no answer
    within the read timeout``, ``connection failed``), or None: a permanent failure."""
    found = _TRANSIENT_STATUS.search(reason)
    if found:
        return found.group(0)
    lowered = reason.lower()
    return next((words for words in _TRANSIENT_WORDS if words in lowered), None)


def _peers_named(reason: str) -> tuple[str, ...]:
    """The peers whose calls a reason names; every peer with faults when it names none."""
    named = tuple(sorted({found.group(1) for found in _CALL_OF_PEER.finditer(reason)}))
    return named or _PEERS_WITH_FAULTS


def _fault_stretches(history: History, peers: tuple[str, ...]) -> list[tuple[float, float]]:
    """The faults of ``peers`` as stretches of time, those less than ``BACKOFF_CAP_S`` apart
    joined."""
    spans = sorted((f.t_start, f.t_end) for f in history.faults
                   if f.kind.split("_", 1)[0] in peers)
    stretches: list[tuple[float, float]] = []
    for start, end in spans:
        if stretches and start <= stretches[-1][1] + BACKOFF_CAP_S:
            stretches[-1] = (stretches[-1][0], max(stretches[-1][1], end))
        else:
            stretches.append((start, end))
    return stretches


def _budget_spent_in_a_fault(history: History, reason: str, failed_at: float
                             ) -> tuple[bool, str]:
    """Whether a failure at ``failed_at`` may have spent the retry budget (the module's
    promise 9), and why (or why not)."""
    budget = history.retry_budget_s
    peers = _peers_named(reason)
    if PAST_THE_BUDGET not in reason:
        return False, (f"the reason does not say the retry budget ({budget:g} s) was spent: "
                       f"the service should have tried again")
    covering = [(start, end) for start, end in _fault_stretches(history, peers)
                if start <= failed_at - budget + BUDGET_SLACK_S
                and end >= failed_at - history.read_timeout_s - BUDGET_SLACK_S]
    if covering:
        return True, ""
    return False, (f"it says the retry budget ({budget:g} s) was spent, but no fault of "
                   f"{' or '.join(peers)} lasted from {_clock_of(history, failed_at - budget)} "
                   f"to its failure")


def _transient_failures_final(history: History, summary: dict) -> Iterator[Violation]:
    counts = Counter()
    for trigger in sorted(history.triggers.values(), key=lambda t: t["id"]):
        reason = str(trigger.get("failure_reason") or "")
        cause = transient_cause(reason) if trigger.get("status") == "failed" else None
        if cause is None:
            continue
        counts["triggers"] += 1
        failed_at = _time_of(trigger.get("completed_at") or trigger.get("updated_at"),
                             history.ended_at)
        allowed, why = _budget_spent_in_a_fault(history, reason, failed_at)
        counts["past_the_budget"] += allowed
        if allowed:
            continue
        retries = trigger.get("retries") if isinstance(trigger.get("retries"), dict) else {}
        since = _time_of(retries.get("since"), failed_at)
        yield Violation(9, f"trigger {trigger['id']} failed for a transient cause ({cause})",
                        [f"reason: {reason}", why,
                         f"retries: {json.dumps(retries) if retries else 'none recorded'}",
                         f"created {trigger.get('created_at')}, failed "
                         f"{_clock_of(history, failed_at)}"],
                        t_from=min(since, failed_at), t_to=failed_at, trigger_id=trigger["id"],
                        issue_key=trigger.get("issue_key"),
                        execution_ids=list(trigger.get("execution_ids") or []))
    for execution in sorted(history.executions.values(), key=lambda e: e["id"]):
        if execution.get("status") != "failed":
            continue
        errors = [str(a.get("error") or "") for _, a in actions(execution)
                  if a.get("status") == "failed" and a.get("error")]
        own = str(execution.get("failure_reason") or "")
        reason = "; ".join(r for r in dict.fromkeys([own, *(e for e in errors if e not in own)])
                           if r)
        cause = transient_cause(reason)
        if cause is None:
            continue
        counts["executions"] += 1
        failed_at = _time_of(execution.get("completed_at") or execution.get("updated_at"),
                             history.ended_at)
        allowed, why = _budget_spent_in_a_fault(history, reason, failed_at)
        counts["past_the_budget"] += allowed
        if allowed:
            continue
        yield Violation(9, f"execution {execution['id']} failed for a transient cause "
                           f"({cause})",
                        [_describe_execution(history, execution),
                         f"failure {execution.get('failure_code') or '-'}: {reason}", why],
                        t_from=history.span(execution)[0], t_to=failed_at,
                        execution_ids=[execution["id"]])
    summary["transient_failures"] = {key: counts[key] for key in
                                     ("triggers", "executions", "past_the_budget")}


def _time_of(text: Any, default: float) -> float:
    try:
        return epoch(str(text)) if text else default
    except ValueError:
        return default


_PROMISE_CHECKS: tuple[Callable[[History, dict], Iterable[Violation]], ...] = (
    _triggers_ended, _executions_ended, _side_effects_once, _no_overlap, _waits_on_time,
    _even_spread, _polite_intake, _errors_explained, _transient_failures_final)


# -- the summary and the printout --------------------------------------------------------------


def _summary(history: History) -> dict:
    calls: dict[str, Counter] = defaultdict(Counter)
    for call in history.calls:
        calls[call.service]["calls"] += 1
        calls[call.service]["applied"] += call.applied
        calls[call.service]["faulted"] += call.fault is not None
    answered = [r for r in history.requests if r.get("status") == 202]
    return {
        "run": {key: history.run.get(key) for key in
                ("seed", "engine", "replicas", "duration_s", "started_at", "ended_at")},
        "bounds": {"ack_bound_s": history.ack_bound_s, "log_grace_s": history.log_grace_s,
                   "log_lead_s": LOG_LEAD_S, "attribution_slack_s": ATTRIBUTION_SLACK_S,
                   "retry_budget_s": history.retry_budget_s},
        "requests": {"total": len(history.requests), "by_status": dict(Counter(
            "no answer" if r.get("status") is None else str(r["status"])
            for r in history.requests))},
        "triggers": {
            "answered_202": len({r["trigger_id"] for r in answered
                                 if r.get("trigger_id") is not None}),
            "answered_202_without_id": sum(1 for r in answered if r.get("trigger_id") is None),
            "in_database": len(history.triggers),
            "by_status": dict(Counter(t.get("status") for t in history.triggers.values()))},
        "executions": {
            "total": len(history.executions),
            "by_status": dict(Counter(e.get("status") for e in history.executions.values())),
            "dry_runs": sum(1 for e in history.executions.values() if e.get("mode") != "live")},
        "calls": {service: dict(counts) for service, counts in sorted(calls.items())},
        "jira_per_issue": jira_costs(history.calls, history.requests),
        "acks": dict(Counter(str(a.get("how")) for a in history.acks)),
        "faults": dict(Counter(f.kind for f in history.faults)),
        "logs": {"files": history.log_files, "lines": len(history.logs),
                 "problem_lines": sum(1 for ln in history.logs if ln.level in _PROBLEM_LEVELS)},
    }


def _clock_of(history: History, t: float) -> str:
    return _clock(t, history.started_at)


def _clock(t: float, started_at: float) -> str:
    """``12:00:01.234 (+61.2 s)``: UTC, and the time since the run started."""
    if t == NO_END:
        return "open"
    at = datetime.fromtimestamp(t, UTC)
    return f"{at:%H:%M:%S}.{at.microsecond // 1000:03d} (+{t - started_at:.1f} s)"


def _describe_execution(history: History, execution: dict) -> str:
    start, end = history.span(execution)
    parked = f", wake_at {execution['wake_at']}" if execution.get("wake_at") else ""
    return (f"execution {execution['id']} ({execution.get('mode')} {execution.get('status')}, "
            f"{execution.get('issue_key')}, trigger {execution.get('trigger_id')}, policy "
            f"{execution.get('policy_id')} v{execution.get('policy_version')}, "
            f"{_clock_of(history, start)} – {_clock_of(history, end)}{parked}, lease "
            f"{execution.get('lease_owner') or 'none'})")


class _Printer:
    """The report as a person reads it: the summary, each violation, the count."""

    MAX_CALLS = 20

    def __init__(self, report: Report):
        self.report = report
        self.started_at = float(report.summary["run"].get("started_at") or 0)

    def text(self) -> str:
        lines = self._summary()
        total = len(self.report.violations)
        for number, violation in enumerate(self.report.violations, start=1):
            lines += ["", *self._violation(number, total, violation)]
        lines += ["", f"{total} violation{'' if total == 1 else 's'}"]
        return "\n".join(lines)

    def _summary(self) -> list[str]:
        s = self.report.summary
        run, triggers, executions = s["run"], s["triggers"], s["executions"]

        def counts(values: dict) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(values.items(), key=str)) or "none"

        lines = [
            f"chaos run {self.report.run_dir}: seed {run.get('seed')}, {run.get('engine')}, "
            f"{run.get('replicas')} replicas, {run.get('duration_s')} s",
            f"requests    {s['requests']['total']}: {counts(s['requests']['by_status'])}",
            f"triggers    {triggers['answered_202']} answered 202 "
            f"({triggers['answered_202_without_id']} more without an id); "
            f"{triggers['in_database']} in the database: {counts(triggers['by_status'])}",
            f"executions  {executions['total']} ({executions['dry_runs']} dry runs): "
            f"{counts(executions['by_status'])}",
            "calls       " + ("; ".join(
                f"{service} {c.get('calls', 0)} (applied {c.get('applied', 0)}, faulted "
                f"{c.get('faulted', 0)})" for service, c in s["calls"].items()) or "none"),
            *cost_lines(s["jira_per_issue"]),
            f"acks        {counts(s['acks'])}",
            f"faults      {counts(s['faults'])}",
            f"logs        {s['logs']['files']} files, {s['logs']['lines']} lines, "
            f"{s['logs']['problem_lines']} ERROR/CRITICAL or not JSON",
            "bounds      " + ", ".join(f"{k} {v:g}" for k, v in s["bounds"].items()),
        ]
        transient = s.get("transient_failures")
        if transient:
            lines.append(f"transient   failed for a transient cause: {transient['triggers']} "
                         f"triggers, {transient['executions']} executions; "
                         f"{transient['past_the_budget']} of them past the retry budget")
        for group in s.get("round_robin", []):
            judged = f"not judged: {group['not_judged']}" if "not_judged" in group else "judged"
            lines.append(f"round robin policy {group['policy_id']} rule {group['rule']}: "
                         f"{group['turns']} turns, {counts(group['counts'])} ({judged})")
        return lines

    def _violation(self, number: int, total: int, v: Violation) -> list[str]:
        lines = [f"violation {number} of {total}, promise {v.promise} "
                 f"({PROMISES[v.promise]}): {v.title}",
                 f"  trigger {'-' if v.trigger_id is None else v.trigger_id} "
                 f"(issue {v.issue_key or '-'}), execution "
                 f"{', '.join(map(str, v.execution_ids)) or '-'}"]
        lines += [f"  {text}" for text in v.detail]
        if v.calls:
            lines.append("  calls:")
            lines += [f"    {self._call(call)}" for call in v.calls[:self.MAX_CALLS]]
            if len(v.calls) > self.MAX_CALLS:
                lines.append(f"    ... and {len(v.calls) - self.MAX_CALLS} more")
        lines.append(f"  faults within {FAULT_CONTEXT_S:g} s:" + ("" if v.faults else " none"))
        lines += [f"    {self._fault(fault)}" for fault in v.faults]
        return lines

    def _call(self, call: Call) -> str:
        body = "" if call.body is None else json.dumps(call.body, ensure_ascii=False)[:200]
        outcome = f"{call.status} {'applied' if call.applied else 'not applied'}" + (
            "" if call.fault is None else f", fault {call.fault}")
        return (f"{_clock(call.t, self.started_at)} {call.service} {call.method} {call.path} "
                f"{body} → {outcome} (calls.jsonl:{call.line})")

    def _fault(self, fault: Fault) -> str:
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in fault.detail.items()}
        detail = json.dumps(shown, ensure_ascii=False)[:160] if shown else ""
        return (f"{_clock(fault.t_start, self.started_at)} – "
                f"{_clock(fault.t_end, self.started_at)} {fault.kind} {fault.target} {detail}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tests.chaos.checker RUN_DIR", file=sys.stderr)
        return 2
    try:
        report = check(args[0])
    except HistoryUnreadable as exc:
        print(f"the history cannot be read: {exc}", file=sys.stderr)
        return 2
    print(report.text())
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
