"""``ticket-dispatcher serve`` as a newcomer and an operator run it: a real process."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(tmp_path, *args, env=None, cpus: set[int] | None = None,
          ) -> tuple[subprocess.Popen, int]:
    """``serve`` in a process of its own; ``cpus``: the CPUs it is started on, as
    ``taskset -c`` would start it."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKET_DISPATCHER_")}
    environ["TICKET_DISPATCHER_DATABASE_URL"] = f"sqlite:///{tmp_path / 'td.db'}"
    environ.update(env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "ticket_dispatcher", "serve", "--port", str(port), *args],
        cwd=tmp_path, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus))
    return process, port


def wait_until_serving(process: subprocess.Popen) -> str:
    """Read the JSON log until the server says it is serving (bounded by the test timeout);
    the log up to there."""
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "serving on" in line:
            return "".join(lines)
    raise AssertionError(f"server exited with {process.wait()} before serving")


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_serve_answers_and_shuts_down_cleanly_on_a_signal(tmp_path, stop_signal):
    process, port = start(tmp_path, "--insecure-no-auth")
    try:
        wait_until_serving(process)
        assert get(port, "/readyz")["status"] == "ready"
        process.send_signal(stop_signal)
        assert process.wait(timeout=30) == 0
        assert "shutting down" in process.stderr.read()
    finally:
        process.kill()


def test_a_request_stuck_on_sqlites_write_lock_does_not_hold_the_shutdown_past_its_deadline(
        tmp_path):
    """Another process holds the database's write lock; a trigger's POST waits for it (for up
    to a minute of busy_timeout). SIGTERM must still end the process within shutdown_timeout
    plus the 2 s the documentation allows, and the trigger, never acknowledged, is not lost
    for anyone: the client saw no 202."""
    process, port = start(tmp_path, "--insecure-no-auth", env={
        "TICKET_DISPATCHER_SHUTDOWN_TIMEOUT": "1s",
        "TICKET_DISPATCHER_DATABASE_BUSY_TIMEOUT": "60s"})
    holder = None
    try:
        wait_until_serving(process)
        holder = subprocess.Popen(  # the write lock, taken by a process of its own
            [sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], "
             "isolation_level=None); c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); "
             "sys.stdin.read()", str(tmp_path / "td.db")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        answered: list = []
        posting = threading.Thread(target=lambda: answered.append(post_trigger(port)),
                                   daemon=True)
        posting.start()
        posting.join(1.0)  # bounded: the POST is meant to be stuck on the lock
        assert posting.is_alive(), answered

        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        took = time.monotonic() - signalled

        assert code == 0
        assert took < 1 + 2, f"exited {took:.1f} s after SIGTERM"
        assert "the store did not close within the shutdown deadline" in process.stderr.read()
    finally:
        process.kill()
        if holder is not None:
            holder.kill()
            holder.wait()


def post_trigger(port: int) -> int | str:
    """POST a trigger; its status, or the failure of a connection the server closed."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("POST", "/api/v1/ticketmanager/dispatch/triggers",
                           body=json.dumps({"source": "manual",
                                            "input": {"issue_key": "TCID-1"}}),
                           headers={"Content-Type": "application/json"})
        return connection.getresponse().status
    except OSError as exc:
        return type(exc).__name__
    finally:
        connection.close()


def test_serve_refuses_to_start_without_api_keys(tmp_path):
    process, _ = start(tmp_path)

    assert process.wait(timeout=30) != 0
    error = process.stderr.read()
    assert "no API keys are configured" in error
    assert "Traceback" not in error


def test_a_second_process_on_the_same_sqlite_file_is_refused_at_start(tmp_path):
    first, port = start(tmp_path, "--insecure-no-auth")
    try:
        wait_until_serving(first)
        second, _ = start(tmp_path, "--insecure-no-auth")

        assert second.wait(timeout=30) == 2
        error = second.stderr.read()
        assert f"(pid {first.pid}) already serves this SQLite database" in error
        assert "Traceback" not in error
        assert get(port, "/readyz")["status"] == "ready"  # the first one is untouched
    finally:
        first.kill()
        first.wait(timeout=30)

    third, _ = start(tmp_path, "--insecure-no-auth")  # killed: its claim is gone with it
    try:
        wait_until_serving(third)
    finally:
        third.kill()


def cpus_of(pid: int) -> set[frozenset[int]]:
    """The CPUs each thread of process ``pid`` may run on."""
    return {frozenset(os.sched_getaffinity(int(thread)))
            for thread in os.listdir(f"/proc/{pid}/task")}


several_cpus = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and at least two CPUs to choose from")


@several_cpus
def test_serve_leaves_its_cpu_affinity_alone_by_default(tmp_path):
    process, port = start(tmp_path, "--insecure-no-auth")
    try:
        started = wait_until_serving(process)
        get(port, "/readyz")  # the HTTP threads, actors and clients have all started

        assert cpus_of(process.pid) == {frozenset(os.sched_getaffinity(0))}
        assert "running on one CPU" not in started
    finally:
        process.kill()


@several_cpus
def test_serve_keeps_every_thread_on_the_cpu_the_operator_started_it_on(tmp_path):
    chosen = max(os.sched_getaffinity(0))
    process, port = start(tmp_path, "--insecure-no-auth", cpus={chosen})
    try:
        wait_until_serving(process)
        get(port, "/readyz")

        assert cpus_of(process.pid) == {frozenset({chosen})}
    finally:
        process.kill()


@several_cpus
def test_serve_with_cpu_affinity_off_leaves_the_scheduler_free(tmp_path):
    process, port = start(tmp_path, "--insecure-no-auth",
                          env={"TICKET_DISPATCHER_CPU_AFFINITY": "off"})
    try:
        wait_until_serving(process)
        get(port, "/readyz")

        assert cpus_of(process.pid) == {frozenset(os.sched_getaffinity(0))}
    finally:
        process.kill()


@several_cpus
def test_serve_runs_on_the_cpu_it_is_given(tmp_path):
    chosen = max(os.sched_getaffinity(0))
    process, port = start(tmp_path, "--insecure-no-auth",
                          env={"TICKET_DISPATCHER_CPU_AFFINITY": str(chosen)})
    try:
        started = wait_until_serving(process)
        get(port, "/readyz")

        assert cpus_of(process.pid) == {frozenset({chosen})}
        assert f"cpu_affinity: CPU {chosen}" in started
    finally:
        process.kill()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs CPU affinity")
def test_serve_refuses_a_cpu_it_may_not_run_on(tmp_path):
    beyond = max(os.sched_getaffinity(0)) + 1000
    process, _ = start(tmp_path, "--insecure-no-auth",
                       env={"TICKET_DISPATCHER_CPU_AFFINITY": str(beyond)})

    assert process.wait(timeout=30) == 2
    error = process.stderr.read()
    assert f"cpu_affinity: CPU {beyond} is not one this process may run on" in error
    assert "Traceback" not in error


@pytest.mark.parametrize("host", ["256.1.1.1", "bad host"])
def test_serve_refuses_a_host_that_is_no_address_naming_the_key(tmp_path, host):
    process, _ = start(tmp_path, "--insecure-no-auth", "--host", host)

    assert process.wait(timeout=30) == 2
    error = process.stderr.read()
    assert f"http.host: {host!r} is not an address" in error
    assert "Traceback" not in error


def test_a_second_stop_after_the_loop_closed_its_sockets_does_nothing(tmp_path):
    """In shared mode a SIGTERM drains, stops the serving loop, and a timer pulls the loop's
    wake-up once more a drain later. The loop closes every socket it serves when it stops,
    its wake-up pipe among them, so that late pull wrote to a closed pipe: the timer's thread
    died with 'Bad file descriptor' and a traceback on stderr (found by the chaos soak's
    rolling restarts)."""
    from tests.process import sandbox_in_thread, wait_until

    def serving() -> bool:
        return any(thread.name == "waitress" for thread in threading.enumerate())

    with sandbox_in_thread(tmp_path) as service:
        service.stop_serving()  # the drain's first stop
        wait_until(lambda: not serving(), 10, "the serving loop returns")
        service.stop_serving()  # the drain's timer, a drain later
        service.stop_serving()  # and the block's own stop, as close() follows


def test_stop_serving_closes_the_connections_clients_hold_open(tmp_path):
    """The serving loop runs while any socket it serves is open: a client's idle keep-alive
    connection must not keep it serving after the drain's stop, and the client sees it
    closed."""
    from tests.process import sandbox_in_thread, wait_until

    def serving() -> bool:
        return any(thread.name == "waitress" for thread in threading.enumerate())

    with sandbox_in_thread(tmp_path) as service:
        client = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
        try:
            client.request("GET", "/healthz")
            answer = client.getresponse()
            assert answer.status == 200 and answer.read() and not answer.will_close
            service.stop_serving()
            wait_until(lambda: not serving(), 10, "the serving loop returns")
            assert client.sock.recv(1) == b""  # closed by the server
        finally:
            client.close()
