"""Trigger intake under ``wrk``: ``POST /dispatch/triggers`` requests per second of the service
next to its floor, a bare falcon + waitress app that does one INSERT per request.

The service is a real ``ticket-dispatcher serve`` process (trigger rate limit off, log level
WARNING, its default ``[http]`` settings, no ``cpu_affinity``) on a temporary SQLite file or,
with ``--postgres-url``, a throw-away PostgreSQL schema. ``wrk -t2 -cCONNECTIONS`` posts a
trigger for an issue its Jira does not know, so the background work that follows each trigger
(a claim, one Jira 404, the trigger marked failed) stays small but is still there: it runs in
the same process while ``wrk`` loads it, as it would in production. That Jira is tests/peer.py's
fake in a process of its own (``python bench/floors.py jira``), as a real Jira is; ``--jira
sandbox`` runs ``serve --sandbox`` instead, whose in-process Jira also answers each 404 on the
service's own threads (the figures in bench/diary/ before "2026-12-02, one CPU" were taken so).

The floor (``python bench/floors.py intake``, described there) runs in a process of its own on
the same engine with a database of its own: the service's migrations make its
``dispatch_triggers`` table, and each request parses the JSON body and INSERTs one pending row
on its waitress thread's own connection (SQLite: the service's ``busy_timeout``, WAL and
``synchronous=NORMAL``, autocommit; PostgreSQL: psycopg in autocommit), committed before the
202. Both servers use the service's default waitress adjustments (the same thread count) with
waitress's logging quiet; ``--waitress-warnings`` leaves the service's as it ships (its "Task
queue depth" WARNING goes through the service's JSON log formatter).

On SQLite the floor's threads meet on the one write lock, and sqlite3's busy handler sleeps
1, 2, 5 ... 100 ms between tries, so that floor varies a lot from run to run (the service's
writers wait the same way). ``--serialize-floor`` takes a process lock around each of the
floor's INSERTs instead: a higher and far steadier floor, the insert without the convoy.

Runs alternate, service then floor, ``--repeat`` times after a 1 s warm-up of each. After every
service run the bench waits until the service has no pending or processing trigger left, so its
backlog never overlaps the floor's run; that drain time and its CPU are shown apart. Each run
prints requests/s, wrk's mean latency, non-2xx answers plus socket errors, and the server's CPU
per request during the run (``/proc/PID/stat``); the summary gives the median of each and the
ratio of the medians (runs on a loaded 2-core machine vary by about 15%). Goal: ratio >= 0.5.
Takes about 1.5 minutes at the defaults on a 2-core machine: the service accepts triggers
faster than it processes them, so each 6 s service run leaves a backlog of 10 to 15 s to drain
(``--seconds 8`` comes close to 2 minutes).

``--pin-floor`` runs the floor on one CPU, as a service given one CPU runs.

    python bench/intake.py [--seconds 6] [--repeat 3] [--connections 16] [--postgres-url URL]
                           [--serialize-floor] [--pin-floor] [--jira own|sandbox]
                           [--waitress-warnings]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import requests
from databases import fresh_database  # also puts the repository root on sys.path
from floors import (
    ROOT,
    TRIGGERS_PATH,
    JiraProcess,
    cpu_seconds,
    median,
    start_script,
    stop,
    wait_http,
)

from ticket_dispatcher.config import HttpConfig
from ticket_dispatcher.store.connect import open_database
from ticket_dispatcher.store.migrations import migrate

__all__ = ["cpu_seconds"]  # bench/replicas.py imports it from here

BODY = '{"source": "jira_automation", "input": {"issue_key": "NOPE-1"}}'
GOAL = 0.5
WARM_UP_SECONDS = 1
DRAIN_TIMEOUT = 60
# The service's command line with waitress's logger at ERROR, as the floor has it.
QUIET_SERVE = ("import logging, sys; logging.getLogger('waitress').setLevel(logging.ERROR); "
               "from ticket_dispatcher.cli import main; sys.exit(main(sys.argv[1:]))")


@dataclass(frozen=True)
class WrkRun:
    rate: float  # requests per second
    latency_ms: float  # wrk's mean
    failed: int  # non-2xx answers and socket errors
    requests: int
    cpu_ms: float  # server CPU per request during the run
    drain: str = ""  # the service's background work left after the run

    def line(self) -> str:
        return (f"{self.rate:8.0f} req/s  mean {self.latency_ms:6.1f} ms  non-2xx {self.failed}"
                f"  server CPU {self.cpu_ms:5.2f} ms/request{self.drain}")


class Server:
    """A server under test: its process and the URL ``wrk`` posts to."""

    def __init__(self, name: str, process: subprocess.Popen, url: str):
        self.name, self.process, self.url = name, process, url


@contextmanager
def service(database_url: str, tmp: Path, quiet_waitress: bool,
            jira: JiraProcess | None) -> Iterator[Server]:
    """``serve`` against ``jira`` in a process of its own, or ``--sandbox`` when None."""
    port = free_port()
    env = dict(os.environ, TICKET_DISPATCHER_DATABASE_URL=database_url,
               TICKET_DISPATCHER_HTTP_TRIGGER_RATE="0", TICKET_DISPATCHER_LOG_LEVEL="WARNING")
    if jira is not None:
        env.update(TICKET_DISPATCHER_JIRA_BASE_URL=jira.base_url,
                   TICKET_DISPATCHER_JIRA_EMAIL=jira.email,
                   TICKET_DISPATCHER_JIRA_API_TOKEN=jira.api_token)
    world = ["--insecure-no-auth"] if jira is not None else ["--sandbox"]
    command = ["-c", QUIET_SERVE] if quiet_waitress else ["-m", "ticket_dispatcher"]
    with open(tmp / "service.log", "w") as log:
        process = subprocess.Popen([sys.executable, *command, "serve", *world, "--port",
                                    str(port)], env=env, cwd=ROOT, stderr=log,
                                   stdout=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz", process)
        yield Server("service", process, f"{base}{TRIGGERS_PATH}")
    finally:
        stop(process, 30)


@contextmanager
def floor(database_url: str, serialize: bool, pin: bool) -> Iterator[Server]:
    db = open_database(database_url, max_connections=2)
    try:
        migrate(db)  # the service's own dispatch_triggers table and its indexes
    finally:
        db.close_all()
    process, port = start_script("intake", database_url, *(["--serialize"] if serialize else []),
                                 *(["--pin"] if pin else []))
    try:
        yield Server("floor", process, f"http://127.0.0.1:{port}{TRIGGERS_PATH}")
    finally:
        stop(process)


def post_script(tmp: Path) -> Path:
    """The wrk script that posts ``BODY`` as JSON, written into ``tmp``."""
    script = tmp / "post.lua"
    script.write_text(f'wrk.method = "POST"\nwrk.body = \'{BODY}\'\n'
                      'wrk.headers["Content-Type"] = "application/json"\n')
    return script


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_wrk(server: Server, seconds: int, connections: int, script: Path) -> WrkRun:
    cpu_before = cpu_seconds(server.process.pid)
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script),
                          server.url], capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(server.process.pid) - cpu_before
    done = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                       out)
    return WrkRun(rate=float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
                  latency_ms=milliseconds(re.search(r"Latency\s+(\S+)", out).group(1)),
                  failed=(int(non2xx.group(1)) if non2xx else 0)
                  + (sum(map(int, errors.groups())) if errors else 0),
                  requests=done, cpu_ms=1000 * cpu / max(1, done))


def milliseconds(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000}[unit]


def drained(server: Server, done: int) -> tuple[float, float]:
    """Wait until the service has no pending or processing trigger; the seconds that took and
    the service's CPU meanwhile, in milliseconds per request of the run (``done``)."""
    api = server.url.rsplit("/", 1)[0] + "/triggers"
    started, cpu_before = time.monotonic(), cpu_seconds(server.process.pid)
    with requests.Session() as session:
        while any(session.get(api, params={"status": status, "limit": 1}, timeout=10)
                  .json()["items"] for status in ("pending", "processing")):
            if time.monotonic() - started > DRAIN_TIMEOUT:
                raise SystemExit(f"the service still had triggers to process after "
                                 f"{DRAIN_TIMEOUT} s")
            time.sleep(0.2)
    cpu = cpu_seconds(server.process.pid) - cpu_before
    return time.monotonic() - started, 1000 * cpu / max(1, done)


def drain(server: Server, done: int) -> str:
    """Wait until the service has no pending or processing trigger; what that took."""
    seconds, cpu_ms = drained(server, done)
    return f"  (then {seconds:.1f} s to drain its backlog, +{cpu_ms:.2f} ms/request)"


def measure(server: Server, args: argparse.Namespace, script: Path, seconds: int) -> WrkRun:
    result = run_wrk(server, seconds, args.connections, script)
    if server.name == "service":
        result = WrkRun(result.rate, result.latency_ms, result.failed, result.requests,
                        result.cpu_ms, drain(server, result.requests))
    return result


def report(engine: str, runs: dict[str, list[WrkRun]]) -> None:
    service_rate = median(r.rate for r in runs["service"])
    floor_rate = median(r.rate for r in runs["floor"])
    ratio = service_rate / floor_rate
    print(f"\nmedians over {len(runs['service'])} run(s), {engine}:")
    for name in ("service", "floor"):
        print(f"  {name:8}{median(r.rate for r in runs[name]):8.0f} req/s  mean "
              f"{median(r.latency_ms for r in runs[name]):6.1f} ms  server CPU "
              f"{median(r.cpu_ms for r in runs[name]):5.2f} ms/request")
    pairs = ", ".join(f"{s.rate / f.rate:.3f}" for s, f in zip(runs["service"], runs["floor"],
                                                                strict=True))
    print(f"  ratio service/floor {ratio:.3f} (goal >= {GOAL}: "
          f"{'met' if ratio >= GOAL else 'not met'}); run by run: {pairs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=6, help="length of one wrk run")
    parser.add_argument("--repeat", type=int, default=3,
                        help="service and floor runs, alternated; the medians are compared")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--postgres-url", help="run both on PostgreSQL (a throw-away schema "
                                               "each) instead of a temporary SQLite file each")
    parser.add_argument("--serialize-floor", action="store_true",
                        help="SQLite: the floor's INSERTs one at a time under a process lock "
                             "(no busy-handler sleeps: a higher, steadier floor)")
    parser.add_argument("--pin-floor", action="store_true",
                        help="run the floor on one CPU, as a service given one CPU "
                             "(cpu_affinity) runs")
    parser.add_argument("--jira", choices=("own", "sandbox"), default="own",
                        help="the fake Jira answering the service's issue loads: in a process "
                             "of its own, or the sandbox served by the service itself")
    parser.add_argument("--waitress-warnings", action="store_true",
                        help="leave the service's waitress logging as it ships")
    args = parser.parse_args()
    engine = "PostgreSQL" if args.postgres_url else "SQLite"
    service_log = "as shipped" if args.waitress_warnings else "quiet"
    inserts = "one at a time" if args.serialize_floor and not args.postgres_url else "concurrent"
    print(f"intake, {engine}: wrk -t2 -c{args.connections} -d{args.seconds}s, {args.repeat} "
          f"run(s) each, alternated; waitress {HttpConfig().threads} threads in both; waitress "
          f"logging {service_log} in the service, quiet in the floor; floor INSERTs {inserts}"
          f"; Jira {'in a process of its own' if args.jira == 'own' else 'the sandbox'}"
          f"{'; floor on one CPU' if args.pin_floor else ''}")
    with (tempfile.TemporaryDirectory() as tmp, fresh_database(args.postgres_url) as service_db,
          fresh_database(args.postgres_url) as floor_db,
          JiraProcess() if args.jira == "own" else nullcontext() as jira):
        script = post_script(Path(tmp))
        try:
            with (service(service_db, Path(tmp), not args.waitress_warnings, jira) as svc,
                  floor(floor_db, args.serialize_floor, args.pin_floor) as bare):
                runs: dict[str, list[WrkRun]] = {"service": [], "floor": []}
                for server in (svc, bare):
                    measure(server, args, script, WARM_UP_SECONDS)  # not counted
                for number in range(1, args.repeat + 1):
                    for server in (svc, bare):
                        runs[server.name].append(measure(server, args, script, args.seconds))
                        print(f"run {number}  {server.name:8}" + runs[server.name][-1].line(),
                              flush=True)
        except SystemExit:
            log = Path(tmp) / "service.log"
            if log.exists():
                print(log.read_text()[-3000:], file=sys.stderr)
            raise
    report(engine, runs)


if __name__ == "__main__":
    main()
