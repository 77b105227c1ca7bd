"""End-to-end dispatches per second, next to the bare I/O they cannot avoid (issue: figures).

Starts the real service in-process with ``--sandbox`` on a free port (SQLite, the sandbox Jira
served by the same waitress), posts N triggers over HTTP from 10 threads, waits until every
execution has finished, and prints dispatches/s. Then does the same number of bare issue loads
(``GET /rest/api/2/issue/KEY`` on the sandbox Jira with plain ``requests``) from 10 threads, so
the ratio of our overhead to the unavoidable I/O is visible.

    python bench/e2e_dispatch.py [--triggers 300]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.service import Service

BASE = "/api/v1/ticketmanager"
THREADS = 10


def start(tmp: str) -> tuple[Service, str, threading.Thread]:
    config = load_config(None, environ={
        "TICKET_DISPATCHER_DATABASE_URL": f"sqlite:///{Path(tmp) / 'bench.db'}",
        "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "0", "TICKET_DISPATCHER_HTTP_THREADS": "16"})
    service = Service(config, port=0, sandbox=True)
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    return service, f"http://127.0.0.1:{service.port}", thread


def make_issues(url: str, count: int) -> list[str]:
    keys = [f"TCID-{1000 + n}" for n in range(count)]
    with requests.Session() as session:
        for key in keys:
            session.post(f"{url}/sandbox/_control/issues", timeout=10, json={
                "key": key, "summary": "bench", "priority": "P3", "status": "Todo",
                "labels": ["auto-dispatch"]}).raise_for_status()
    return keys


def in_threads(work, items) -> float:
    local = threading.local()

    def session() -> requests.Session:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return local.session

    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda item: work(session(), item), items))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        service, url, thread = start(tmp)
        try:
            keys = make_issues(url, args.triggers)

            def post(session, key):
                session.post(f"{url}{BASE}/dispatch/triggers", timeout=30, json={
                    "source": "jira_automation", "input": {"issue_key": key}}
                ).raise_for_status()

            started = time.perf_counter()
            intake = in_threads(post, keys)
            assert service.runtime.wait_idle(600), "the runtime did not settle"
            total = time.perf_counter() - started
            done = service.store.executions.list(status=ExecutionStatus.SUCCEEDED, limit=1)[1]

            auth = ("sandbox@example.com", "sandbox")

            def load(session, key):
                session.get(f"{url}/sandbox/jira/rest/api/2/issue/{key}", auth=auth,
                            timeout=30).raise_for_status()

            bare = in_threads(load, keys)
        finally:
            service.stop_serving()
            thread.join(timeout=10)
            service.close()
    n = args.triggers
    print(f"{n} triggers over HTTP from {THREADS} threads, SQLite, sandbox Jira in-process")
    print(f"  intake (202 answers):        {n / intake:8.1f} triggers/s")
    print(f"  end to end (all succeeded):  {n / total:8.1f} dispatches/s  ({done} succeeded)")
    print(f"  bare issue loads (requests): {n / bare:8.1f} loads/s")
    print(f"  one dispatch costs about {(total / n) / (bare / n):.1f} bare issue loads "
          "(a dispatch does 1 load for the trigger, 1 for the execution, a user search, "
          "an assign and a label edit)")


if __name__ == "__main__":
    main()
