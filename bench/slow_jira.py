"""Dispatches per second when Jira is slow: do execution slots turn into real concurrency?

Starts the service in-process with ``--sandbox`` on a free port, makes the sandbox Jira answer
every ``PUT …/assignee`` after a fixed latency (default 1.5 s), posts N triggers over HTTP and
waits until every execution has finished. Prints dispatches/s next to the ideal
``slots / latency`` (each dispatch holds its slot for one slow assignment), and the most
executions seen running at once in the admin view. Like ``serve``, the process runs where it
is started (``taskset -c N`` to give it one CPU), or on the CPU
``TICKET_DISPATCHER_CPU_AFFINITY`` names.

    python bench/slow_jira.py [--slots 10] [--dispatches 120] [--latency 1.5]
                              [--postgres-url postgresql://…]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests
from databases import fresh_database

from ticket_dispatcher import cpu
from ticket_dispatcher.config import load_config
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.service import Service

BASE = "/api/v1/ticketmanager"


def start(database_url: str, slots: int) -> tuple[Service, str, threading.Thread]:
    config = load_config(None, environ={
        "TICKET_DISPATCHER_DATABASE_URL": database_url,
        "TICKET_DISPATCHER_EXECUTION_SLOTS": str(slots),
        "TICKET_DISPATCHER_HTTP_TRIGGER_RATE": "0",
        # the sandbox Jira is served by this same server: a thread per slow assignment
        "TICKET_DISPATCHER_HTTP_THREADS": str(min(64, slots + 4)),
        "TICKET_DISPATCHER_LOG_LEVEL": "WARNING",
        "TICKET_DISPATCHER_CPU_AFFINITY": os.environ.get("TICKET_DISPATCHER_CPU_AFFINITY", "")})
    cpu.pin(config.cpu_affinity)  # as ``serve`` does: on the one CPU named, if any
    service = Service(config, port=0, sandbox=True)
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    return service, f"http://127.0.0.1:{service.port}", thread


def prepare(url: str, count: int, latency: float) -> list[str]:
    keys = [f"TCID-{1000 + n}" for n in range(count)]
    with requests.Session() as session:
        for key in keys:
            session.post(f"{url}/sandbox/_control/issues", timeout=10, json={
                "key": key, "summary": "bench", "priority": "P3", "status": "Todo",
                "labels": []}).raise_for_status()
        session.post(f"{url}/sandbox/_control/faults", timeout=10, json={
            "service": "jira", "path_contains": "/assignee", "latency_ms": int(latency * 1000),
            "times": count * 2}).raise_for_status()
    return keys


def watch_busy(service: Service, stop: threading.Event, peak: list[int]) -> None:
    while not stop.wait(0.05):
        peak[0] = max(peak[0], service.runtime.status()["pool"]["busy"])


def run(database_url: str, slots: int, dispatches: int, latency: float) -> None:
    service, url, thread = start(database_url, slots)
    try:
        keys = prepare(url, dispatches, latency)
        stop, peak = threading.Event(), [0]
        watcher = threading.Thread(target=watch_busy, args=(service, stop, peak), daemon=True)
        watcher.start()
        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool, requests.Session() as session:
            list(pool.map(lambda key: session.post(
                f"{url}{BASE}/dispatch/triggers", timeout=30,
                json={"source": "jira_automation", "input": {"issue_key": key}}
            ).raise_for_status(), keys))
        assert service.runtime.wait_idle(900), "the runtime did not settle"
        took = time.perf_counter() - started
        stop.set()
        succeeded = sum(1 for key in keys for e in service.store.executions.page(
            issue_key=key, limit=5)[0] if e.status is ExecutionStatus.SUCCEEDED)
    finally:
        service.stop_serving()
        thread.join(timeout=10)
        service.close()
    engine = database_url.split(":")[0]
    ideal = slots / latency
    print(f"{engine:10} slots {slots:3}: {dispatches / took:6.2f} dispatches/s, ideal "
          f"{ideal:6.2f} ({dispatches / took / ideal:4.0%}); {succeeded}/{dispatches} succeeded; "
          f"at most {peak[0]} running at once")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[10, 40])
    parser.add_argument("--dispatches", type=int, default=120)
    parser.add_argument("--latency", type=float, default=1.5)
    parser.add_argument("--postgres-url", help="run on PostgreSQL (a temporary schema) "
                                               "instead of a temporary SQLite file")
    args = parser.parse_args()
    for slots in args.slots:
        with fresh_database(args.postgres_url) as url:
            run(url, slots, args.dispatches, args.latency)


if __name__ == "__main__":
    main()
