"""The floors that bench/intake.py and bench/e2e_dispatch.py set beside the service, and the
plumbing both share (ports, CPU time, processes, medians).

Run as a script, it serves one of two things in a process of its own, and prints
``serving on PORT`` on its first line of stdout once the port is bound:

``python bench/floors.py intake DATABASE_URL [--serialize]``
    The intake floor: a bare falcon app on waitress, with the waitress adjustments the service
    uses by default (``server_limits`` of the default ``[http]``, so the same thread count) and
    waitress's logging quiet. Each ``POST`` parses the JSON body and runs ONE ``INSERT`` of a
    pending trigger row into ``dispatch_triggers`` (the service's own table and indexes, made
    by the service's migrations before this starts), on a connection of the waitress thread's
    own that commits that one statement: SQLite with the service's pragmas (``busy_timeout``,
    WAL, ``synchronous=NORMAL``) in autocommit mode, or PostgreSQL through psycopg with
    ``autocommit``. It answers 202 with the new row's id, like the service. ``--serialize``
    (SQLite only) takes a process lock around each INSERT: the threads then never meet on
    SQLite's write lock, whose busy handler sleeps in steps of up to 100 ms, so the floor is
    higher and far steadier (without it, short runs vary by a factor of 2 or more).

``python bench/floors.py jira [--server waitress|wsgiref] [--threads 16]``
    tests/peer.py's fake Jira, served from this process so that none of its work costs the
    process it answers (the service, or a floor's client). ``waitress`` (the default) keeps
    connections alive over HTTP/1.1 from a fixed pool of threads, as a real Jira's front end
    would; ``wsgiref`` is tests/peer.py's own server (HTTP/1.0: a new connection and thread per
    request), kept for comparison. A middleware keeps a call log of its own (method, path,
    query, JSON body, status), because the fake's log has no query string, and adds a control
    API for the bench under ``/_bench/`` (users; issues with their labels, priority, status and
    assignee; fields left off a project's edit screen; the call log), since the fake's Python
    API is out of reach in another process.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import requests

from ticket_dispatcher import cpu

ROOT = Path(__file__).resolve().parent.parent
TRIGGERS_PATH = "/api/v1/ticketmanager/dispatch/triggers"
JIRA_EMAIL, JIRA_TOKEN = "bot@example.com", "fake-jira-token"  # tests/peer.py's defaults
_ISSUE_KEY = re.compile(r"^/rest/(?:api/2/issue|servicedeskapi/request)/([^/]+)")


# -- shared plumbing ------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def one_cpu(number: int | None) -> Iterator[None]:
    """While inside, every thread of this process (and every thread it starts) runs on CPU
    ``number``, as ``serve`` runs when it is given one (``cpu_affinity``, ``taskset -c``);
    afterwards they may use every CPU again. For a floor measured as a pinned service runs
    (``--pin-floor``, ``--split-cpus``). None: no change."""
    if number is None:
        yield
        return
    allowed = os.sched_getaffinity(0)
    cpu.pin(number)
    try:
        yield
    finally:
        place_threads(os.getpid(), allowed)


def split_cpus() -> tuple[int, int]:
    """Two CPUs this process may run on: (the measured side's, the fake peer's). The
    measured side (a service, or the floor's client in its turn) has one to itself and the
    peer it calls the other, so the service and its floor run under the same placement."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        raise SystemExit(f"--split-cpus needs two CPUs; this process may use {allowed}")
    return allowed[0], allowed[1]


def pin_process(pid: int, number: int) -> None:
    """Every thread of process ``pid`` (and so every thread it starts after) on CPU
    ``number``."""
    place_threads(pid, {number})


def place_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` may run on ``cpus`` only (the threads it starts later
    inherit it)."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(thread), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def start_script(*arguments: str, env: dict[str, str] | None = None, stderr: Any = None,
                 script: Path = Path(__file__)) -> tuple[subprocess.Popen, int]:
    """``python bench/floors.py ARGUMENTS`` (or another ``script`` that prints ``serving on
    PORT``); its port, once it says it serves."""
    process = subprocess.Popen([sys.executable, str(script.resolve()), *arguments],
                               stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT,
                               env=env)
    line = process.stdout.readline()
    if not line.startswith("serving on "):
        stop(process)
        raise SystemExit(f"{script.name} {arguments[0]} did not start (said {line!r})")
    return process, int(line.split()[-1])


def stop(process: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL after ``timeout``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_http(url: str, process: subprocess.Popen, timeout: float = 60) -> None:
    """Until ``url`` answers anything below 500; gives up when ``process`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the process behind {url} exited with {process.returncode}")
        try:
            if requests.get(url, timeout=2).status_code < 500:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up within {timeout:g} s")


# -- the intake floor -----------------------------------------------------------------------------


class _TriggerInsert:
    """One INSERT of a pending trigger row per call, on this thread's own connection."""

    def __init__(self, database_url: str, serialize: bool = False):
        self._url = database_url
        self._local = threading.local()
        self._postgres = not database_url.startswith("sqlite:")
        # SQLite only: one INSERT at a time under a process lock, so no connection ever waits
        # in sqlite3's busy handler (which sleeps 1, 2, 5 ... 100 ms between tries, long after
        # the write lock is free).
        self._turn = threading.Lock() if serialize and not self._postgres else nullcontext()

    def __call__(self, source: str, issue_key: str, input_json: str) -> int:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
        now = datetime.now(UTC).replace(tzinfo=None)  # stored as naive UTC, as the service does
        if self._postgres:
            values = (source, issue_key, input_json, now, now, now)
            sql = _INSERT.replace("?", "%s")
        else:
            stamp = now.strftime("%Y-%m-%d %H:%M:%S.%f")  # the service's SQLite text format
            values, sql = (source, issue_key, input_json, stamp, stamp, stamp), _INSERT
        with self._turn:
            cursor = connection.cursor()
            try:
                cursor.execute(sql, values)
                return cursor.fetchone()[0]
            finally:
                cursor.close()

    def _connect(self) -> Any:
        if self._postgres:
            import psycopg

            # the INSERT commits on its own, as the service's does
            return psycopg.connect(self._url, autocommit=True)
        return _sqlite_connection(self._url.removeprefix("sqlite:///"))


_INSERT = ("INSERT INTO dispatch_triggers (source, issue_key, input_json, status, available_at,"
           " output_json, failure_reason, created_at, updated_at)"
           " VALUES (?, ?, ?, 'pending', ?, '{\"execution_ids\": []}', '', ?, ?) RETURNING id")


def _sqlite_connection(path: str) -> Any:
    """The service's SQLite settings: busy_timeout first, then its pragmas; autocommit."""
    import sqlite3

    from ticket_dispatcher.config import DatabaseConfig
    from ticket_dispatcher.store.sqlite import SQLITE_PRAGMAS

    busy = DatabaseConfig().busy_timeout.total_seconds()
    connection = sqlite3.connect(path, timeout=busy, isolation_level=None,
                                 check_same_thread=False)
    connection.execute(f"PRAGMA busy_timeout = {round(busy * 1000)}")
    for name, value in SQLITE_PRAGMAS:
        connection.execute(f"PRAGMA {name} = {value}")
    return connection


def intake_floor_app(database_url: str, serialize: bool = False) -> Callable:
    import falcon

    insert = _TriggerInsert(database_url, serialize)

    class Triggers:
        def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
            body = json.loads(req.bounded_stream.read())
            source, issue_key = body["source"], body["input"]["issue_key"]
            trigger_id = insert(source, issue_key, json.dumps(body["input"]))
            resp.status = falcon.HTTP_202
            resp.location = f"{TRIGGERS_PATH}/{trigger_id}"
            resp.media = {"id": trigger_id, "source": source, "issue_key": issue_key,
                          "status": "pending"}

    app = falcon.App()
    app.add_route(TRIGGERS_PATH, Triggers())
    return app


def serve_intake_floor(database_url: str, serialize: bool = False, pin: bool = False) -> None:
    import waitress

    from ticket_dispatcher.config import HttpConfig
    from ticket_dispatcher.service import server_limits

    logging.getLogger("waitress").setLevel(logging.ERROR)
    app = intake_floor_app(database_url, serialize)
    if pin:  # before waitress starts its threads
        cpu.pin(min(os.sched_getaffinity(0)))
    server = waitress.create_server(app, host="127.0.0.1", port=0,
                                    **server_limits(HttpConfig()))
    print(f"serving on {server.effective_port}", flush=True)
    server.run()


# -- the fake Jira in a process of its own --------------------------------------------------------


class LoggedJira:
    """tests/peer.py's fake Jira behind a call log with query strings and a control API."""

    def __init__(self) -> None:
        from tests.peer import FakeJira

        self.jira = FakeJira(email=JIRA_EMAIL, api_token=JIRA_TOKEN)
        self._lock = threading.Lock()
        self._calls: list[dict] = []

    def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith("/_bench/"):
            return self._control(environ, start_response, path)
        arrived = time.time()  # the wall clock, which the bench's own process shares
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
        environ["wsgi.input"] = io.BytesIO(raw)
        answered: list[int] = []

        def recording(status: str, headers: list, exc_info: Any = None) -> Any:
            answered.append(int(status.split()[0]))
            return start_response(status, headers, exc_info)

        result = self.jira._app(environ, recording)  # the fake's WSGI app, unchanged
        found = _ISSUE_KEY.match(path)
        call = {"method": environ["REQUEST_METHOD"], "path": path,
                "query": environ.get("QUERY_STRING", ""), "key": found and found.group(1),
                "body": json.loads(raw) if raw else None, "status": answered[0],
                "at": arrived}
        with self._lock:
            self._calls.append(call)
        return result

    def _control(self, environ: dict, start_response: Callable, path: str) -> list[bytes]:
        from tests.peer import read_body

        body = read_body(environ) or {}
        answer: Any = {}
        if path == "/_bench/users":
            for email, account_id in body["users"]:
                self.jira.add_user(email, account_id)
        elif path == "/_bench/issues":
            for key in body["keys"]:
                self.jira.add_issue(key, labels=body.get("labels", ()),
                                    assignee=body.get("assignee"),
                                    priority=body.get("priority", "P3"),
                                    status=body.get("status", "Open"))
        elif path == "/_bench/screens":
            self.jira.leave_off_edit_screen(body["project"], *body["fields"])
        elif path == "/_bench/calls":
            since = int(parse_qs(environ.get("QUERY_STRING", "")).get("since", ["0"])[0])
            with self._lock:
                answer = {"calls": self._calls[since:], "next": len(self._calls)}
        payload = json.dumps(answer).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(payload)))])
        return [payload]


def serve_jira(server_kind: str, threads: int) -> None:
    sys.path.insert(0, str(ROOT))  # run as a script, only bench/ is on the path; tests/ is here
    app = LoggedJira()
    if server_kind == "wsgiref":
        from tests.peer import serve

        server, _ = serve(app, "fake-jira")
        print(f"serving on {server.server_address[1]}", flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
        return
    import waitress

    logging.getLogger("waitress").setLevel(logging.ERROR)
    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=threads,
                                    connection_limit=1000, backlog=1024, asyncore_use_poll=True)
    print(f"serving on {server.effective_port}", flush=True)
    server.run()


class JiraProcess:
    """The fake Jira (``serve_jira``) in a child process, and the bench's side of its control
    API. It has what tests/process.py's ``Dispatcher`` reads of a fake: ``base_url``,
    ``email`` and ``api_token``."""

    email, api_token = JIRA_EMAIL, JIRA_TOKEN

    def __init__(self, server_kind: str = "waitress", threads: int = 16):
        self.process, port = start_script("jira", "--server", server_kind,
                                          "--threads", str(threads))
        self.base_url = f"http://127.0.0.1:{port}"
        self._session = requests.Session()

    def __enter__(self) -> JiraProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._session.close()
        stop(self.process)

    @property
    def pid(self) -> int:
        return self.process.pid

    def add_users(self, users: list[tuple[str, str]]) -> None:
        self._post("/_bench/users", {"users": users})

    def add_issues(self, keys: list[str], labels: list[str], priority: str = "P3",
                   status: str = "Todo", assignee: str | None = None) -> None:
        """``assignee``: the account ID of a user added before, or unassigned."""
        self._post("/_bench/issues", {"keys": keys, "labels": labels, "priority": priority,
                                      "status": status, "assignee": assignee})

    def leave_off_edit_screen(self, project: str, *fields: str) -> None:
        """The project's edit screen lacks ``fields``: an edit naming any of them is refused
        with Jira's 400 "... is not on the appropriate screen" and applies nothing."""
        self._post("/_bench/screens", {"project": project, "fields": list(fields)})

    def calls(self, since: int = 0) -> tuple[list[dict], int]:
        """The calls logged from index ``since`` on, and the index after the last."""
        answer = self._session.get(f"{self.base_url}/_bench/calls", params={"since": since},
                                   timeout=30)
        answer.raise_for_status()
        body = answer.json()
        return body["calls"], body["next"]

    def _post(self, path: str, body: dict) -> None:
        self._session.post(f"{self.base_url}{path}", json=body, timeout=30).raise_for_status()


# -- entry point ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description="serve a bench floor or the fake Jira")
    commands = parser.add_subparsers(dest="command", required=True)
    intake = commands.add_parser("intake", help="the intake floor")
    intake.add_argument("database_url")
    intake.add_argument("--serialize", action="store_true",
                        help="SQLite: one INSERT at a time under a process lock")
    intake.add_argument("--pin", action="store_true",
                        help="run on one CPU, as a service given one CPU does")
    jira = commands.add_parser("jira", help="tests/peer.py's fake Jira with a control API")
    jira.add_argument("--server", choices=("waitress", "wsgiref"), default="waitress")
    jira.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    if args.command == "intake":
        serve_intake_floor(args.database_url, args.serialize, args.pin)
    else:
        if args.server == "wsgiref":
            # before the server's threads start, so they inherit the mask and the main
            # thread's sigwait gets the signal
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        serve_jira(args.server, args.threads)


if __name__ == "__main__":
    main()
