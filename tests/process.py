"""A real ``ticket-dispatcher serve`` process for tests, its JSON log and its HTTP API.

``Dispatcher`` starts ``python -m ticket_dispatcher serve --insecure-no-auth`` on a free port
against the fake Jira of ``tests/peer.py``; further ``TICKET_DISPATCHER_*`` settings (the
notification peers of ``tests/peer_notify.py``, timeouts, slots) come as ``settings``.
``Processes`` starts them for one test and stops every one of them afterwards, whatever the
test did. Tests wait for states by polling at short intervals (``wait_until``), never for
fixed times. Used by tests/test_runtime_edges.py and tests/test_notification_process.py.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import requests

from tests.peer import FakeJira
from tests.peer_notify import FakeCore, FakeLark, FakeOncall
from ticket_dispatcher.config import load_config
from ticket_dispatcher.service import Service

BASE = "/api/v1/ticketmanager"
POLL_SECONDS = 0.05


def round_robin_policy(name: str, description: str, project: str, engineers) -> dict:
    """An ordinary policy: every issue of ``project`` assigned round robin over ``engineers``."""
    return {
        "name": name, "description": description,
        "trigger": {"enable": True, "source_in": [], "project_key_in": [project],
                    "issue_label_all": []},
        "rules": [{"name": "everything", "priority": 10, "when": {"always": True},
                   "then": [{"type": "assign", "assign": {
                       "receiver": {"type": "users", "users": list(engineers)},
                       "strategy": "round_robin"}}],
                   "transition": {"on_success": "terminate"}}],
    }


def assignee_notification_policy(name: str, project: str, *, urgent: list[str],
                                 attempts: int, ack_timeout: str, poll_interval: str,
                                 pending: str = "Todo", escalate: bool = False) -> dict:
    """An assignee family as ops/examples shapes it (card, then for an urgent priority
    App-urgent, ``attempts`` pages and optionally the leader escalation), for one project."""
    pages = [{"type": "page_assignment", "page_assignment": {
        "attempt": attempt, "ack_pending_statuses": [pending], "ack_timeout": ack_timeout,
        "poll_interval": poll_interval}} for attempt in range(1, attempts + 1)]
    escalation = [{"type": "escalate_assignment_to_leader"}] if escalate else []
    return {
        "name": name,
        "trigger": {"enable": True, "source_in": ["jira_assignment_assignee"],
                    "project_key_in": [project], "issue_label_all": ["notify-assignee"]},
        "rules": [
            {"name": "send-assignment-notification", "priority": 10, "when": {"always": True},
             "then": [{"type": "send_assignment_notification", "send_assignment_notification":
                       {"role": "assignee", "label": "notify-assignee"}}],
             "transition": {"on_success": "continue"}},
            {"name": "urgent-assignment-notification", "priority": 20,
             "when": {"field": "issue.priority", "operator": "in", "values": urgent},
             "then": [{"type": "mark_assignment_message_urgent"}, *pages, *escalation],
             "transition": {"on_success": "terminate"}},
        ],
    }


@contextmanager
def notification_peers(email: str, name: str, open_id: str
                       ) -> Iterator[tuple[FakeLark, FakeOncall, FakeCore]]:
    """Fakes of Lark, Oncall and Core that know one person: her Lark open_id, her phone and
    her Core user."""
    with FakeLark() as lark, FakeOncall() as oncall, FakeCore() as core:
        lark.add_user(email, open_id)
        oncall.add_phone(email)
        core.add_user(email, name, open_id=open_id)
        yield lark, oncall, core


def notification_settings(lark: FakeLark, oncall: FakeOncall, core: FakeCore) -> dict[str, str]:
    """The ``TICKET_DISPATCHER_*`` settings (without the prefix) that turn the notification on
    and point Lark, Oncall and Core at these fakes."""
    return {
        "NOTIFICATIONS_ENABLED": "true",
        "LARK_BASE_URL": lark.base_url, "LARK_APP_ID": lark.app_id,
        "LARK_APP_SECRET": lark.app_secret,
        "ONCALL_BASE_URL": oncall.base_url, "ONCALL_TOKEN": oncall.token,
        "CORE_BASE_URL": core.base_url, "CORE_TOKEN": core.token,
    }


@contextmanager
def sandbox_in_thread(directory) -> Iterator[Service]:
    """``serve --sandbox`` on a free port in this process (a SQLite file in ``directory``),
    served by a thread until the block ends."""
    config = load_config(None, environ={
        "TICKET_DISPATCHER_DATABASE_URL": f"sqlite:///{directory / 'td.db'}"})
    service = Service(config, port=0, sandbox=True)
    thread = threading.Thread(target=service.run, name="waitress", daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.stop_serving()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the server did not stop serving"
        service.close()


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` every ``POLL_SECONDS`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(POLL_SECONDS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_bound(port: int) -> bool:
    """Whether some socket still listens on ``port``. SO_REUSEADDR, as any server sets it, so
    only a listening socket (not a connection in TIME_WAIT) makes the bind fail."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
        return False


class Dispatcher:
    """One ``ticket-dispatcher serve`` process, its JSON log, and its HTTP API."""

    def __init__(self, database_url: str, jira: FakeJira, settings: dict[str, str]):
        self.port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKET_DISPATCHER_")}
        environ.update({
            "TICKET_DISPATCHER_DATABASE_URL": database_url,
            "TICKET_DISPATCHER_JIRA_BASE_URL": jira.base_url,
            "TICKET_DISPATCHER_JIRA_EMAIL": jira.email,
            "TICKET_DISPATCHER_JIRA_API_TOKEN": jira.api_token,
            "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "0",
            **{f"TICKET_DISPATCHER_{name}": value for name, value in settings.items()},
        })
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ticket_dispatcher", "serve", "--insecure-no-auth",
             "--port", str(self.port)],
            env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._serving = threading.Event()
        self._log_closed = threading.Event()
        threading.Thread(target=self._read_log, name="dispatcher-log", daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _read_log(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line)
            if "serving on" in line:
                self._serving.set()
        self._log_closed.set()

    # -- life cycle ---------------------------------------------------------------------------

    def started(self, timeout: float = 20) -> bool:
        """True once the server says it serves; False when it exited first (a refusal)."""
        wait_until(lambda: self._serving.is_set() or self._log_closed.is_set(), timeout,
                   "the server serves or exits")
        return self._serving.is_set()

    def wait_serving(self, timeout: float = 20) -> Dispatcher:
        assert self.started(timeout), f"the server exited before serving:\n{self.log()}"
        return self

    def wait_exit(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._log_closed.wait(timeout=5)
        return code

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Whatever happened: SIGTERM, then SIGKILL after a bound."""
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        return "".join(self.lines)

    def log_problems(self) -> list[str]:
        """Lines that are not one JSON object, or are at level ERROR/CRITICAL, or carry a
        traceback (the log is one JSON object per line; an orderly run logs no ERROR)."""
        problems = []
        for line in self.lines:
            try:
                entry = json.loads(line)
            except ValueError:
                problems.append(line)
                continue
            if not isinstance(entry, dict) or entry.get("level") in ("ERROR", "CRITICAL") \
                    or "Traceback" in line:
                problems.append(line)
        return problems

    # -- the API ------------------------------------------------------------------------------

    def call(self, method: str, path: str, expected: tuple[int, ...] = (200,),
             **kwargs: Any) -> Any:
        # No shared session: tests call from several threads at once.
        response = requests.request(method, self.url + BASE + path, timeout=15, **kwargs)
        assert response.status_code in expected, (method, path, response.status_code,
                                                   response.text)
        return response.json() if response.content else None

    def activate(self, document: dict) -> dict:
        """Create the policy ``document`` describes and activate it; the created version."""
        created = self.call("POST", "/dispatch/policies", (201,), json=document)
        self.call("POST", f"/dispatch/policies/{created['id']}/activate")
        return created

    def post_trigger(self, issue_key: str, source: str = "jira_automation") -> dict:
        return self.call("POST", "/dispatch/triggers", (202,),
                         json={"source": source, "input": {"issue_key": issue_key}})

    def executions(self, **filters: Any) -> tuple[list[dict], int]:
        page = self.call("GET", "/dispatch/executions", params={"limit": 200, **filters})
        return page["items"], page["total"]

    def execution_of(self, issue_key: str) -> dict | None:
        items, _ = self.executions(issue_key=issue_key)
        return items[0] if len(items) == 1 else None

    def wait_status(self, issue_key: str, status: str, timeout: float = 15) -> dict:
        def reached() -> dict | None:
            execution = self.execution_of(issue_key)
            return execution if execution and execution["status"] == status else None

        try:
            return wait_until(reached, timeout, f"the execution of {issue_key} is {status}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it is {json.dumps(self.execution_of(issue_key))}\n"
                                 f"server log:\n{self.log()}") from None

    def succeeded(self) -> int:
        return self.executions(status="succeeded")[1]


class Processes:
    """The processes one test started; ``stop_all`` stops each (SIGTERM, then SIGKILL after a
    bound), so none outlives its test."""

    def __init__(self, kind: type[Dispatcher] = Dispatcher):
        self._kind = kind
        self._started: list[Dispatcher] = []

    def start(self, database_url: str, jira: FakeJira, **settings: str) -> Dispatcher:
        dispatcher = self._kind(database_url, jira, settings)
        self._started.append(dispatcher)
        return dispatcher

    def stop_all(self) -> None:
        for dispatcher in self._started:
            dispatcher.kill()
