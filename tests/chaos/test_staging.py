"""The soak against a deployment of one's own (tests/chaos/staging.py): the target file, and a
real run against a ``serve`` process that this test starts by hand, the way an operator's
platform runs theirs, broken only through the target's shell hooks."""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.chaos.checker import check
from tests.chaos.cluster import ROOT, SQLITE_SETTINGS
from tests.chaos.fakes import settings_at
from tests.chaos.nemesis import DB_CUT, KILL9, PEER_FAULTS, SIGSTOP, SIGTERM_RESTART
from tests.chaos.soak import run_soak
from tests.chaos.staging import TargetError, load_target
from tests.process import free_port

ENVIRON = {"TD_AUTOMATION_KEY": "automation-key", "TD_OPERATOR_KEY": "operator-key",
           "TD_DATABASE_URL": "postgresql://reader@staging-db/td"}
TARGET = """
[fakes]
host = "0.0.0.0"
port = 18400
advertise = "runner.staging.internal"

[deployment]
replicas = ["http://td-0.staging:8080/", "http://td-1.staging:8080"]
automation_key = "env:TD_AUTOMATION_KEY"
operator_key = "env:TD_OPERATOR_KEY"
database_url = "env:TD_DATABASE_URL"

[hooks]
kill9 = "kubectl -n staging exec td-{index0} -- kill -KILL 1"
sigstop = "kubectl -n staging exec td-{index0} -- kill -STOP 1"
logs = "kubectl -n staging logs td-{index0}"
"""


def target_file(tmp_path: Path, text: str = TARGET) -> Path:
    path = tmp_path / "staging.toml"
    path.write_text(text)
    return path


def test_a_target_file_reads_with_its_secrets_from_the_environment(tmp_path):
    target = load_target(target_file(tmp_path), ENVIRON)

    assert target.replicas == ("http://td-0.staging:8080", "http://td-1.staging:8080")
    assert (target.automation_key, target.operator_key) == ("automation-key", "operator-key")
    assert target.database_url == ENVIRON["TD_DATABASE_URL"]
    assert target.fakes_listen == ("0.0.0.0", 18400, "runner.staging.internal")
    # sigstop without sigcont could never be undone: only kill9 has what it needs
    assert target.kinds() == [*PEER_FAULTS, KILL9]


@pytest.mark.parametrize("change,message", [
    (lambda t: t.replace("[hooks]", "[hook]"), "unknown section [hook]"),
    (lambda t: t.replace("sigstop =", "sigstp ="), "unknown key hooks.sigstp"),
    (lambda t: t.replace("env:TD_OPERATOR_KEY", "env:TD_NOT_SET"),
     "deployment.operator_key names $TD_NOT_SET, which is not set"),
    (lambda t: t.replace('"http://td-0.staging:8080/", ', '"td-0:8080", '),
     "deployment.replicas must list the replicas' http(s) URLs"),
    (lambda t: t.replace("port = 18400", "port = 80"), "fakes.port must be a port"),
    (lambda t: t.replace('database_url = "env:TD_DATABASE_URL"\n', ""),
     "deployment.database_url is required"),
    (lambda t: t + "[oops", "not TOML"),
])
def test_a_target_file_that_cannot_be_run_says_which_key(tmp_path, change, message):
    with pytest.raises(TargetError, match="staging.toml: ") as raised:
        load_target(target_file(tmp_path, change(TARGET)), ENVIRON)

    assert message in str(raised.value)


def test_bench_refuses_a_bad_target_with_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "bench/chaos.py", "--target",
                           str(tmp_path / "missing.toml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)

    assert done.returncode == 2 and "--target:" in done.stderr
    assert "Traceback" not in done.stderr


# -- a real soak against a deployment the soak did not start ------------------------------------


def free_block(size: int = 5) -> int:
    """The first of ``size`` consecutive free local ports."""
    for _ in range(200):
        first = free_port()
        if first + size > 65535:
            continue
        sockets = []
        try:
            for port in range(first, first + size):
                sock = socket.socket()
                sock.bind(("127.0.0.1", port))
                sockets.append(sock)
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no block of free ports")


class HandStarted:
    """One ``serve`` on SQLite, started and broken by shell scripts only, as a platform would:
    ``start.sh`` starts it in the background (its pid in a file, its JSON log appended)."""

    def __init__(self, directory: Path, fakes_port: int):
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.automation_key, self.operator_key = secrets.token_hex(16), secrets.token_hex(16)
        settings = {**SQLITE_SETTINGS, **settings_at("127.0.0.1", fakes_port),
                    "LEASES_DURATION": "12s",
                    "DATABASE_URL": f"sqlite:///{directory / 'td.db'}",
                    "AUTH_API_KEYS": f"ops:operator:{self.operator_key},"
                                     f"jira:automation:{self.automation_key}"}
        environ = " ".join(f"TICKET_DISPATCHER_{k}={shlex.quote(v)}"
                           for k, v in settings.items())
        self.pid_file, self.log = directory / "pid", directory / "replica.log"
        (directory / "start.sh").write_text(
            f"cd {shlex.quote(str(ROOT))} && env {environ} "
            f"{shlex.quote(sys.executable)} -m ticket_dispatcher serve --port {self.port} "
            f"</dev/null >/dev/null 2>>{shlex.quote(str(self.log))} &\n"
            f"echo $! > {shlex.quote(str(self.pid_file))}\n")

    def hooks(self) -> dict[str, str]:
        pid = f"$(cat {shlex.quote(str(self.pid_file))})"
        return {"start": f"sh {shlex.quote(str(self.directory / 'start.sh'))}",
                "kill9": f"kill -KILL {pid}", "sigstop": f"kill -STOP {pid}",
                "sigcont": f"kill -CONT {pid}", "sigterm": f"kill -TERM {pid}",
                "logs": f"cat {shlex.quote(str(self.log))}"}

    def start(self, timeout: float = 60.0) -> None:
        subprocess.run(self.hooks()["start"], shell=True, check=True, timeout=30)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the hand-started replica never served: {self.log.read_text()}")

    def stop(self) -> None:
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return
        for signum in ("CONT", "TERM"):
            subprocess.run(["kill", f"-{signum}", str(pid)], capture_output=True, timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
            time.sleep(0.2)
        subprocess.run(["kill", "-KILL", str(pid)], capture_output=True, timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_soak_against_a_deployment_of_ones_own_keeps_every_promise(tmp_path):
    fakes_port = free_block()
    deployment = HandStarted(tmp_path, fakes_port)
    hooks = "\n".join(f"{name} = '''{command}'''"  # TOML literal strings
                      for name, command in deployment.hooks().items())
    path = target_file(tmp_path, f"""
[fakes]
host = "127.0.0.1"
port = {fakes_port}

[deployment]
replicas = ["{deployment.url}"]
automation_key = "env:AUTOMATION"
operator_key = "env:OPERATOR"
database_url = "sqlite:///{tmp_path / 'td.db'}"

[hooks]
{hooks}
""")
    target = load_target(path, {"AUTOMATION": deployment.automation_key,
                                "OPERATOR": deployment.operator_key})
    assert set(target.kinds()) >= {KILL9, SIGSTOP, SIGTERM_RESTART} and DB_CUT not in \
        target.kinds()
    deployment.start()
    try:
        # seed 27's schedule: Jira 5xx, a SIGTERM restart, a kill -9, each through the hooks
        run_dir = run_soak(27, 30.0, out=tmp_path / "run", target=target,
                           kinds=[KILL9, SIGSTOP, SIGTERM_RESTART, "jira_5xx", "lark_fail"])
    finally:
        deployment.stop()

    report = check(run_dir)
    assert report.violations == [], report.text()
    assert report.summary["triggers"]["answered_202"] > 50, report.summary["triggers"]
    assert set(report.summary["faults"]) == {"jira_5xx", SIGTERM_RESTART, KILL9}
    assert (run_dir / "logs" / "replica-1-1.log").read_text().strip()
