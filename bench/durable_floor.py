"""The durable floor that bench/e2e_dispatch.py sets beside the service: the least work a
durable dispatcher does, as a bare falcon app on waitress in a process of its own.

``python bench/durable_floor.py DATABASE_URL JIRA_URL [--users 10] [--workers 10] [--pin]``

- ``POST /triggers`` with the service's trigger body (``{"source", "input": {"issue_key"}}``)
  inserts one row (the key, ``pending``) into a table of its own, ``durable_floor``, in the
  same database the service runs on (a SQLite file or a PostgreSQL schema), answers 202 with
  the row's id, and hands the row to the workers. The insert commits on its own.
- ``--workers`` threads (10) each take the next row and make the least calls of a dispatch with
  ``requests`` (one keep-alive session each): GET the issue, then PUT the issue with the
  assignee (round robin over ``acc-0000`` ... by row id, as the bench's engineers are) and the
  auto-assign label's removal in one edit; then record the result: one UPDATE of the row
  (``done`` or ``failed`` with the Jira status, and the time).
- ``GET /results`` answers ``{"done", "failed", "last"}``: the rows ended and the latest end,
  epoch seconds, so the bench times it as it times the service (first POST to the last
  recorded result).

SQLite: the service's pragmas, one connection per thread, and the writes one at a time under a
process lock, as the service's writers take their turn. PostgreSQL: psycopg, autocommit, a
connection per thread. Waitress gets the service's default ``[http]`` limits (so the same
thread count) and is quiet. ``--pin`` runs the process on the lowest CPU it may use (for
``--split-cpus``, the service's CPU). Prints ``serving on PORT`` once the port is bound.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from floors import JIRA_EMAIL, JIRA_TOKEN, _sqlite_connection  # noqa: E402

from ticket_dispatcher import cpu  # noqa: E402
from ticket_dispatcher.domain.issues import DEFAULT_AUTO_ASSIGN_LABEL  # noqa: E402

TABLE = "durable_floor"


class Rows:
    """The floor's table: one row per trigger, inserted at intake, updated with the result."""

    def __init__(self, database_url: str):
        self._url = database_url
        self._postgres = not database_url.startswith("sqlite:")
        self._local = threading.local()
        self._turn: Any = nullcontext() if self._postgres else threading.Lock()
        identity = ("BIGSERIAL PRIMARY KEY" if self._postgres
                    else "INTEGER PRIMARY KEY AUTOINCREMENT")
        self._run(f"CREATE TABLE IF NOT EXISTS {TABLE} (id {identity}, issue_key TEXT NOT NULL,"
                  " status TEXT NOT NULL, jira_status INTEGER, created_at DOUBLE PRECISION"
                  " NOT NULL, completed_at DOUBLE PRECISION)")

    def insert(self, issue_key: str) -> int:
        return self._run(f"INSERT INTO {TABLE} (issue_key, status, created_at) VALUES (?, "
                         "'pending', ?) RETURNING id", (issue_key, time.time()))[0]

    def record(self, row_id: int, ok: bool, jira_status: int) -> None:
        self._run(f"UPDATE {TABLE} SET status = ?, jira_status = ?, completed_at = ? "
                  "WHERE id = ?", ("done" if ok else "failed", jira_status, time.time(), row_id))

    def results(self) -> dict:
        done, failed, last = self._run(
            f"SELECT SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), SUM(CASE WHEN status ="
            f" 'failed' THEN 1 ELSE 0 END), MAX(completed_at) FROM {TABLE}", write=False)
        return {"done": int(done or 0), "failed": int(failed or 0), "last": last}

    def _run(self, sql: str, values: tuple = (), write: bool = True) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
        if self._postgres:
            sql = sql.replace("?", "%s")
        with self._turn if write else nullcontext():
            cursor = connection.cursor()
            try:
                cursor.execute(sql, values)
                return cursor.fetchone() if cursor.description else None
            finally:
                cursor.close()

    def _connect(self) -> Any:
        if self._postgres:
            import psycopg

            return psycopg.connect(self._url, autocommit=True)
        return _sqlite_connection(self._url.removeprefix("sqlite:///"))


def worker(work: queue.Queue, rows: Rows, jira_url: str, users: int) -> None:
    """GET the issue, PUT the assignee and the label's removal in one edit, record it."""
    session = requests.Session()
    session.auth = (JIRA_EMAIL, JIRA_TOKEN)
    while True:
        row_id, key = work.get()
        url = f"{jira_url}/rest/api/2/issue/{key}"
        read = session.get(url, timeout=30)
        status = read.status_code
        if status == 200:
            edit = {"fields": {"assignee": {"accountId": f"acc-{row_id % users:04d}"}},
                    "update": {"labels": [{"remove": DEFAULT_AUTO_ASSIGN_LABEL}]}}
            status = session.put(url, json=edit, timeout=30).status_code
        rows.record(row_id, status == 204, status)


def floor_app(rows: Rows, work: queue.Queue) -> Callable:
    import falcon

    class Triggers:
        def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
            body = req.get_media()
            issue_key = body["input"]["issue_key"]
            row_id = rows.insert(issue_key)
            work.put((row_id, issue_key))
            resp.status = falcon.HTTP_202
            resp.media = {"id": row_id, "issue_key": issue_key, "status": "pending"}

    class Results:
        def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
            resp.media = rows.results()

    app = falcon.App()
    app.add_route("/triggers", Triggers())
    app.add_route("/results", Results())
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database_url")
    parser.add_argument("jira_url")
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--pin", action="store_true", help="run on the lowest CPU allowed")
    args = parser.parse_args()
    import waitress

    from ticket_dispatcher.config import HttpConfig
    from ticket_dispatcher.service import server_limits

    logging.getLogger("waitress").setLevel(logging.ERROR)
    if args.pin:  # before any thread starts, so each inherits it
        cpu.pin(min(os.sched_getaffinity(0)))
    rows, work = Rows(args.database_url), queue.Queue()
    for number in range(args.workers):
        threading.Thread(target=worker, args=(work, rows, args.jira_url, args.users),
                         name=f"floor-worker-{number}", daemon=True).start()
    server = waitress.create_server(floor_app(rows, work), host="127.0.0.1", port=0,
                                    **server_limits(HttpConfig()))
    print(f"serving on {server.effective_port}", flush=True)
    server.run()


if __name__ == "__main__":
    main()
