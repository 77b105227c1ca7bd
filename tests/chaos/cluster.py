"""What the chaos soak runs and breaks: the fakes' process, and the ``serve`` replicas.

``Fakes`` starts ``python -m tests.chaos.fakes`` (Jira, Lark, Oncall and Core with a control API,
tests/chaos/fakes.py), reads its ready file and talks to its control API: the world, the
faults, the call log, the ACKs people give.

``Cluster`` runs the service the way production does, in one of two shapes:

- PostgreSQL: N replicas in shared mode on one throw-away schema, each reaching the server
  through a ``tests.relay.Relay`` of its own, so one replica's database can be cut or stalled
  while the others keep theirs;
- SQLite: one process in single mode on a file, and another process that can hold the file's
  write lock (``BEGIN IMMEDIATE``) for a while, as a backup or a hand-run fix would.

Each replica keeps its port across restarts (a load balancer's fixed endpoint) and runs as one
generation after another: a ``kill -9`` and a restart, or a SIGTERM and a restart, start a new
process whose stderr (the JSON log) goes to ``logs/replica-<i>-<generation>.log``. The settings
follow tests/test_replicas_process.py: short leases and a 1 s heartbeat, a statement timeout
that ends a paused replica's transaction, few threads and slots so four processes fit
PostgreSQL's 100 connections, and real API keys (an operator key for set-up, an automation
key for the load).

Every wait is bounded; ``stop`` ends every process this module started, whatever state it was
left in (paused ones are continued first, then SIGTERM, then SIGKILL after a bound).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.process import BASE, assignee_notification_policy, free_port, round_robin_policy
from tests.relay import Relay, relayed_url, target_of

ROOT = Path(__file__).resolve().parents[2]
_STARTED: list[subprocess.Popen] = []  # every process started here, for ``end_all``
POLL_S = 0.1
START_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 20.0  # SIGTERM to exit: shutdown_timeout (8 s) plus slack
REQUEST_TIMEOUT = (3.0, 10.0)

SHARED_SETTINGS = {
    "CLUSTER_MODE": "shared",
    "CLUSTER_DRAIN": "1s",
    "SHUTDOWN_TIMEOUT": "8s",
    "LEASES_HEARTBEAT": "1s",
    # A paused replica's open transaction is ended by the server after this: its row locks do
    # not outlast its lease.
    "DATABASE_STATEMENT_TIMEOUT": "2s",
    "DATABASE_CONNECT_TIMEOUT": "2s",
    "DATABASE_POOL_WAIT": "2s",
    "TRIGGER_POLL_INTERVAL": "1s",
    "TRIGGER_DEFER_INTERVAL": "1s",
    # Three (in a rolling deploy, still three: one stops before its successor starts)
    # processes share the server's 100 connections: 4 + 2 + 6 + 6 pooled, + 1, each.
    "HTTP_THREADS": "4",
    "TRIGGER_ACTORS": "2",
    "EXECUTION_SLOTS": "6",
    "HTTP_TRIGGER_RATE": "0",
    "LOG_LEVEL": "INFO",
}
# One process on SQLite shares no connection budget: it runs with the default threads and
# slots, as a single-process deployment does.
SQLITE_SETTINGS = {
    **{k: v for k, v in SHARED_SETTINGS.items()
       if k not in ("CLUSTER_MODE", "CLUSTER_DRAIN", "HTTP_THREADS", "TRIGGER_ACTORS",
                    "EXECUTION_SLOTS")},
    "DATABASE_BUSY_TIMEOUT": "2s",
}
SECRET_SETTINGS = ("AUTH_API_KEYS", "JIRA_API_TOKEN", "LARK_APP_SECRET", "ONCALL_TOKEN",
                   "CORE_TOKEN", "CONSOLE_SESSION_SECRET")

# -- the world the load works in ---------------------------------------------------------------

ASSIGN_PROJECT = "CHAOS"
NOTIFY_PROJECT = "PAGE"
ENGINEERS = {f"eng{n}@example.com": f"acc-eng{n}" for n in range(1, 5)}
LEADER = ("lead@example.com", "acc-lead", "ou_lead", "Lee Leader")
ASSIGNEES = [(f"{name}@example.com", f"acc-{name}", f"ou_{name}", f"{name.title()} Example")
             for name in ("carol", "dave", "erin")]
NOTIFY_LABEL = "notify-assignee"
AUTO_ASSIGN_LABEL = "auto-dispatch"  # jira.auto_assign_label, the default
PENDING_STATUS = "Todo"


@dataclass(frozen=True)
class Workflow:
    """The notification family's timings: short, so every wait ends within a run."""

    attempts: int = 2
    ack_timeout_s: int = 6
    poll_s: int = 1
    escalate: bool = True


def world_users() -> list[dict[str, Any]]:
    """Everyone the fakes know: the engineers the round robin assigns, the notified assignees
    (Lark, a phone, Core with a leader) and their leader."""
    email, account, open_id, name = LEADER
    users = [{"email": email, "name": name, "account_id": account, "open_id": open_id,
              "phone": True}]
    for email, account, open_id, name in ASSIGNEES:
        users.append({"email": email, "name": name, "account_id": account, "open_id": open_id,
                      "phone": True, "leader": LEADER[0]})
    for email, account in ENGINEERS.items():
        users.append({"email": email, "account_id": account})
    return users


def assign_policy() -> dict:
    """Round robin over the engineers for CHAOS issues that carry the ``auto-dispatch`` label,
    as docs/jira-automation.md sets it up: the assignment removes the label, so a trigger that
    comes after it (a re-sent request whose first copy was stored late) matches nothing."""
    policy = round_robin_policy("Assign CHAOS tickets", "round robin over four engineers",
                                ASSIGN_PROJECT, ENGINEERS)
    policy["trigger"]["issue_label_all"] = [AUTO_ASSIGN_LABEL]
    return policy


def notification_policy(workflow: Workflow) -> dict:
    return assignee_notification_policy(
        "Assignment Notification - PAGE Assignee", NOTIFY_PROJECT, urgent=["P0"],
        attempts=workflow.attempts, ack_timeout=f"{workflow.ack_timeout_s}s",
        poll_interval=f"{workflow.poll_s}s", pending=PENDING_STATUS,
        escalate=workflow.escalate)


# -- the fakes -----------------------------------------------------------------------------------


class Fakes:
    """``python -m tests.chaos.fakes`` in a process of its own, and its control API."""

    def __init__(self, run_dir: Path, listen: tuple[str, int, str | None] | None = None):
        """``listen``: (host, Jira's port, advertised name) for a deployment elsewhere to
        reach the fakes (tests/chaos/staging.py); free local ports by default."""
        self.listen = listen
        self.ready_file = run_dir / "fakes-ready.json"
        self.log_path = run_dir / "logs" / "fakes.log"
        self.process: subprocess.Popen | None = None
        self.info: dict[str, Any] = {}
        self._session = requests.Session()

    def start(self, timeout: float = 30.0) -> Fakes:
        self.ready_file.unlink(missing_ok=True)
        where: list[str] = []
        if self.listen is not None:
            host, port, advertise = self.listen
            where = ["--host", host, "--port", str(port),
                     *(["--advertise", advertise] if advertise else [])]
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.fakes", "--ready-file",
                 str(self.ready_file), *where], cwd=ROOT, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _STARTED.append(self.process)
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"the fakes exited with {self.process.returncode}: "
                                   f"{self.log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fakes were not ready within {timeout:g} s")
            time.sleep(POLL_S)
        self.info = json.loads(self.ready_file.read_text())
        return self

    @property
    def settings(self) -> dict[str, str]:
        """The ``TICKET_DISPATCHER_*`` settings (without the prefix) that point at the fakes."""
        return dict(self.info["settings"])

    def call(self, method: str, path: str, body: Any = None, *, expected=(200,),
             params: dict | None = None, timeout: float = 10.0) -> Any:
        response = self._session.request(method, self.info["control"] + path, json=body,
                                         params=params, timeout=timeout)
        if response.status_code not in expected:
            raise RuntimeError(f"fakes {method} {path}: {response.status_code} "
                               f"{response.text[:300]}")
        return response.json()

    def add_world(self, users: list[dict], issues: list[dict] | None = None) -> None:
        self.call("POST", "/world", {"users": users, "issues": issues or []})

    def add_issues(self, issues: list[dict]) -> None:
        self.call("POST", "/world/issues", issues)

    def add_fault(self, **fault: Any) -> int:
        return self.call("POST", "/faults", fault)["id"]

    def clear_fault(self, fault_id: int | None = None, service: str | None = None) -> int:
        params = {k: v for k, v in (("id", fault_id), ("service", service)) if v is not None}
        return self.call("DELETE", "/faults", params=params)["cleared"]

    def calls(self, limit_pages: int = 10_000) -> list[dict]:
        """The whole call log, page by page (bounded)."""
        found: list[dict] = []
        since = 0
        for _ in range(limit_pages):
            page = self.call("GET", "/calls", params={"since": since}, timeout=60)
            found += page["calls"]
            if page["next"] >= page["total"] or not page["calls"]:
                return found
            since = page["next"]
        return found

    def in_flight(self) -> dict[str, int]:
        return self.call("GET", "/calls", params={"since": 10**9, "limit": 1})["in_flight"]

    def stop(self) -> None:
        _end(self.process)
        self._session.close()


# -- one replica -------------------------------------------------------------------------------


def replica_name(index: int) -> str:
    """Replica ``index`` (1-based) as faults.jsonl and the checker name it."""
    return f"replica-{index}"


def replica_log(logs: Path, index: int, generation: int) -> Path:
    """Replica ``index``'s log of one process generation, named as the checker reads it."""
    return logs / f"{replica_name(index)}-{generation}.log"


class Replica:
    """Replica ``index`` (1-based): its port, its relay, and its current generation."""

    def __init__(self, index: int, database_url: str, environ: dict[str, str], logs: Path,
                 relay: Relay | None, closing: threading.Event):
        self.index = index
        self.closing = closing
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.relay = relay
        self.database_url = relayed_url(database_url, relay) if relay else database_url
        self._environ = {**environ, "TICKET_DISPATCHER_DATABASE_URL": self.database_url}
        self._logs = logs
        self.generation = 0
        self.process: subprocess.Popen | None = None
        self.paused = False
        self.cut = False  # its relay is cut or stalled
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return replica_name(self.index)

    @property
    def log_path(self) -> Path:
        return replica_log(self._logs, self.index, self.generation)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """A new generation (the previous one must have exited); none once the cluster is
        closing."""
        with self._lock:
            if self.closing.is_set():
                raise RuntimeError(f"{self.name}: the cluster is stopping")
            assert not self.alive(), f"{self.name} still runs"
            self.generation += 1
            self.paused = False
            with self.log_path.open("w") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "ticket_dispatcher", "serve", "--port",
                     str(self.port)], cwd=ROOT, env=self._environ, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
            _STARTED.append(self.process)

    def wait_serving(self, timeout: float = START_TIMEOUT_S) -> float:
        """Wait until ``/readyz`` answers 200; the seconds it took. Raises when the process
        exits first or the bound passes."""
        began = time.monotonic()
        while True:
            if not self.alive():
                raise RuntimeError(f"{self.name} generation {self.generation} exited with "
                                   f"{self.process.returncode if self.process else None}: "
                                   f"{self.log_tail()}")
            if self.ready(timeout=1.0):
                return time.monotonic() - began
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"{self.name} not ready within {timeout:g} s: "
                                   f"{self.log_tail()}")
            time.sleep(POLL_S)

    def ready(self, timeout: float = 1.0) -> bool:
        try:
            return requests.get(self.url + "/readyz", timeout=timeout).status_code == 200
        except requests.RequestException:
            return False

    def serving(self) -> bool:
        """Alive, not paused, its database reachable, and ready by its own word."""
        return self.alive() and not self.paused and not self.cut and self.ready()

    def kill9(self) -> int:
        pid = self.process.pid
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=EXIT_TIMEOUT_S)
        self.paused = False
        return pid

    def sigstop(self) -> int:
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True
        return self.process.pid

    def sigcont(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def sigterm(self, timeout: float = EXIT_TIMEOUT_S) -> int | None:
        """SIGTERM and wait for the exit; its code (None: it had to be killed)."""
        if not self.alive():
            return self.process.returncode if self.process else None
        self.sigcont()
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            return None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text()[-chars:]
        except OSError:
            return ""


# -- SQLite's write lock, held elsewhere ---------------------------------------------------------

# A second Python process takes the write lock, says so, and holds it until a line arrives on
# its stdin (or its input ends, or ``argv[2]`` seconds pass: the runner is gone), then lets go.
LOCK_HOLDER = """
import select, sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))
db.execute("ROLLBACK")
db.close()
print("released", flush=True)
"""


class SqliteLock:
    """Another process holding the SQLite file's write lock, from ``begin`` to ``end``."""

    def __init__(self, path: Path):
        self.path = path
        self.process: subprocess.Popen | None = None

    def begin(self, backstop_s: float, timeout: float = 40.0) -> float:
        """Hold the lock; the seconds it took to get it (the service may hold it a moment)."""
        began = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(self.path), f"{backstop_s:g}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        _STARTED.append(self.process)
        said = _read_line(self.process, timeout)
        if said != "locked":
            _end(self.process)
            raise RuntimeError(f"the lock holder did not get the lock: {said!r}")
        return time.monotonic() - began

    def end(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.process.stdin.write("release\n")
            self.process.stdin.flush()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            _end(self.process)


def _read_line(process: subprocess.Popen, timeout: float) -> str:
    """One line of ``process``'s stdout, waiting at most ``timeout``."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline().strip()),
                              daemon=True)
    reader.start()
    reader.join(timeout)
    return found[0] if found else ""


# -- the cluster ---------------------------------------------------------------------------------


class Operated:
    """What the soak does to replicas of its own and to a deployment's alike (``Replica`` and
    tests/chaos/staging.py's ``StagingReplica``): restore them after the faults, and set up
    the engineers and policies through the API as an operator."""

    replicas: list
    operator_key: str
    _session: requests.Session

    def restore_replicas(self) -> list[str]:
        """Every replica's database reachable, continued, running and serving; what had to be
        done, for the report."""
        done = []
        for replica in self.replicas:
            if replica.relay is not None and replica.cut:
                replica.relay.restore()
                replica.cut = False
                done.append(f"{replica.name} database path restored")
            if replica.paused:
                replica.sigcont()
                done.append(f"{replica.name} continued")
            if not replica.alive():
                replica.start()
                done.append(f"{replica.name} started again (generation {replica.generation})")
        for replica in self.replicas:
            replica.wait_serving()
        return done

    def serving_besides(self, index: int) -> bool:
        return any(r.serving() for r in self.replicas if r.index != index)

    def api(self, method: str, path: str, expected=(200,), **kwargs: Any) -> Any:
        """An operator's call to the first replica that answers."""
        last = None
        for replica in self.replicas:
            if not replica.alive() or replica.paused:
                continue
            try:
                response = self._session.request(
                    method, replica.url + BASE + path, timeout=REQUEST_TIMEOUT,
                    headers={"X-API-KEY": self.operator_key}, **kwargs)
            except requests.RequestException as exc:
                last = exc
                continue
            if response.status_code in expected:
                return response.json() if response.content else None
            last = RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        raise RuntimeError(f"no replica answered {method} {path}: {last}")

    def configure(self, workflow: Workflow) -> dict[str, Any]:
        """The engineers and the two policies, through the API, as an operator would. A
        policy whose name is active already (an earlier soak's, on a deployment) gets a
        replacement, which supersedes it."""
        for email, account_id in ENGINEERS.items():
            self.api("PUT", f"/engineers/{email}", (200, 201),
                     json={"dispatch_enabled": True, "jira_account_id": account_id})
        ids = {}
        for policy in (assign_policy(), notification_policy(workflow)):
            active = self.api("GET", "/dispatch/policies",
                              params={"status": "active", "limit": 200})["items"]
            earlier = [p for p in active if p["name"] == policy["name"]]
            path = (f"/dispatch/policies/{earlier[0]['id']}/replacements" if earlier
                    else "/dispatch/policies")
            created = self.api("POST", path, (201,), json=policy)
            self.api("POST", f"/dispatch/policies/{created['id']}/activate")
            ids[policy["name"]] = created["id"]
        return ids


class Cluster(Operated):
    """The replicas of one run on one database, with the keys to call them."""

    def __init__(self, engine: str, database_url: str, replicas: int, fakes: Fakes,
                 run_dir: Path, *, lease_s: float, extra: dict[str, str] | None = None):
        if engine not in ("postgres", "sqlite"):
            raise ValueError(f"engine: postgres or sqlite, not {engine!r}")
        if engine == "sqlite" and replicas != 1:
            raise ValueError("a SQLite file is served by one process: --replicas 1")
        self.engine = engine
        self.database_url = database_url
        self.operator_key = secrets.token_hex(24)
        self.automation_key = secrets.token_hex(24)
        base = SHARED_SETTINGS if engine == "postgres" else SQLITE_SETTINGS
        self.settings: dict[str, str] = {
            **base, "LEASES_DURATION": f"{lease_s:g}s", **fakes.settings, **(extra or {}),
            "AUTH_API_KEYS": f"chaos-operator:operator:{self.operator_key},"
                             f"chaos-jira:automation:{self.automation_key}",
            # one secret for every replica, as the operations guide asks
            "CONSOLE_SESSION_SECRET": secrets.token_hex(24),
        }
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKET_DISPATCHER_")}
        environ.update({f"TICKET_DISPATCHER_{k}": v for k, v in self.settings.items()})
        logs = run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.closing = threading.Event()
        self.replicas: list[Replica] = []
        for index in range(1, replicas + 1):
            relay = Relay(*target_of(database_url)) if engine == "postgres" else None
            self.replicas.append(Replica(index, database_url, environ, logs, relay,
                                         self.closing))
        self.sqlite_lock = (SqliteLock(Path(database_url.removeprefix("sqlite:///")))
                            if engine == "sqlite" else None)
        self._session = requests.Session()

    def shown_settings(self) -> dict[str, str]:
        """The settings as run.json keeps them: secrets masked."""
        return {k: ("***" if k in SECRET_SETTINGS else v) for k, v in self.settings.items()}

    def replica(self, index: int) -> Replica:
        return self.replicas[index - 1]

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """One replica at a time: the first migrates the fresh database alone."""
        for replica in self.replicas:
            replica.start()
            replica.wait_serving()

    def stop(self) -> None:
        """SIGTERM to every replica at once, then SIGKILL to any still there after the
        bound. No replica starts again afterwards."""
        with_locks = [r._lock for r in self.replicas]
        self.closing.set()
        for lock in with_locks:  # a start under way has finished: its process is seen below
            with lock:
                pass
        running = [r.process for r in self.replicas if r.alive()]
        for process in running:
            for signum in (signal.SIGCONT, signal.SIGTERM):
                try:
                    process.send_signal(signum)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self.sqlite_lock is not None:
            self.sqlite_lock.end()
        for replica in self.replicas:
            if replica.relay is not None:
                replica.relay.close()
        self._session.close()

    def restore(self) -> list[str]:
        """Undo whatever a fault left: every relay forwards, no lock is held, every replica
        runs and serves. What had to be done, for the report."""
        done = []
        if self.sqlite_lock is not None and self.sqlite_lock.process is not None \
                and self.sqlite_lock.process.poll() is None:
            self.sqlite_lock.end()
            done.append("sqlite lock released")
        return done + self.restore_replicas()


def _end(process: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; nothing when it has exited."""
    if process is None or process.poll() is not None:
        return
    try:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


def end_all() -> None:
    """Kill whatever this module started and is still running (``atexit``, signals): the last
    resort when a run could not stop in order."""
    for process in list(_STARTED):
        if process.poll() is None:
            try:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
