"""``ticket-dispatcher jira webhook register|show`` against a real ``serve --sandbox`` process,
as README "Try it" runs them (docs/jira-webhooks.md, "Set it up with the command").

Both sides are real processes: the server on a free port with its own database (once per
engine), and the CLI run as a reader runs it, with the sandbox Jira's address, any credentials,
the secret ``serve --sandbox`` checks, and the server's database for the active policies. What
must hold is read from the CLI's output, the sandbox Jira's own answers and its request log:
the first ``register`` creates the webhook, filtered to the active policies' projects; a second
one updates it instead of adding another; ``show`` lists it; no secret is printed or logged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import requests

from tests.process import Dispatcher, free_port
from ticket_dispatcher.sandbox import WEBHOOK_SECRET

WEBHOOKS = "/rest/webhooks/1.0/webhook"
ROUTE_URL = "http://localhost:8080/api/v1/ticketmanager/jira/webhooks"
EVENTS = "  events  jira:issue_created, jira:issue_updated"
SANDBOX_AUTH = ("sandbox@example.com", "sandbox")


class SandboxProcess(Dispatcher):
    """``serve --sandbox`` on a free port and ``database_url``, its log read as ``Dispatcher``
    reads it."""

    def __init__(self, database_url: str):
        self.port = free_port()
        self.database_url = database_url
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKET_DISPATCHER_")}
        environ.update({"TICKET_DISPATCHER_DATABASE_URL": database_url,
                        "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "0"})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ticket_dispatcher", "serve", "--sandbox",
             "--port", str(self.port)],
            env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._serving = threading.Event()
        self._log_closed = threading.Event()
        threading.Thread(target=self._read_log, name="sandbox-log", daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def jira_url(self) -> str:
        return f"{self.url}/sandbox/jira"

    def cli(self, *arguments: str) -> subprocess.CompletedProcess:
        """The CLI in a process of its own, set up as README "Try it" sets it up."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKET_DISPATCHER_")}
        environ.update({
            "TICKET_DISPATCHER_DATABASE_URL": self.database_url,
            "TICKET_DISPATCHER_JIRA_BASE_URL": self.jira_url,
            "TICKET_DISPATCHER_JIRA_EMAIL": SANDBOX_AUTH[0],
            "TICKET_DISPATCHER_JIRA_API_TOKEN": SANDBOX_AUTH[1],
            "TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS": WEBHOOK_SECRET,
        })
        return subprocess.run([sys.executable, "-m", "ticket_dispatcher", *arguments],
                              env=environ, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=30)

    def webhooks(self) -> list[dict]:
        """What the sandbox Jira answers to ``GET /rest/webhooks/1.0/webhook``."""
        response = requests.get(self.jira_url + WEBHOOKS, auth=SANDBOX_AUTH, timeout=15)
        assert response.status_code == 200, response.text
        return response.json()

    def webhook_calls(self) -> list[str]:
        """``METHOD path`` of every call to the admin-webhook endpoint, oldest first."""
        log = requests.get(f"{self.url}/sandbox/_control/requests", timeout=15).json()["items"]
        return [f"{r['method']} {r['path'].split('/rest/webhooks/1.0/', 1)[1]}" for r in log
                if "/rest/webhooks/" in r["path"]]

    def projects_jql(self) -> str:
        """The filter the active policies ask for, from the server's API: the projects they
        take, sorted and quoted."""
        policies = self.call("GET", "/dispatch/policies",
                             params={"status": "active", "limit": 200})["items"]
        projects = {key for policy in policies if policy["trigger"]["enable"]
                    for key in policy["trigger"]["project_key_in"]}
        return "project in (" + ", ".join(f'"{key}"' for key in sorted(projects)) + ")"


@pytest.fixture
def sandbox(db_url) -> Iterator[SandboxProcess]:
    server = SandboxProcess(db_url)
    try:
        yield server.wait_serving()
    finally:
        server.kill()


def register(server: SandboxProcess, verb: str, jql: str) -> str:
    """``register`` as README "Try it" runs it; what it printed."""
    done = server.cli("jira", "webhook", "register", "--url", ROUTE_URL)

    assert (done.returncode, done.stderr) == (0, ""), done
    assert done.stdout.splitlines() == [
        f"{verb} Jira webhook 'ticket-dispatcher' (id 1): {ROUTE_URL}", EVENTS,
        f"  filter  {jql}", "  secret  the first of jira.webhook_secrets"], done
    return done.stdout


def test_register_creates_the_webhook_a_second_run_updates_it_and_show_lists_it(sandbox):
    jql = sandbox.projects_jql()

    printed = register(sandbox, "created", jql) + register(sandbox, "updated", jql)
    shown = sandbox.cli("jira", "webhook", "show")
    as_json = sandbox.cli("jira", "webhook", "show", "--json")
    answered = requests.get(f"{sandbox.jira_url}{WEBHOOKS}/1", auth=SANDBOX_AUTH, timeout=15)

    assert sandbox.webhook_calls() == ["GET webhook", "POST webhook", "GET webhook",
                                       "PUT webhook/1", "GET webhook", "GET webhook",
                                       "GET webhook/1"]
    [webhook] = sandbox.webhooks()
    assert webhook == answered.json()
    assert webhook["self"] == f"{sandbox.jira_url}{WEBHOOKS}/1"
    assert (webhook["name"], webhook["url"], webhook["events"], webhook["filters"]) == \
        ("ticket-dispatcher", ROUTE_URL, ["jira:issue_created", "jira:issue_updated"],
         {"issue-related-events-section": jql})
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout.splitlines() == [
        "'ticket-dispatcher' (id 1): enabled", f"  url     {ROUTE_URL}", EVENTS,
        f"  filter  {jql}", "  secret  not reported by Jira"]
    assert json.loads(as_json.stdout) == [{
        "id": "1", "name": "ticket-dispatcher", "url": ROUTE_URL,
        "events": ["jira:issue_created", "jira:issue_updated"], "jql_filter": jql,
        "enabled": True, "secret_set": None}]
    # No secret where a person reads: the output, the server's log.
    sandbox.terminate()
    sandbox.wait_exit(timeout=20)
    assert WEBHOOK_SECRET not in printed + shown.stdout + as_json.stdout + sandbox.log()
    assert sandbox.log_problems() == []
