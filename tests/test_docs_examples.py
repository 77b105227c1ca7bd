"""The sandbox examples of README.md and docs/policies.md, run as written against a real
``serve --sandbox``, in order, with their answers and the output the docs show checked.

Which blocks run is marked in the Markdown: ``<!-- sandbox-example -->`` before a fenced ``sh``
or ``console`` block runs it, ``<!-- not-a-sandbox-example: why -->`` leaves it out (it needs
a real Jira, say), and ``<!-- example-file: PATH -->`` before a ``json`` block says the block is
that file of the repository. Every ``sh``/``console`` block of the example sections carries one
of the first two, so a new example is either run or deliberately left out.

Each command runs with ``bash`` from the root of the repository, exactly as the doc has it:
variables a command sets (``ID=$(curl … | jq -r .id)``) carry to the next ones, and the
``curl`` on the PATH is a wrapper around the real one that sends ``localhost:8080`` to the test
server (``--connect-to``) and reports each answer's HTTP status on stderr, so the doc's text is
never rewritten. Likewise the ``ticket-dispatcher`` on the PATH runs this checkout's CLI with a
Jira base URL at ``localhost:8080`` sent to the test server, and, unless the doc names one, the
test server's database (what a reader's CLI finds beside ``serve --sandbox``). A variable a
command exports (``export A=1 B=2``) stays exported for the next ones, as in the reader's shell.
``console`` blocks compare the command's output with the lines the doc shows.
Asynchronous effects (a trigger processed, a parked wait that sees its ACK at its next 5 s poll)
are awaited by re-running a read until its check holds, within a bound.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.process import sandbox_in_thread
from ticket_dispatcher.metrics import Metrics
from ticket_dispatcher.sandbox import WEBHOOK_SECRET, service_urls
from ticket_dispatcher.service import Service

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
POLICIES = ROOT / "docs" / "policies.md"
RUNBOOK = ROOT / "docs" / "runbook.md"
# The sections whose shell examples must all be marked, run or left out.
EXAMPLE_SECTIONS = {
    README: ("Try it", "Try the notification workflow",
             "Try balanced assignment in shadow, then live"),
    POLICIES: ("From file to live: validate, test, dry run, activate",
               "Shadow: try a change on live traffic"),
}
RUN = "<!-- sandbox-example -->"
_LEAVE_OUT = re.compile(r"^<!-- not-a-sandbox-example: \S.* -->$")
_FILE = re.compile(r"^<!-- example-file: (\S+) -->$")
_FENCE = re.compile(r"^```(\w*)\s*$")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")
_EXPORT = re.compile(r"^export\s(.*)", re.S)
_EXPORTED_NAME = re.compile(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=")
STATUS_LINE = "doc-example-http-status "
POLL_SECONDS = 20  # above the sandbox's 5 s page poll, with room for a slow machine
COMMAND_SECONDS = 30


# --- reading the Markdown -------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    marker: str  # the HTML comment right above the fence, or ""


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str
    shown: tuple[str, ...] | None = None  # a console block's output lines


def section(text: str, heading: str) -> tuple[int, str]:
    """The lines of the ``## heading`` section (to the next heading of level 1 or 2) and the
    line number it starts on."""
    lines = text.splitlines()
    start = lines.index(f"## {heading}")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"#{1,2} ", lines[i])),
               len(lines))
    return start, "\n".join(lines[start:end])


def blocks(path: Path, heading: str) -> list[Block]:
    offset, text = section(path.read_text(encoding="utf-8"), heading)
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if m := _FENCE.match(lines[i]):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            marker = lines[i - 1].strip() if i and lines[i - 1].startswith("<!--") else ""
            found.append(Block(path.name, offset + i + 1, m[1], "\n".join(lines[i + 1:end]),
                               marker))
            i = end
        i += 1
    return found


def is_complete(text: str) -> bool:
    """Whether ``text`` is whole shell commands (no open quote, no trailing backslash)."""
    if text.rstrip().endswith("\\"):
        return False
    return subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0


def shell_commands(block: Block) -> list[Command]:
    commands, pending, first = [], [], 0
    for number, line in enumerate(block.body.splitlines(), start=block.line + 1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue  # a blank line, or a comment continuing the one above
        if not pending:
            first = number
        pending.append(line)
        if is_complete("\n".join(pending)):
            commands.append(Command(block.doc, first, "\n".join(pending)))
            pending = []
    assert not pending, f"{block.doc}:{first}: an unfinished command"
    return commands


def console_commands(block: Block) -> list[Command]:
    commands: list[Command] = []
    for number, line in enumerate(block.body.splitlines(), start=block.line + 1):
        if line.startswith("$ "):
            commands.append(Command(block.doc, number, line[2:], ()))
        else:
            assert commands, f"{block.doc}:{number}: output before the first $ command"
            last = commands[-1]
            commands[-1] = Command(last.doc, last.line, last.text, (*last.shown, line))
    return commands


def example_commands(path: Path, heading: str) -> list[Command]:
    commands = []
    for block in blocks(path, heading):
        if block.marker != RUN:
            continue
        assert block.lang in ("sh", "console"), f"{block.doc}:{block.line}: {block.lang}"
        reader = shell_commands if block.lang == "sh" else console_commands
        commands += reader(block)
    return commands


# --- running them -----------------------------------------------------------------------------


@dataclass(repr=False)
class Result:
    command: Command
    returncode: int
    stdout: str
    stderr: str
    statuses: list[int]

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __repr__(self) -> str:  # what an assertion names: the doc's command and its answer
        return (f"{self.command.doc}:{self.command.line}: {self.command.text}\n"
                f"exit {self.returncode}, HTTP {self.statuses}\nstdout: {self.stdout[:2000]}\n"
                f"stderr: {self.stderr[:2000]}")


class Shell:
    """Runs one doc command at a time in ``bash`` from the repository root, carrying the
    variables the doc's commands set, with the ``curl`` and ``ticket-dispatcher`` wrappers
    first on the PATH."""

    def __init__(self, tmp: Path, port: int, database_url: str = ""):
        self.tmp = tmp
        self.variables: dict[str, str] = {}
        self.exported: set[str] = set()
        wrapper_dir = tmp / "bin"
        wrapper_dir.mkdir()
        cli = Path(sys.executable).parent / "ticket-dispatcher"  # this checkout's (the venv's)
        _script(wrapper_dir / "curl",
                f"exec {shutil.which('curl')} --connect-to localhost:8080:127.0.0.1:{port} "
                f"--write-out '%{{stderr}}{STATUS_LINE}%{{http_code}}\\n' \"$@\"")
        _script(wrapper_dir / "ticket-dispatcher", "\n".join([
            'case "$TICKET_DISPATCHER_JIRA_BASE_URL" in http://localhost:8080/*)',
            f'  TICKET_DISPATCHER_JIRA_BASE_URL="http://127.0.0.1:{port}/'
            '${TICKET_DISPATCHER_JIRA_BASE_URL#http://localhost:8080/}";;',
            "esac",
            *([f'export TICKET_DISPATCHER_DATABASE_URL='
               f'"${{TICKET_DISPATCHER_DATABASE_URL:-{database_url}}}"'] if database_url else []),
            f'exec {cli} "$@"',
        ]))
        # The wrappers, this checkout's venv, and no setting of the test run leaks in.
        path = os.pathsep.join([str(wrapper_dir), str(cli.parent), os.environ.get("PATH", "")])
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("TICKET_DISPATCHER_", "TD_"))}
        self.env["PATH"] = path

    def run(self, command: Command) -> Result:
        names = _ASSIGNMENT.findall(command.text)
        if exports := _EXPORT.match(command.text):
            exported = _EXPORTED_NAME.findall(exports[1])
            names += exported
            self.exported.update(exported)
        saved = self.tmp / "variables"
        script = "\n".join([
            *(f"{'export ' if name in self.exported else ''}{name}={_quote(value)}"
              for name, value in self.variables.items()),
            command.text,
            "status=$?",
            *(f"printf '%s\\0%s\\0' {name} \"${name}\" >> {saved}" for name in names),
            "exit $status",
        ])
        saved.write_text("")
        done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=self.env, text=True,
                              capture_output=True, timeout=COMMAND_SECONDS)
        parts = saved.read_text().split("\0")
        self.variables.update(zip(parts[0:-1:2], parts[1::2], strict=True))
        statuses = [int(line.removeprefix(STATUS_LINE)) for line in done.stderr.splitlines()
                    if line.startswith(STATUS_LINE)]
        stderr = "".join(line for line in done.stderr.splitlines(keepends=True)
                         if not line.startswith(STATUS_LINE))
        return Result(command, done.returncode, done.stdout, stderr, statuses)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


# --- what each command must answer ------------------------------------------------------------

Check = Callable[[Result, dict], None]


@dataclass(frozen=True)
class Expect:
    """The check of one doc command, in the doc's order. ``needle`` must be in the command (so
    a changed doc fails with both texts named); ``poll`` re-runs a read until ``check`` holds."""

    needle: str
    check: Check
    poll: bool = False
    statuses: tuple[int, ...] = (200,)  # of each curl it runs, in order


def body_is(expected: dict) -> Check:
    def check(result: Result, ctx: dict) -> None:
        body = result.json()
        assert {key: body.get(key) for key in expected} == expected, result
    return check


def no_check(result: Result, ctx: dict) -> None:
    pass


def shows_the_doc_output(result: Result, ctx: dict) -> None:
    """A console block: stdout, then stderr, line for line as the doc shows them."""
    printed = result.stdout.splitlines() + result.stderr.splitlines()
    assert printed == list(result.command.shown), result


def newest(items: list[dict]) -> dict:
    assert items, "nothing yet"
    return items[-1]


def actions(execution: dict) -> list[dict]:
    return [a for rule in execution["rule_executions"] for a in rule["action_executions"]]


def pages_of(execution: dict) -> list[dict]:
    return [a for a in actions(execution) if a["type"] == "page_assignment"]


# README, "Try it"


def tcid2_trigger_accepted(result: Result, ctx: dict) -> None:
    body = result.json()
    assert (body["source"], body["input"], body["status"]) == \
        ("jira_automation", {"issue_key": "TCID-2"}, "pending"), result
    ctx["tcid2_trigger"] = body["id"]


def tcid2_assigned(result: Result, ctx: dict) -> None:
    [execution, *older] = [e for e in result.json()["items"]
                           if e["trigger_id"] == ctx["tcid2_trigger"]] or [None]
    assert execution is not None and not older, result
    assert execution["status"] == "succeeded", result
    assigned = [a for a in actions(execution) if a["status"] == "succeeded"]
    assert [a["type"] for a in assigned] == ["assign"], result
    assert all(r["evaluation"]["reason"] for r in execution["rule_executions"]
               if r["outcome"] != "not_evaluated"), result
    ctx["tcid2_assignee"] = assigned[0]["context"]["assign"]["assignee"]


def carol_away(result: Result, ctx: dict) -> None:
    availability = result.json()
    assert availability["available"] is False and availability["until"], result
    assert availability["reasons"][0].startswith("on time off until "), result
    assert ctx["tcid2_assignee"] != "carol@example.com", result


def tcid2_in_jira(result: Result, ctx: dict) -> None:
    issue = result.json()
    assert issue["assignee_email"] == ctx["tcid2_assignee"], result
    assert "auto-dispatch" not in issue["labels"], result


def actor_system(result: Result, ctx: dict) -> None:
    body = result.json()
    assert {"pool", "parked_executions", "clients"} <= set(body), result


def validate_answer_as_commented(result: Result, ctx: dict) -> None:
    shown = result.command.text.split("#", 1)[1].strip()
    assert result.json() == json.loads(shown), result


def openapi(result: Result, ctx: dict) -> None:
    body = result.json()
    assert body["openapi"].startswith("3.") and \
        "/api/v1/ticketmanager/dispatch/triggers" in body["paths"], result


def tcid2_rearmed(result: Result, ctx: dict) -> None:
    issue = result.json()
    assert (issue["assignee_email"], issue["labels"]) == (None, ["auto-dispatch"]), result


def webhook_body_kept(result: Result, ctx: dict) -> None:
    body = json.loads(ctx["vars"]["BODY"])
    assert (body["webhookEvent"], body["issue"]["key"]) == ("jira:issue_created", "TCID-2")


def webhook_body_signed(result: Result, ctx: dict) -> None:
    """The README's ``openssl`` line signs as Jira does: the hex HMAC-SHA256 of the body."""
    expected = hmac.new(WEBHOOK_SECRET.encode(), ctx["vars"]["BODY"].encode(),
                        hashlib.sha256).hexdigest()
    assert ctx["vars"]["SIGNATURE"] == expected, result


def webhook_taken(result: Result, ctx: dict) -> None:
    body = result.json()
    assert body["status"] == "accepted" and len(body["trigger_ids"]) == 1, result


def webhook_taken_before(result: Result, ctx: dict) -> None:
    assert result.json()["status"] == "duplicate", result


WEBHOOK_ROUTE_URL = "http://localhost:8080/api/v1/ticketmanager/jira/webhooks"


def sandbox_jira_settings(result: Result, ctx: dict) -> None:
    """The README gives the CLI the sandbox's Jira and the secret ``serve --sandbox`` checks
    deliveries against."""
    settings = ctx["vars"]
    assert settings["TICKET_DISPATCHER_JIRA_BASE_URL"] == \
        service_urls("http://localhost:8080")["jira"], result
    assert settings["TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS"] == WEBHOOK_SECRET, result


def webhook_registered(verb: str) -> Check:
    def check(result: Result, ctx: dict) -> None:
        lines = result.stdout.splitlines()
        assert lines[:2] == [
            f"{verb} Jira webhook 'ticket-dispatcher' (id 1): {WEBHOOK_ROUTE_URL}",
            "  events  jira:issue_created, jira:issue_updated"], result
        # the projects of the active policies, the assign policy's among them
        assert re.fullmatch(r'  filter  project in \(.*"TCID".*\)', lines[2]), result
        assert result.stderr == "" and WEBHOOK_SECRET not in result.stdout, result
        ctx["webhook_filter"] = lines[2]
    return check


def webhook_shown(result: Result, ctx: dict) -> None:
    assert result.stdout.splitlines() == [
        "'ticket-dispatcher' (id 1): enabled",
        f"  url     {WEBHOOK_ROUTE_URL}",
        "  events  jira:issue_created, jira:issue_updated",
        ctx["webhook_filter"],
        "  secret  not reported by Jira",
    ], result


# README, "Try the notification workflow"


def gtoc1_trigger_accepted(result: Result, ctx: dict) -> None:
    body = result.json()
    assert (body["source"], body["input"]) == \
        ("jira_assignment_assignee", {"issue_key": "GTOC-1"}), result
    ctx["gtoc1_trigger"] = body["id"]
    ctx["pages_before"] = ctx.get("pages_seen", 0)


def card_to_alice(result: Result, ctx: dict) -> None:
    card = newest(result.json()["items"])
    assert (card["receive_id"], card["read_by"]) == ("ou_sbx_alice", []), result
    ctx["card"] = card["message_id"]


def urgent_on_the_card(result: Result, ctx: dict) -> None:
    urgent = newest(result.json()["items"])
    assert (urgent["message_id"], urgent["user_ids"]) == (ctx["card"], ["ou_sbx_alice"]), result


def page_to_alice(accepted: bool) -> Check:
    def check(result: Result, ctx: dict) -> None:
        items = result.json()["items"]
        assert len(items) > ctx["pages_before"], "no new page yet"
        page = items[-1]
        assert (page["email"], page["issue_key"]) == ("alice@example.com", "GTOC-1"), result
        assert page["message"].endswith("(attempt 1)"), result
        assert page["accepted"] is accepted, result
        if not accepted:
            assert (page["call_error"], page["forced"]) == ("no_phone_number", True), result
        ctx["pages_seen"] = len(items)
    return check


def parked_on_its_first_page(result: Result, ctx: dict) -> None:
    body = result.json()
    assert (body["pool"]["busy"], body["pool"]["parked"]) == (0, 1), result
    [parked] = body["parked_executions"]
    assert (parked["issue_key"], parked["attempt"]) == ("GTOC-1", 1), result
    assert parked["wake_at"] and parked["deadline"], result


def message_id_taken(result: Result, ctx: dict) -> None:
    assert ctx["vars"]["MESSAGE_ID"] == ctx["card"], result


def card_pressed(result: Result, ctx: dict) -> None:
    body = result.json()
    assert (body["message_id"], body["status"]) == (ctx["card"], 200), result
    assert body["answer"]["toast"]["type"] == "success", result
    note = body["answer"]["card"]["data"]["elements"][-1]["text"]["content"]
    assert note.startswith("Acknowledged by Alice Wang at "), result


def acknowledged(result: Result, ctx: dict) -> None:
    [execution] = [e for e in result.json()["items"] if e["trigger_id"] == ctx["gtoc1_trigger"]]
    assert execution["status"] == "succeeded", result
    first, *others = pages_of(execution)
    assert first["context"]["page"]["outcome"] == "ack", result
    assert first["context"]["page"]["ack_source"] == "button", result
    assert [a["status"] for a in others] == ["skipped", "skipped"], result
    [escalation] = [a for a in actions(execution) if a["type"] == "escalate_assignment_to_leader"]
    assert escalation["status"] == "skipped", result
    ctx["acknowledged"] = ctx.get("acknowledged", 0) + 1


def comments_of_each_run(result: Result, ctx: dict) -> None:
    bodies = [c["body"] for c in result.json()["comments"]]
    runs = ctx["acknowledged"]
    assert sum("Urgent: no" in b for b in bodies) == runs, result
    assert sum("Urgent: yes\nAttempt: 1" in b for b in bodies) == runs, result
    assert sum("acknowledged" in b for b in bodies) == runs, result


def gtoc1_rearmed(result: Result, ctx: dict) -> None:
    issue = result.json()
    assert {k: issue[k] for k in ("status", "assignee_email", "priority", "labels")} == {
        "status": "Todo", "assignee_email": "alice@example.com", "priority": "P1",
        "labels": ["notify-assignee"]}, result


def moved_on(result: Result, ctx: dict) -> None:
    assert result.json()["status"] == "In Progress", result


def metrics_count_the_workflows(result: Result, ctx: dict) -> None:
    series = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    cards = [float(value) for name, value in series.items() if name.startswith(
        'ticket_manager_dispatch_assignment_action_total{action="send_assignment_notification"')
        and 'result="succeeded"' in name]
    assert sum(cards) == 3, result  # the two ACK runs and the shaped one


def shaped_workflow_ended_as_the_readme_says(port: int, trigger_id: int) -> None:
    """"page 1 was not accepted (no_phone_number), and its wait ended with outcome: ack"; the
    metrics step before waited for it to finish."""
    answer = requests.get(f"http://127.0.0.1:{port}/api/v1/ticketmanager/dispatch/executions",
                          params={"trigger_id": trigger_id}, timeout=10)
    [execution] = answer.json()["items"]
    page = pages_of(execution)[0]["context"]["page"]
    assert execution["status"] == "succeeded", execution
    assert (page["call_error"], page["outcome"]) == ("no_phone_number", "ack"), page


def policy_is(**expected: Any) -> Check:
    def check(result: Result, ctx: dict) -> None:
        body = result.json()
        assert {key: body[key] for key in expected} == expected, result
    return check


def kept_id(name: str) -> Check:
    """``NAME=$(curl … | jq -r .id)``: nothing printed, and an id to take on."""
    def check(result: Result, ctx: dict) -> None:
        assert result.stdout == "" and ctx["vars"][name].isdigit(), result
    return check


# README, "Try balanced assignment in shadow, then live"

BALANCED_RULE = "fewest open issues"
BALANCED_CANDIDATES = {"alice@example.com", "bob@example.com", "carol@example.com"}
AWAY = "carol@example.com"  # on leave in the sandbox: passed over, not counted


def tcid3_trigger_accepted(result: Result, ctx: dict) -> None:
    body = result.json()
    assert (body["input"], body["status"]) == ({"issue_key": "TCID-3"}, "pending"), result
    ctx["tcid3_trigger"] = body["id"]


def shadow_just_started(result: Result, ctx: dict) -> None:
    body = result.json()
    assert (body["shadowing"], body["seen"], body["latest_differences"]) == (True, 0, []), result


def shadow_differed_on(issue_key: str, trigger: str, live_rules: tuple[str, ...]) -> Check:
    """The report of a shadow that saw one live trigger and matched its own rule."""
    def check(result: Result, ctx: dict) -> None:
        body = result.json()
        assert (body["shadowing"], body["seen"], body["differed"], body["pending"]) == \
            (True, 1, 1, 0), result
        assert body["differences"]["other_rule"] == 1, result
        [case] = body["latest_differences"]
        assert (case["issue_key"], case["trigger_id"], case["kind"]) == \
            (issue_key, ctx[trigger], "other_rule"), result
        assert case["live"]["matched_rules"][0] in live_rules and case["live"]["assignee"], result
        assert case["shadow"]["matched_rules"] == [BALANCED_RULE], result
        assert case["shadow"]["assignee"] in BALANCED_CANDIDATES, result
    return check


def tcid3_rearmed(result: Result, ctx: dict) -> None:
    issue = result.json()
    assert issue["assignee_email"] is None and "auto-dispatch" in issue["labels"], result


def assigned_by_balance(result: Result, ctx: dict) -> None:
    shown = result.json()
    counts = shown["counts"]
    assert set(counts) == BALANCED_CANDIDATES - {AWAY} and counts["alice@example.com"] >= 1, \
        result
    assert counts[shown["assignee"]] == min(counts.values()), result
    assert shown["reason"].startswith("balanced: fewest open issues"), result


README_STEPS = [
    # Try it
    Expect("dispatch/triggers", tcid2_trigger_accepted, statuses=(202,)),
    Expect("executions?issue_key=TCID-2", tcid2_assigned, poll=True),
    Expect("engineers/carol@example.com", carol_away),
    Expect("_control/issues/TCID-2", tcid2_in_jira, poll=True),
    Expect("admin/actors", actor_system),
    Expect("policies/validate", validate_answer_as_commented),
    Expect("openapi.json", openapi),
    Expect("issues/TCID-2/rearm", tcid2_rearmed),
    Expect("BODY='{", webhook_body_kept, statuses=()),
    Expect("SIGNATURE=$(printf", webhook_body_signed, statuses=()),
    Expect("try-it-1", webhook_taken, statuses=(202,)),
    Expect("try-it-1", webhook_taken_before),
    Expect("export TICKET_DISPATCHER_JIRA_BASE_URL", sandbox_jira_settings, statuses=()),
    Expect("jira webhook register", webhook_registered("created"), statuses=()),
    Expect("jira webhook register", webhook_registered("updated"), statuses=()),
    Expect("jira webhook show", webhook_shown, statuses=()),
    # Try the notification workflow
    Expect("jira_assignment_assignee", gtoc1_trigger_accepted, statuses=(202,)),
    Expect("_control/messages", card_to_alice, poll=True),
    Expect("_control/urgents", urgent_on_the_card, poll=True),
    Expect("_control/pages", page_to_alice(accepted=True), poll=True),
    Expect("admin/actors", parked_on_its_first_page, poll=True),
    Expect("MESSAGE_ID=", message_id_taken),
    Expect("$MESSAGE_ID/press", card_pressed),
    Expect("executions?issue_key=GTOC-1", acknowledged, poll=True),
    Expect("_control/issues/GTOC-1", comments_of_each_run),
    Expect("issues/GTOC-1/rearm", gtoc1_rearmed),
    # shaping the rest
    Expect("issues/GTOC-1/rearm", gtoc1_rearmed),
    Expect("oncall/outcome", body_is({"outcome": "no_phone_number", "email": None,
                                      "times": 1})),
    Expect("jira_assignment_assignee", gtoc1_trigger_accepted, statuses=(202,)),
    Expect("_control/pages", page_to_alice(accepted=False), poll=True),
    Expect("-X PATCH", moved_on),
    Expect("oncall/outcome", body_is({"outcome": "call_error", "email": None, "times": None})),
    Expect("-X DELETE", body_is({"cleared": 1})),
    Expect("/metrics", metrics_count_the_workflows, poll=True),
    # Try balanced assignment in shadow, then live
    Expect("ASSIGN_ID=$(curl", kept_id("ASSIGN_ID")),
    Expect("BALANCED_ID=$(curl", kept_id("BALANCED_ID"), statuses=(201,)),
    Expect("$BALANCED_ID/shadow", shadow_just_started, statuses=(201,)),
    Expect("TCID-3", tcid3_trigger_accepted, statuses=(202,)),
    Expect("$BALANCED_ID/shadow",
           shadow_differed_on("TCID-3", "tcid3_trigger", ("everything else",)), poll=True),
    Expect("$BALANCED_ID/activate", policy_is(status="active", version=2)),
    Expect("issues/TCID-3/rearm", tcid3_rearmed),
    Expect("TCID-3", tcid3_trigger_accepted, statuses=(202,)),
    Expect("executions?issue_key=TCID-3&limit=1", assigned_by_balance, poll=True),
    Expect("$ASSIGN_ID/activate", policy_is(status="active", version=1)),
    Expect("issues/TCID-3/rearm", tcid3_rearmed),
]
# The README's steps up to its "to run these steps again" re-arm, and the notification steps
# it means: the test runs those a second time right after it.
README_FIRST = slice(0, 26)
README_AGAIN = slice(16, 25)
README_REST = slice(26, None)


def the_draft(result: Result, ctx: dict) -> None:
    policy_is(status="draft", version=1)(result, ctx)
    assert result.json()["family_id"], result


def trigger_completed(result: Result, ctx: dict) -> None:
    body = result.json()
    assert body["status"] == "completed", result
    [ctx["dry_run"]] = body["output"]["execution_ids"]


def dry_run_result(result: Result, ctx: dict) -> None:
    [execution] = result.json()["items"]
    assert (execution["id"], execution["mode"], execution["status"]) == \
        (ctx["dry_run"], "dry_run", "succeeded"), result
    [rule] = execution["rule_executions"]
    assert rule["outcome"] == "matched" and "matches" in rule["evaluation"]["reason"], result
    [triage] = rule["action_executions"]
    assert triage["context"]["triage"]["changes"] == \
        {"labels": {"add": ["performance"], "remove": []}}, result


def shadowed_trigger_accepted(result: Result, ctx: dict) -> None:
    body = result.json()
    assert body["status"] == "pending", result
    ctx["shadowed_trigger"] = body["id"]


def stopped(result: Result, ctx: dict) -> None:
    assert result.stdout == "", result


POLICIES_STEPS = [
    Expect("TD=", no_check, statuses=()),
    Expect("H=", no_check, statuses=()),
    Expect("policy validate docs/examples/latency-triage.json", shows_the_doc_output,
           statuses=()),
    Expect("policy validate docs/examples/night-shift.json", shows_the_doc_output, statuses=()),
    Expect("policy test docs/examples/latency-triage.json", shows_the_doc_output, statuses=()),
    Expect("assign-tcid.json --issue docs/examples/tcid-1.json --now 2026-12-01",
           shows_the_doc_output, statuses=()),
    Expect("assign-tcid.json --issue docs/examples/tcid-1.json --now 2026-12-05",
           shows_the_doc_output, statuses=()),
    Expect("ID=$(curl", kept_id("ID"), statuses=(201,)),
    Expect('"$TD/dispatch/policies/$ID"', the_draft),
    Expect("TRIGGER_ID=$(curl", kept_id("TRIGGER_ID"), statuses=(202,)),
    Expect("triggers/$TRIGGER_ID", trigger_completed, poll=True),
    Expect("executions?trigger_id=$TRIGGER_ID", dry_run_result, poll=True),
    Expect("$ID/activate", policy_is(status="active", version=1)),
    Expect("NEW_ID=$(curl", kept_id("NEW_ID"), statuses=(201,)),
    Expect("$NEW_ID/activate", policy_is(status="active", version=2)),
    Expect('"$TD/dispatch/policies/$ID"', policy_is(status="superseded", version=1)),
    Expect("$ID/activate", policy_is(status="active", version=1)),
    Expect("$ID/deactivate", policy_is(status="inactive", version=1)),
    # Shadow: try a change on live traffic
    Expect("ASSIGN_ID=$(curl", kept_id("ASSIGN_ID")),
    Expect("SHADOW_ID=$(curl", kept_id("SHADOW_ID"), statuses=(201,)),
    Expect("$SHADOW_ID/shadow", validate_answer_as_commented, statuses=(201,)),
    Expect("TCID-1", shadowed_trigger_accepted, statuses=(202,)),
    Expect("$SHADOW_ID/shadow", shadow_differed_on(
        "TCID-1", "shadowed_trigger", ("business hours", "everything else")), poll=True),
    Expect("-X DELETE", stopped, statuses=(204,)),
    Expect("$SHADOW_ID/shadow", validate_answer_as_commented),
]


# --- the server and the run -------------------------------------------------------------------


def require_tools() -> None:
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} missing; .ci/run installs curl and jq")
        pytest.skip(f"the doc examples need {', '.join(missing)} (apt-get install curl jq)")


@pytest.fixture
def sandbox_server(tmp_path):
    with sandbox_in_thread(tmp_path) as service:
        yield service


def run_steps(shell: Shell, service: Service, commands: list[Command],
              steps: list[Expect], ctx: dict) -> None:
    assert len(commands) == len(steps), (
        "the doc's examples and the test's checks differ in number:\n"
        + "\n".join(f"{c.doc}:{c.line}: {c.text}" for c in commands))
    for command, step in zip(commands, steps, strict=True):
        assert step.needle in command.text, (
            f"{command.doc}:{command.line}: the doc runs\n  {command.text}\n"
            f"where the test expects a command with {step.needle!r}")
        run_step(shell, service, command, step, ctx)


def run_step(shell: Shell, service: Service, command: Command, step: Expect,
             ctx: dict) -> None:
    deadline = time.monotonic() + POLL_SECONDS
    while True:
        assert service.runtime.wait_idle(POLL_SECONDS), "the actor system did not settle"
        result = shell.run(command)
        ctx["vars"] = shell.variables
        try:
            assert result.statuses == list(step.statuses), result
            if command.shown is None:
                assert result.returncode == 0, result
            step.check(result, ctx)
            return
        except (AssertionError, ValueError, KeyError):
            if not step.poll or time.monotonic() > deadline:
                raise
        # A parked wait sees its ACK at its next poll; look again shortly, within the bound.
        threading.Event().wait(0.25)


@pytest.mark.slow
@pytest.mark.timeout(120)  # about 25 s: three ACKs are seen at a 5 s poll each
def test_readme_and_policies_sandbox_examples_run_as_written(sandbox_server, tmp_path):
    require_tools()
    shell = Shell(tmp_path, sandbox_server.port, sandbox_server.config.database_url)
    readme = [c for heading in EXAMPLE_SECTIONS[README]
              for c in example_commands(README, heading)]
    ctx: dict = {}

    assert len(readme) == len(README_STEPS), "\n".join(f"{c.line}: {c.text}" for c in readme)
    for part in (README_FIRST, README_AGAIN, README_REST):
        run_steps(shell, sandbox_server, readme[part], README_STEPS[part], ctx)
    assert ctx["acknowledged"] == 2  # the notification steps ran twice
    [webhook] = sandbox_server.sandbox.jira_webhooks.webhooks()  # registered, then updated
    assert (webhook.spec.url, webhook.spec.secret) == (WEBHOOK_ROUTE_URL, WEBHOOK_SECRET)
    shaped_workflow_ended_as_the_readme_says(sandbox_server.port, ctx["gtoc1_trigger"])
    policies = [c for heading in EXAMPLE_SECTIONS[POLICIES]
                for c in example_commands(POLICIES, heading)]
    run_steps(shell, sandbox_server, policies, POLICIES_STEPS, ctx)


# --- the examples are marked, their files exist, the readers read them -----------------------


@pytest.mark.parametrize("path,heading", [(p, h) for p, hs in EXAMPLE_SECTIONS.items()
                                          for h in hs])
def test_every_shell_example_is_run_or_left_out_on_purpose(path, heading):
    unmarked = [f"{b.doc}:{b.line}" for b in blocks(path, heading)
                if b.lang in ("sh", "console") and b.marker != RUN
                and not _LEAVE_OUT.match(b.marker)]

    assert unmarked == []


@pytest.mark.parametrize("path,heading", [(p, h) for p, hs in EXAMPLE_SECTIONS.items()
                                          for h in hs])
def test_no_example_section_hides_a_command_in_its_prose(path, heading):
    # Commands in running text are not run; an example belongs in a marked block.
    _, text = section(path.read_text(encoding="utf-8"), heading)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)

    assert re.findall(r"`(?:curl|ticket-dispatcher policy) [^`]*`", prose) == []


def test_json_examples_are_the_files_of_the_repository():
    shown = [(b, _FILE.match(b.marker)) for p, hs in EXAMPLE_SECTIONS.items() for h in hs
             for b in blocks(p, h) if b.lang == "json"]

    assert shown and all(match for _, match in shown), [b.line for b, m in shown if not m]
    for block, match in shown:
        assert json.loads(block.body) == json.loads((ROOT / match[1]).read_text()), match[1]


def test_the_inline_issue_of_policies_md_is_its_file():
    text = POLICIES.read_text(encoding="utf-8")
    [inline] = re.findall(r"\[`docs/examples/tcid-1.json`\]\(examples/tcid-1.json\) \(`(.*?)`\)",
                          text.replace("\n", " "))

    assert json.loads(inline) == json.loads((ROOT / "docs/examples/tcid-1.json").read_text())


def test_every_file_an_example_uses_exists():
    commands = [c for p, hs in EXAMPLE_SECTIONS.items() for h in hs
                for c in example_commands(p, h)]
    used = {m for c in commands for m in re.findall(r"(?<![\w/])((?:docs|ops)/[\w./-]+)", c.text)}

    assert {"docs/examples/night-shift.json", "ops/examples/policies/assign-tcid.json"} <= used
    assert sorted(path for path in used if not (ROOT / path).is_file()) == []


def test_shell_reader_keeps_a_quoted_body_over_lines_together_and_drops_comments():
    block = Block("x.md", 1, "sh", "\n".join([
        "A=1   # one",
        "curl -d '{\"a\": 1,",
        "        \"b\": 2}' \\",
        "     -H 'X: y'",
        "    # a comment under the command above",
        "",
        "echo \"$A\"",
    ]), RUN)

    assert [(c.line, c.text.splitlines()[0]) for c in shell_commands(block)] == [
        (2, "A=1   # one"), (3, "curl -d '{\"a\": 1,"), (8, 'echo "$A"')]


def test_console_reader_pairs_each_command_with_its_output():
    block = Block("x.md", 10, "console", "$ a b\nout 1\nout 2\n$ c\n", RUN)

    assert console_commands(block) == [Command("x.md", 11, "a b", ("out 1", "out 2")),
                                       Command("x.md", 14, "c", ())]


def test_shell_keeps_exported_variables_exported(tmp_path):
    require_tools()
    shell = Shell(tmp_path, port=9)

    shell.run(Command("x.md", 1, "export A=1 \\\n       B='two words'"))
    shown = shell.run(Command("x.md", 3, """sh -c 'echo "$A/$B"'"""))

    assert shown.stdout == "1/two words\n"


def test_the_cli_wrapper_sends_the_sandbox_jira_to_the_test_server(tmp_path):
    shell = Shell(tmp_path, port=9, database_url="sqlite:////tmp/td.db")

    shown = shell.run(Command("x.md", 1, "TICKET_DISPATCHER_JIRA_BASE_URL="
                              "http://localhost:8080/sandbox/jira ticket-dispatcher config show"))
    named = shell.run(Command("x.md", 2, "TICKET_DISPATCHER_DATABASE_URL=sqlite:///mine.db "
                              "ticket-dispatcher config show"))

    assert (shown.json()["jira"]["base_url"], shown.json()["database_url"]) == \
        ("http://127.0.0.1:9/sandbox/jira", "sqlite:////tmp/td.db")
    assert named.json()["database_url"] == "sqlite:///mine.db"


def test_shell_carries_variables_and_reports_curl_statuses(tmp_path):
    require_tools()
    shell = Shell(tmp_path, port=9)  # nothing listens there: curl reports 000

    first = shell.run(Command("x.md", 1, "ID=$(echo 'it'\\''s 7')"))
    second = shell.run(Command("x.md", 2, 'echo "$ID"; curl -s localhost:8080/x'))

    assert (first.returncode, shell.variables) == (0, {"ID": "it's 7"})
    assert (second.stdout, second.statuses) == ("it's 7\n", [0])


# --- PromQL in the runbook groups by labels that exist ----------------------------------------

# Prometheus adds these to every scraped series; histograms have ``le`` on their buckets.
TARGET_LABELS = {"instance", "job"}
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)\s*\((.*)")
_METRIC = re.compile(r"\bticket_manager_dispatch_\w+")


def exported_labels() -> dict[str, set[str]]:
    """Every sample name the service exports → its label names."""
    registry = Metrics().registry
    labels = {}
    for name, collector in registry._names_to_collectors.items():
        names = set(getattr(collector, "_labelnames", ()))
        labels[name] = names | ({"le"} if name.endswith("_bucket") else set())
    return labels


def test_runbook_queries_group_by_labels_the_series_have():
    exported = exported_labels()
    wrong = []
    for line in RUNBOOK.read_text(encoding="utf-8").splitlines():
        for grouping, rest in _GROUPING.findall(line):
            metric = _METRIC.search(rest)
            if metric is None:
                continue
            assert metric[0] in exported, f"{metric[0]} is not exported"
            unknown = {g.strip() for g in grouping.split(",")} - exported[metric[0]] \
                - TARGET_LABELS
            if unknown:
                wrong.append((metric[0], sorted(unknown)))

    assert wrong == []
