"""The chaos soak against a deployment of the operator's own (``bench/chaos.py --target``).

A target file (TOML) says where the deployment is and how to break it:

```toml
[fakes]                      # the soak's fakes, which the deployment is configured to call
host = "0.0.0.0"             # the address they listen on
port = 18400                 # Jira's; Lark, Oncall, Core and the control API take the next four
advertise = "soak-runner.staging.internal"  # how the deployment reaches this machine

[deployment]
replicas = ["http://td-0.staging:8080", "http://td-1.staging:8080"]
automation_key = "env:TD_AUTOMATION_KEY"   # a key with the automation role
operator_key = "env:TD_OPERATOR_KEY"       # a key with the operator role
database_url = "env:TD_STAGING_DATABASE_URL"  # read at the end (and to settle); never written

[hooks]                      # shell commands; {index} (1-based), {index0}, {name}, {url}
kill9 = "kubectl -n staging exec td-{index0} -- kill -KILL 1"
start = ""                   # after kill9 or sigterm: nothing, the platform restarts it
sigstop = "kubectl -n staging exec td-{index0} -- kill -STOP 1"
sigcont = "kubectl -n staging exec td-{index0} -- kill -CONT 1"
sigterm = "kubectl -n staging exec td-{index0} -- kill -TERM 1"
db_cut = "..."               # and db_stall, db_restore: the replica's database path
logs = "kubectl -n staging logs td-{index0} --since=3h"  # its JSON log, read at the end
```

A value ``env:NAME`` is read from the environment, so no secret sits in the file. The peers'
faults (Jira, Lark, Oncall failing or slow) need no hook: the fakes are the soak's. A process or
database fault is drawn only when its hooks are there (``kill9``, ``sigstop`` with ``sigcont``,
``sigterm_restart`` from ``sigterm``, ``db_cut``/``db_stall`` with ``db_restore``). Every hook
runs with a time bound; one that fails is a fault that did not happen, written to faults.jsonl.

The deployment keeps what it had: the checker judges only the triggers and executions created
after the soak started (ids above the ones it found), and the policies get new versions of the
same names, superseding an earlier soak's.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.chaos.cluster import (
    EXIT_TIMEOUT_S,
    POLL_S,
    START_TIMEOUT_S,
    Operated,
    replica_log,
    replica_name,
)
from tests.chaos.nemesis import DB_CUT, DB_STALL, KILL9, PEER_FAULTS, SIGSTOP, SIGTERM_RESTART

HOOK_TIMEOUT_S = 60.0
HOOKS = ("kill9", "start", "sigstop", "sigcont", "sigterm", "db_cut", "db_stall", "db_restore",
         "logs")
NEEDS = {KILL9: ("kill9",), SIGSTOP: ("sigstop", "sigcont"), SIGTERM_RESTART: ("sigterm",),
         DB_CUT: ("db_cut", "db_restore"), DB_STALL: ("db_stall", "db_restore")}
SECTIONS = {"fakes": ("host", "port", "advertise"),
            "deployment": ("replicas", "automation_key", "operator_key", "database_url"),
            "hooks": HOOKS}


class TargetError(ValueError):
    """The target file cannot be used; the message names the key."""


@dataclass(frozen=True)
class Target:
    path: Path
    replicas: tuple[str, ...]
    automation_key: str
    operator_key: str
    database_url: str
    fakes_listen: tuple[str, int, str | None]
    hooks: dict[str, str] = field(default_factory=dict)

    def kinds(self) -> list[str]:
        """The fault kinds this target can do: the peers' always, the others by their hooks."""
        return [*PEER_FAULTS, *(kind for kind, needs in NEEDS.items()
                                if all(self.hooks.get(hook) for hook in needs))]


def load_target(path: str | Path, environ: dict[str, str] | None = None) -> Target:
    """The target file at ``path``; ``TargetError`` for anything it cannot be run with."""
    environ = os.environ if environ is None else environ
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise TargetError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"{path}: not TOML ({exc})") from None
    for section, value in raw.items():
        if section not in SECTIONS or not isinstance(value, dict):
            raise TargetError(f"{path}: unknown section [{section}] (known: "
                              f"{', '.join(SECTIONS)})")
        unknown = sorted(set(value) - set(SECTIONS[section]))
        if unknown:
            raise TargetError(f"{path}: unknown key {section}.{unknown[0]}")

    def text(section: str, key: str, *, required: bool = True) -> str:
        value = raw.get(section, {}).get(key, "")
        if not isinstance(value, str):
            raise TargetError(f"{path}: {section}.{key} must be a string")
        if value.startswith("env:"):
            name = value.removeprefix("env:")
            if name not in environ:
                raise TargetError(f"{path}: {section}.{key} names ${name}, which is not set")
            value = environ[name]
        if required and not value:
            raise TargetError(f"{path}: {section}.{key} is required")
        return value

    replicas = raw.get("deployment", {}).get("replicas")
    if not isinstance(replicas, list) or not replicas or not all(
            isinstance(url, str) and url.startswith(("http://", "https://")) for url in replicas):
        raise TargetError(f"{path}: deployment.replicas must list the replicas' http(s) URLs")
    port = raw.get("fakes", {}).get("port")
    if not isinstance(port, int) or not 1024 <= port <= 65530:
        raise TargetError(f"{path}: fakes.port must be a port from 1024 to 65530 (it and the "
                          f"next four are used)")
    return Target(path=path, replicas=tuple(url.rstrip("/") for url in replicas),
                  automation_key=text("deployment", "automation_key"),
                  operator_key=text("deployment", "operator_key"),
                  database_url=text("deployment", "database_url"),
                  fakes_listen=(text("fakes", "host", required=False) or "127.0.0.1", port,
                                text("fakes", "advertise", required=False) or None),
                  hooks={hook: text("hooks", hook, required=False) for hook in HOOKS})


class Hooks:
    """Runs the target's commands, bounded in time, each with its replica's names."""

    def __init__(self, commands: dict[str, str], say):
        self.commands = commands
        self.say = say

    def run(self, hook: str, replica: StagingReplica) -> str:
        """The command's stdout; RuntimeError when it fails or runs out of time. A hook that
        is not given does nothing."""
        command = self.commands.get(hook)
        if not command:
            return ""
        command = command.format(index=replica.index, index0=replica.index - 1,
                                 name=replica.name, url=replica.url)
        try:
            done = subprocess.run(command, shell=True, capture_output=True, text=True,
                                  timeout=HOOK_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"hook {hook} for {replica.name} ran past "
                               f"{HOOK_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            raise RuntimeError(f"hook {hook} for {replica.name} exited {done.returncode}: "
                               f"{done.stderr.strip()[-300:]}")
        return done.stdout


class _DatabasePath:
    """A replica's database path as the hooks cut, stall and restore it (a relay's face)."""

    def __init__(self, replica: StagingReplica):
        self._replica = replica

    def cut(self) -> None:
        self._replica.hook("db_cut")

    def stall(self) -> None:
        self._replica.hook("db_stall")

    def restore(self) -> None:
        self._replica.hook("db_restore")


class StagingReplica:
    """One replica of the deployment, broken and restored through the hooks; ``alive`` is what
    the soak did to it (killed and not started again), ``ready`` what it says itself."""

    def __init__(self, index: int, url: str, hooks: Hooks, logs: Path):
        self.index = index
        self.url = url
        self._hooks = hooks
        self._logs = logs
        self.relay = _DatabasePath(self)
        self.generation = 1  # a process the soak did not start: counted from 1
        self.paused = False
        self.cut = False
        self._down = False
        self._session = requests.Session()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return replica_name(self.index)

    @property
    def log_path(self) -> Path:
        return replica_log(self._logs, self.index, 1)  # one log for every generation

    def hook(self, name: str) -> str:
        return self._hooks.run(name, self)

    def alive(self) -> bool:
        return not self._down

    def ready(self, timeout: float = 1.0) -> bool:
        try:
            return self._session.get(self.url + "/readyz", timeout=timeout).status_code == 200
        except requests.RequestException:
            return False

    def serving(self) -> bool:
        return self.alive() and not self.paused and not self.cut and self.ready()

    def wait_serving(self, timeout: float = START_TIMEOUT_S) -> float:
        began = time.monotonic()
        while not self.ready():
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"{self.name} ({self.url}) not ready within {timeout:g} s")
            time.sleep(POLL_S)
        return time.monotonic() - began

    def start(self) -> None:
        with self._lock:
            self.hook("start")
            self._down, self.paused = False, False
            self.generation += 1

    def kill9(self) -> None:
        self.hook("kill9")
        self._down, self.paused = True, False

    def sigstop(self) -> None:
        self.hook("sigstop")
        self.paused = True

    def sigcont(self) -> None:
        self.hook("sigcont")
        self.paused = False

    def sigterm(self, timeout: float = EXIT_TIMEOUT_S) -> None:
        """SIGTERM through the hook, then until ``/readyz`` stops answering 200 (the process
        drained and went), bounded; the exit code is the platform's, not known here."""
        if self.paused:
            self.sigcont()
        self.hook("sigterm")
        self._down = True
        deadline = time.monotonic() + timeout
        while self.ready(timeout=0.5) and time.monotonic() < deadline:
            time.sleep(POLL_S)

    def collect_log(self) -> None:
        """The replica's log as the ``logs`` hook prints it, for the checker."""
        try:
            self.log_path.write_text(self.hook("logs"))
        except RuntimeError as exc:
            self.log_path.write_text("")
            self._hooks.say(f"{self.name}: no log: {exc}")


class Deployment(Operated):
    """The operator's replicas, in the shape the soak drives a ``Cluster``."""

    def __init__(self, target: Target, run_dir: Path, say):
        self.target = target
        self.database_url = target.database_url
        self.operator_key = target.operator_key
        self.automation_key = target.automation_key
        logs = run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        hooks = Hooks(target.hooks, say)
        self.replicas = [StagingReplica(index, url, hooks, logs)
                         for index, url in enumerate(target.replicas, start=1)]
        self._session = requests.Session()

    def replica(self, index: int) -> StagingReplica:
        return self.replicas[index - 1]

    def shown_settings(self) -> dict[str, Any]:
        return {"TARGET": str(self.target.path), "REPLICAS": " ".join(self.target.replicas),
                "HOOKS": " ".join(sorted(h for h, c in self.target.hooks.items() if c))}

    def start(self) -> None:
        for replica in self.replicas:
            replica.wait_serving()

    def restore(self) -> list[str]:
        return self.restore_replicas()

    def stop(self) -> None:
        """Leave the deployment running; keep each replica's log."""
        for replica in self.replicas:
            replica.collect_log()
        self._session.close()
