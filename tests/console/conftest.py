"""The console app in-process: the real falcon app with the console mounted, over a migrated
store and (for the pages that read it) the real actor runtime of tests/harness.py.

``Console.get``/``post`` speak HTML forms the way a browser does: ``post`` takes the CSRF
token from the page it came from (``form_token``), as the page's own form would send it.
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import urlencode

import pytest
from falcon import testing

from tests.http.conftest import API_KEYS, KEYS
from ticket_dispatcher.config import load_config
from ticket_dispatcher.console import Console as ConsoleSite
from ticket_dispatcher.console import ConsoleGate, mount
from ticket_dispatcher.http.app import create_app
from ticket_dispatcher.http.services import Services

_TOKEN = re.compile(r'name="csrf-token" content="([^"]*)"')  # every page's <meta>


def build_app(services: Services, *, auth_enabled: bool = True):
    site = ConsoleSite(services, auth_enabled=auth_enabled)
    app = create_app(services, auth_enabled=auth_enabled, gates=[ConsoleGate(site)])
    mount(app, site)
    return app


class Console:
    """A browser-like client of the console: a cookie jar, form posts with the page's token."""

    def __init__(self, client: testing.TestClient, services: Services):
        self.client = client
        self.services = services
        self.cookies: dict[str, str] = {}
        self.headers: dict[str, str] = {}

    def _send(self, method: str, path: str, **kw) -> testing.Result:
        headers = {**self.headers, **kw.pop("headers", {})}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        result = self.client.simulate_request(method, path, headers=headers, **kw)
        for cookie in result.cookies.values():
            if cookie.max_age == 0 or not cookie.value:
                self.cookies.pop(cookie.name, None)
            else:
                self.cookies[cookie.name] = cookie.value
        return result

    def get(self, path: str, **kw) -> testing.Result:
        return self._send("GET", path, **kw)

    def post(self, path: str, form: dict | None = None, *, token: str | None = None,
             **kw) -> testing.Result:
        """POST ``form`` urlencoded; ``token`` defaults to the one the console gives this
        viewer (read from the overview page)."""
        fields = dict(form or {})
        if "csrf_token" not in fields:
            fields["csrf_token"] = token if token is not None else self.token()
        return self._send("POST", path, params=None, body=urlencode(fields),
                          headers={"Content-Type": "application/x-www-form-urlencoded",
                                   **kw.pop("headers", {})}, **kw)

    def token(self, page: str = "/console/sign-in") -> str:
        """The CSRF token of this viewer, as every page carries it."""
        return form_token(self.get(page).text)

    def sign_in(self, role: str) -> testing.Result:
        return self.post("/console/sign-in", {"api_key": KEYS[role], "next": "/console/"})


def failed_trigger(store, clock, issue_key: str = "NOPE-1", source: str = "jira_automation",
                   reason: str = "issue load failed: jira answered 404"):
    """A trigger that failed, written straight to the store (no actor takes it)."""
    trigger = store.triggers.create(source, issue_key, policy_id=None, dryrun=None,
                                    now=clock.now())
    store.triggers.fail(trigger.id, reason, clock.now())
    return store.triggers.get(trigger.id)


def form_token(html: str) -> str:
    found = _TOKEN.search(html)
    assert found, "the page carries no CSRF token"
    return unescape(found[1])


def main_text(html: str) -> str:
    """The text inside <main>, tags stripped and whitespace collapsed, as a reader sees it."""
    body = html.split('<main id="main"', 1)[-1].split("</main>", 1)[0]
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", body.split(">", 1)[-1])).split())


@pytest.fixture
def console_config():
    return load_config(None, environ={"TICKET_DISPATCHER_AUTH_API_KEYS": API_KEYS,
                                      "TICKET_DISPATCHER_CONSOLE_SECURE_COOKIE": "false"})


@pytest.fixture
def console(harness, console_config) -> Console:
    """Authentication on; the real runtime (tests/harness.py) behind it. Sign in first."""
    services = Services(store=harness.store, config=console_config, clock=harness.clock,
                        runtime=harness.runtime)
    return Console(testing.TestClient(build_app(services)), services)


@pytest.fixture
def open_console(harness, console_config) -> Console:
    """Authentication off, as in the sandbox: everyone is an operator."""
    services = Services(store=harness.store, config=console_config, clock=harness.clock,
                        runtime=harness.runtime)
    return Console(testing.TestClient(build_app(services, auth_enabled=False)), services)
