"""``ticket-dispatcher jira webhook register|show``: the admin webhook is created once and then
updated, filtered to the active policies' projects and signed with the first configured
secret; a refusal is one line; a secret is never printed. Jira is a fake of its admin-webhook
endpoint, served over real HTTP."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.factories import policy_body
from tests.test_cli import assert_one_line_error, clean_environment, run  # noqa: F401 - fixture
from ticket_dispatcher.domain.model import Policy, PolicySpec

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SECRET = "current-webhook-secret-never-printed"
OLD_SECRET = "previous-webhook-secret-never-printed"
TOKEN = "jira-admin-token-never-printed"
ADMIN = "admin@example.com"
URL = "https://td.example.com/api/v1/ticketmanager/jira/webhooks"
WEBHOOKS = "/rest/webhooks/1.0/webhook"
EVENTS = ["jira:issue_created", "jira:issue_updated"]


class FakeJiraWebhooks:
    """Jira's ``/rest/webhooks/1.0/webhook``: webhooks kept by id, every call logged as
    ``(method, path, body, Authorization)``; while ``refusal`` is set, every call is answered
    with that status; while ``held`` is set, a ``POST`` waits for ``release``. It answers with
    the stored secret too, so a test sees that the command never prints what Jira might give
    back."""

    def __init__(self) -> None:
        self.webhooks: dict[str, dict] = {}
        self.calls: list[tuple[str, str, Any, str]] = []
        self.refusal: int | None = None
        self.held = False
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._next_id = 10000
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, **webhook: Any) -> str:
        with self._lock:
            webhook_id = str(self._next_id)
            self._next_id += 1
            self.webhooks[webhook_id] = {"enabled": True, **webhook}
        return webhook_id

    def methods(self) -> list[str]:
        return [method for method, _, _, _ in self.calls]

    def _answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self._lock:
            if self.refusal is not None:
                return self.refusal, {"errorMessages": [f"refused, token {TOKEN}"]}
            if method == "GET" and path == WEBHOOKS:
                return 200, [self._shown(i) for i in sorted(self.webhooks)]
            if method == "POST" and path == WEBHOOKS:
                webhook_id = str(self._next_id)
                self._next_id += 1
                self.webhooks[webhook_id] = {"enabled": True, **body}
                return 201, self._shown(webhook_id)
            webhook_id = path.removeprefix(f"{WEBHOOKS}/")
            if method == "PUT" and webhook_id in self.webhooks:
                self.webhooks[webhook_id] = {"enabled": True, **body}
                return 200, self._shown(webhook_id)
            return 404, {"errorMessages": ["no such webhook"]}

    def _shown(self, webhook_id: str) -> dict:
        return {"self": f"{self.base_url}{WEBHOOKS}/{webhook_id}", **self.webhooks[webhook_id]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.calls.append((self.command, self.path, body,
                                   self.headers.get("Authorization", "")))
                if fake.held and self.command == "POST":
                    fake.release.wait(timeout=5)
                status, answer = fake._answer(self.command, self.path, body)
                data = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # a held answer the client stopped waiting for: no one reads it
                    self.close_connection = True

            do_GET = do_POST = do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def jira() -> Iterator[FakeJiraWebhooks]:
    fake = FakeJiraWebhooks()
    thread = threading.Thread(target=fake.server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    fake.server.shutdown()
    fake.server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def configured(store, db_url, jira, monkeypatch):
    """The CLI's database is ``store``'s; Jira is the fake, with an administrator's
    credentials and two webhook secrets, the current one first."""
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", db_url)
    monkeypatch.setenv("TICKET_DISPATCHER_JIRA_BASE_URL", jira.base_url)
    monkeypatch.setenv("TICKET_DISPATCHER_JIRA_EMAIL", ADMIN)
    monkeypatch.setenv("TICKET_DISPATCHER_JIRA_API_TOKEN", TOKEN)
    monkeypatch.setenv("TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS", f"{SECRET},{OLD_SECRET}")
    return store


def active_policy(store, *projects: str, name: str = "Assign tickets",
                  enable: bool = True) -> Policy:
    trigger = {"enable": enable, "source_in": [], "project_key_in": list(projects),
               "issue_label_all": []}
    draft = store.policies.create(PolicySpec.from_json(policy_body(name=name, trigger=trigger)),
                                  now=NOW)
    return store.policies.activate(draft.id, now=NOW)


def draft_policy(store, *projects: str) -> Policy:
    trigger = {"enable": True, "source_in": [], "project_key_in": list(projects),
               "issue_label_all": []}
    return store.policies.create(PolicySpec.from_json(policy_body(trigger=trigger)), now=NOW)


def register(capsys, *extra: str) -> tuple[int, str, str]:
    return run(capsys, "jira", "webhook", "register", "--url", URL, *extra)


# --- register ----------------------------------------------------------------------------------


def test_register_creates_the_webhook_for_the_active_policies_projects(capsys, configured,
                                                                       jira):
    active_policy(configured, "TCID", "OPS", name="ops and tcid")
    active_policy(configured, "TCID", name="tcid")
    active_policy(configured, "OFF", name="switched off", enable=False)
    draft_policy(configured, "DRAFT")

    code, out, err = register(capsys)

    assert (code, err) == (0, "")
    assert jira.methods() == ["GET", "POST"]
    _, path, body, authorization = jira.calls[1]
    assert path == WEBHOOKS
    assert body == {"name": "ticket-dispatcher", "url": URL, "events": EVENTS,
                    "filters": {"issue-related-events-section": 'project in ("OPS", "TCID")'},
                    "excludeBody": False, "secret": SECRET}
    assert authorization == "Basic " + base64.b64encode(f"{ADMIN}:{TOKEN}".encode()).decode()
    assert out.startswith("created Jira webhook 'ticket-dispatcher' (id 10000): ")
    assert 'filter  project in ("OPS", "TCID")' in out
    assert SECRET not in out


def test_a_second_register_updates_the_webhook_instead_of_adding_another(
        capsys, configured, jira, monkeypatch):
    """As after a rotation: the new secret first, the old one still accepted."""
    active_policy(configured, "TCID")
    first = register(capsys)
    monkeypatch.setenv("TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS", f"rotated-{SECRET},{SECRET}")

    code, out, _ = register(capsys)

    assert first[0] == code == 0
    assert jira.methods() == ["GET", "POST", "GET", "PUT"]
    assert jira.calls[3][1] == f"{WEBHOOKS}/10000"
    [stored] = jira.webhooks.values()
    assert stored["secret"] == f"rotated-{SECRET}"
    assert stored["filters"] == {"issue-related-events-section": 'project in ("TCID")'}
    assert out.startswith("updated Jira webhook 'ticket-dispatcher' (id 10000)")


def test_register_updates_the_webhook_posting_to_the_same_url_under_another_name(
        capsys, configured, jira):
    active_policy(configured, "TCID")
    webhook_id = jira.add(name="set up by hand", url=URL, events=["jira:issue_deleted"],
                          filters={"issue-related-events-section": ""}, excludeBody=True)

    code, _, _ = register(capsys)

    assert code == 0
    assert jira.methods() == ["GET", "PUT"]
    assert jira.webhooks[webhook_id]["name"] == "ticket-dispatcher"
    assert jira.webhooks[webhook_id]["events"] == EVENTS
    assert jira.webhooks[webhook_id]["excludeBody"] is False


def test_register_under_another_name(capsys, configured, jira):
    active_policy(configured, "TCID")

    code, out, _ = register(capsys, "--name", "dispatcher (staging)")

    assert code == 0
    assert jira.calls[1][2]["name"] == "dispatcher (staging)"
    assert out.startswith("created Jira webhook 'dispatcher (staging)'")


def test_a_policy_of_every_project_registers_the_webhook_without_a_filter(capsys, configured,
                                                                          jira):
    active_policy(configured, "TCID")
    everything = active_policy(configured, name="every project")

    code, out, _ = register(capsys)

    assert code == 0
    assert jira.calls[1][2]["filters"] == {"issue-related-events-section": ""}
    assert (f"filter  none: every project's issues, since an active policy takes issues of any "
            f"project (policy {everything.id} 'every project')") in out


def test_several_webhooks_of_the_name_or_url_are_refused_untouched(capsys, configured, jira):
    active_policy(configured, "TCID")
    jira.add(name="ticket-dispatcher", url="https://old.example.com/hook", events=EVENTS)
    jira.add(name="by hand", url=URL, events=EVENTS)

    code, out, err = register(capsys)

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "several Jira webhooks" in err and "delete all but one" in err
    assert jira.methods() == ["GET"]


def test_register_without_a_webhook_secret_is_refused(capsys, configured, jira, monkeypatch):
    active_policy(configured, "TCID")
    monkeypatch.delenv("TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS")

    code, out, err = register(capsys)

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "jira.webhook_secrets" in err and "TICKET_DISPATCHER_JIRA_WEBHOOK_SECRETS" in err
    assert jira.calls == []


def test_register_without_an_active_policy_is_refused(capsys, configured, jira):
    draft_policy(configured, "TCID")
    active_policy(configured, "OFF", enable=False)

    code, out, err = register(capsys)

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "no active policy" in err
    assert jira.calls == []


@pytest.mark.parametrize("url", [
    "td.example.com/api/v1/ticketmanager/jira/webhooks",
    "/api/v1/ticketmanager/jira/webhooks",
    "ftp://td.example.com/hook",
    "https://",
    "https://td.example.com:99999/hook",
    "https://td.example.com/a hook",
    "https://user:password@td.example.com/hook",
    "",
])
def test_register_refuses_a_url_that_is_not_an_absolute_http_url(capsys, configured, jira,
                                                                  url):
    active_policy(configured, "TCID")

    code, out, err = run(capsys, "jira", "webhook", "register", "--url", url)

    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "--url" in err and "password" not in err
    assert jira.calls == []


def test_a_url_outside_the_webhook_route_is_registered_with_a_note(capsys, configured, jira):
    active_policy(configured, "TCID")

    code, _, err = run(capsys, "jira", "webhook", "register", "--url",
                       "https://proxy.example.com/jira-hook")

    assert code == 0
    assert err.strip() == ("ticket-dispatcher: note: --url does not end in "
                           "/api/v1/ticketmanager/jira/webhooks, the service's webhook route")


@pytest.mark.parametrize("status", [401, 403])
def test_jira_refusing_the_credentials_says_they_need_admin_rights(capsys, configured, jira,
                                                                   status):
    active_policy(configured, "TCID")
    jira.refusal = status

    code, out, err = register(capsys)

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert f"HTTP {status}" in err and "Jira administrator rights" in err
    assert TOKEN not in err and SECRET not in err


def test_no_answer_to_the_creation_says_to_run_the_command_again(capsys, configured, jira,
                                                                  monkeypatch):
    """The webhook may exist or not: a second register finds it rather than adding one."""
    active_policy(configured, "TCID")
    monkeypatch.setenv("TICKET_DISPATCHER_INTEGRATIONS_READ_TIMEOUT", "200ms")
    jira.held = True

    code, out, err = register(capsys)

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "the outcome is unknown" in err and "run the command again" in err


def test_unreachable_jira_is_one_line(capsys, configured, monkeypatch):
    active_policy(configured, "TCID")
    with socket.socket() as closed:  # a port nothing listens on once it is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("TICKET_DISPATCHER_JIRA_BASE_URL", f"http://127.0.0.1:{port}")

    code, out, err = register(capsys)

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "connection failed" in err and f"127.0.0.1:{port}" in err


def test_register_without_a_database_is_one_line(capsys, configured, jira, monkeypatch,
                                                 tmp_path):
    monkeypatch.setenv("TICKET_DISPATCHER_DATABASE_URL", f"sqlite:///{tmp_path}/absent.db")

    code, out, err = register(capsys)

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "no such file" in err
    assert jira.calls == []


def test_register_without_jira_credentials_is_refused(capsys, configured, jira, monkeypatch):
    active_policy(configured, "TCID")
    monkeypatch.delenv("TICKET_DISPATCHER_JIRA_API_TOKEN")

    code, _, err = register(capsys)

    assert code == 2
    assert_one_line_error(err)
    assert "jira.api_token" in err
    assert jira.calls == []


# --- show --------------------------------------------------------------------------------------


def test_show_prints_the_registered_webhook_and_never_its_secret(capsys, configured, jira):
    active_policy(configured, "TCID")
    register(capsys)
    jira.add(name="someone else's", url="https://elsewhere.example.com/hook", events=EVENTS,
             secret=OLD_SECRET)

    code, out, err = run(capsys, "jira", "webhook", "show")
    json_code, document, _ = run(capsys, "jira", "webhook", "show", "--json")

    assert code == json_code == 0 and err == ""
    assert out.splitlines() == [
        "'ticket-dispatcher' (id 10000): enabled",
        f"  url     {URL}",
        "  events  jira:issue_created, jira:issue_updated",
        '  filter  project in ("TCID")',
        "  secret  set",
    ]
    assert json.loads(document) == [{
        "id": "10000", "name": "ticket-dispatcher", "url": URL, "events": EVENTS,
        "jql_filter": 'project in ("TCID")', "enabled": True, "secret_set": True}]
    for printed in (out, document):
        assert SECRET not in printed and OLD_SECRET not in printed and TOKEN not in printed


def test_show_finds_a_webhook_of_the_route_under_another_name(capsys, configured, jira):
    jira.add(name="by hand", url=URL + "/", events=["jira:issue_created"], enabled=False)

    code, out, _ = run(capsys, "jira", "webhook", "show")

    assert code == 0
    assert out.splitlines() == [
        "'by hand' (id 10000): disabled",
        f"  url     {URL}/",
        "  events  jira:issue_created",
        "  filter  none: every project",
        "  secret  not reported by Jira",
    ]


def test_show_with_nothing_registered(capsys, configured, jira):
    code, out, _ = run(capsys, "jira", "webhook", "show")
    json_code, document, _ = run(capsys, "jira", "webhook", "show", "--json")

    assert (code, json_code, json.loads(document)) == (0, 0, [])
    assert out == ("no Jira webhook named 'ticket-dispatcher' or posting to "
                   "/api/v1/ticketmanager/jira/webhooks\n")


def test_show_when_jira_refuses_is_one_line(capsys, configured, jira):
    jira.refusal = 401

    code, out, err = run(capsys, "jira", "webhook", "show")

    assert (code, out) == (1, "")
    assert_one_line_error(err)
    assert "Jira administrator rights" in err and TOKEN not in err
