"""A real ``ticket-dispatcher serve --sandbox`` process, the demo world the console is looked at
in, and the list of console pages: shared by the browser tests and ``docs/screenshots.py``.

``SandboxServer`` is tests/process.py's ``Dispatcher`` started with ``--sandbox`` instead of a
fake Jira of its own, on a SQLite file in a directory of its own, optionally with API keys
(authentication stays on whenever keys are configured, sandbox or not). ``build_world`` runs
the README's demos through the API and the sandbox control API, as Jira Automation and a person
in Lark would: an assigned ticket, a trigger that failed, a balanced draft in shadow beside the
live policy, and an assignment notification parked in its ACK wait. ``PAGES`` names every
console page; ``World.path`` gives each its URL in that world.

The waits poll the API with bounds (``wait_until``), never sleep for a fixed time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from playwright.sync_api import expect

from tests.process import Dispatcher, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "ops" / "examples"
CHROMIUM = "/usr/bin/chromium"  # Debian's package; .ci/run installs it
# No sandbox (CI runs as root in a container), no GPU, and nothing the browser would fetch
# from the internet by itself.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
VIEWPORTS = {"phone": {"width": 390, "height": 844}, "wide": {"width": 1440, "height": 900}}
WAIT_SECONDS = 20  # for the service to reach a state; the sandbox polls every 5 s
EXPECT_MS = 5_000  # for a page to show what it already has
ACTION_MS = 10_000  # for a navigation or a click
TERMINAL = ("succeeded", "failed", "cancelled")


def launch(playwright):
    """Debian's chromium, headless, driven by Playwright."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def sign_in(page, server: SandboxServer, role: str) -> None:
    """Through the form, as a person does: the console sends a stranger there first."""
    page.goto(server.url + "/console/")
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next="), timeout=EXPECT_MS)
    page.get_by_label("API key").fill(server.keys[role])
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(re.escape(server.url) + r"/console/?$"), timeout=ACTION_MS)
    expect(page.locator("header .who")).to_contain_text(f"{role}-key · {role}",
                                                         timeout=EXPECT_MS)


class SandboxServer(Dispatcher):
    """``serve --sandbox`` on a free port, its log read as ``Dispatcher`` reads it.

    ``api_keys`` (role → key) turns authentication on: API calls then carry the operator's
    key, and the console's cookie is sent over plain HTTP (``secure_cookie = false``)."""

    def __init__(self, directory: Path, api_keys: dict[str, str] | None = None):
        self.port = free_port()
        self.keys = dict(api_keys or {})
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKET_DISPATCHER_")}
        environ.update({
            "TICKET_DISPATCHER_DATABASE_URL": f"sqlite:///{directory / 'td.db'}",
            "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "0",
        })
        if self.keys:
            environ["TICKET_DISPATCHER_AUTH_API_KEYS"] = ",".join(
                f"{role}-key:{role}:{key}" for role, key in self.keys.items())
            environ["TICKET_DISPATCHER_CONSOLE_SECURE_COOKIE"] = "false"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ticket_dispatcher", "serve", "--sandbox",
             "--port", str(self.port)],
            cwd=directory, env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._serving = threading.Event()
        self._log_closed = threading.Event()
        threading.Thread(target=self._read_log, name="sandbox-log", daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def auth_enabled(self) -> bool:
        return bool(self.keys)

    def call(self, method: str, path: str, expected: tuple[int, ...] = (200,),
             **kwargs: Any) -> Any:
        if "operator" in self.keys:
            kwargs["headers"] = {"X-API-KEY": self.keys["operator"], **kwargs.get("headers", {})}
        return super().call(method, path, expected, **kwargs)

    def control(self, method: str, path: str, expected: tuple[int, ...] = (200,),
                **kwargs: Any) -> Any:
        """The sandbox's control API (``/sandbox/_control``; it needs no key)."""
        response = requests.request(method, f"{self.url}/sandbox/_control{path}", timeout=15,
                                    **kwargs)
        assert response.status_code in expected, (method, path, response.status_code,
                                                   response.text)
        return response.json() if response.content else None

    def has_issue(self, key: str) -> bool:
        response = requests.get(f"{self.url}/sandbox/_control/issues/{key}", timeout=15)
        return response.status_code == 200

    # -- reading states, bounded --------------------------------------------------------------

    def trigger(self, trigger_id: int) -> dict:
        return self.call("GET", f"/dispatch/triggers/{trigger_id}")

    def execution(self, execution_id: int) -> dict:
        return self.call("GET", f"/dispatch/executions/{execution_id}")

    def settled_trigger(self, trigger_id: int) -> dict:
        """The trigger once it has completed or failed."""
        return wait_until(lambda: (t := self.trigger(trigger_id))["status"] in
                          ("completed", "failed") and t, WAIT_SECONDS,
                          f"trigger {trigger_id} completes or fails")

    def finished(self, execution_id: int) -> dict:
        return wait_until(lambda: (e := self.execution(execution_id))["status"] in TERMINAL
                          and e, WAIT_SECONDS, f"execution {execution_id} ends")

    def parked(self, execution_id: int) -> dict:
        """The execution once it waits in the pool for its next poll."""
        def waiting() -> dict | None:
            status = self.call("GET", "/admin/actors")
            return next((p for p in status["parked_executions"]
                         if p["execution_id"] == execution_id), None)

        return wait_until(waiting, WAIT_SECONDS, f"execution {execution_id} is parked")

    def dispatch(self, issue_key: str, source: str = "jira_automation") -> dict:
        """Post a trigger as Jira Automation does and wait for it to settle."""
        return self.settled_trigger(self.post_trigger(issue_key, source)["id"])

    def card_of(self, issue_key: str) -> dict:
        """The newest Lark card sent about ``issue_key``."""
        cards = [m for m in self.control("GET", "/messages")["items"]
                 if f"**{issue_key}**" in m["content"]]
        assert cards, f"no Lark card about {issue_key}"
        return cards[-1]

    def ack(self, issue_key: str) -> None:
        """The card's receiver presses Acknowledge on the card about ``issue_key`` (the
        sandbox's cards carry buttons; reading one is no ACK)."""
        card = self.card_of(issue_key)
        self.control("POST", f"/lark/messages/{card['message_id']}/press",
                     json={"action": "ack"})


# -- the demo world -----------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """What ``build_world`` made, by id: enough to name every page of the console."""

    assigned_issue: str
    trigger_id: int
    execution_id: int
    failed_trigger_id: int
    assign_policy_id: int
    balanced_policy_id: int
    parked_issue: str
    parked_execution_id: int

    def path(self, page: str) -> str:
        """The console URL of one of ``PAGES``."""
        return {
            "overview": "/console/",
            "triggers": "/console/triggers",
            "executions": "/console/executions",
            "execution": f"/console/executions/{self.execution_id}",
            "execution-notification": f"/console/executions/{self.parked_execution_id}",
            "parked": "/console/parked",
            "engineers": "/console/engineers",
            "engineer": "/console/engineers/carol@example.com",  # on leave in the sandbox
            "policies": "/console/policies",
            "policy": f"/console/policies/{self.assign_policy_id}",
            "policy-diff": (f"/console/policies/diff?a={self.assign_policy_id}"
                            f"&b={self.balanced_policy_id}"),
            "policy-validate": "/console/policies/validate",
            "shadows": "/console/shadows",
            "shadow": f"/console/policies/{self.balanced_policy_id}/shadow",
            "maintenance": "/console/maintenance",
            "burden": "/console/reports/burden",
            "audit": "/console/audit",
            "sign-in": "/console/sign-in",
            "error": "/console/triggers?since=yesterday",  # 400: a bad filter
            "not-found": "/console/executions/999999",
        }[page]


# Every page of the console, in the order of its navigation bar; the error pages last.
PAGES = ("overview", "triggers", "executions", "execution", "execution-notification", "parked",
         "engineers", "engineer", "policies", "policy", "policy-diff", "policy-validate",
         "shadows", "shadow", "maintenance", "burden", "audit", "sign-in", "error",
         "not-found")
STATUS = {"error": 400, "not-found": 404}  # the rest answer 200


def notifiable_copy(server: SandboxServer, key: str, of: str = "GTOC-1") -> None:
    """A new sandbox issue exactly like ``of`` (as ``sandbox.json`` defines GTOC-1: P1, Todo,
    alice, ``notify-assignee``), so a second notification can run beside the README's."""
    issue = server.control("GET", f"/issues/{of}")
    server.control("POST", "/issues", (200, 201), json={
        "key": key, "labels": ["notify-assignee"],
        **{name: issue[name] for name in ("summary", "priority", "status", "components",
                                          "assignee_email", "l2_assignee_email",
                                          "reporter_email")}})


def build_world(server: SandboxServer, *, assigned_issue: str = "TCID-2",
                parked_issue: str = "GTOC-1") -> World:
    """The README's demos, in an order that leaves something on every page:

    - the balanced TCID policy as a draft of the assign family, in shadow (README, "Try
      balanced assignment in shadow"), then TCID-3 posted so the shadow has a difference;
    - ``assigned_issue`` posted as Jira Automation would and assigned round-robin;
    - NOPE-1, an issue the sandbox Jira does not have: the trigger fails (replayable);
    - the assignee notification of ``parked_issue`` (created like GTOC-1 when the sandbox has
      no such issue), parked in the wait after its first page: nobody has read the card.
    """
    active = server.call("GET", "/dispatch/policies", params={"status": "active"})["items"]
    assign = next(p for p in active if p["name"] == "Assign TCID tickets")
    balanced = server.call("POST", f"/dispatch/policies/{assign['id']}/replacements", (201,),
                           json=json.loads((EXAMPLES / "policies" / "balanced-tcid.json")
                                           .read_text()))
    server.call("POST", f"/dispatch/policies/{balanced['id']}/shadow", (200, 201))
    server.dispatch("TCID-3")
    wait_until(lambda: server.call("GET", f"/dispatch/policies/{balanced['id']}/shadow")
               ["pending"] == 0, WAIT_SECONDS, "the shadow has decided beside the live version")

    trigger = server.dispatch(assigned_issue)
    assert trigger["status"] == "completed", trigger
    [execution_id] = trigger["output"]["execution_ids"]
    assert server.finished(execution_id)["status"] == "succeeded"

    failed = server.dispatch("NOPE-1")
    assert failed["status"] == "failed", failed

    if not server.has_issue(parked_issue):
        notifiable_copy(server, parked_issue)
    notification = server.dispatch(parked_issue, "jira_assignment_assignee")
    [parked_id] = notification["output"]["execution_ids"]
    server.parked(parked_id)
    return World(assigned_issue, trigger["id"], execution_id, failed["id"], assign["id"],
                 balanced["id"], parked_issue, parked_id)
