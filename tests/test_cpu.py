"""``cpu.pin``: the serving process on the one CPU the operator names, once, at start; nothing
pinned when none is named. Each pin runs in a child process, so the test run itself keeps
every CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ticket_dispatcher import cpu
from ticket_dispatcher.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and at least two CPUs to choose from")

# A thread started before the pin, the pin, a thread started after it; then every thread's
# CPUs and every thread's name.
CHILD = """
import json, os, sys, threading
from ticket_dispatcher import cpu
release = threading.Event()
before = threading.Thread(target=release.wait, name="before"); before.start()
pinned = cpu.pin(json.loads(sys.argv[1]))
after = threading.Thread(target=release.wait, name="after"); after.start()
threads = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
names = sorted(thread.name for thread in threading.enumerate())
release.set()
print(json.dumps({"pinned": pinned, "threads": threads, "names": names}))
"""


def pin_in_child(choice: int | None) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(choice)], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=True)
    return json.loads(done.stdout)


def test_a_given_cpu_is_the_one_every_thread_runs_on():
    chosen = max(os.sched_getaffinity(0))

    result = pin_in_child(chosen)

    assert result["pinned"] == chosen
    assert all(cpus == [chosen] for cpus in result["threads"].values())


def test_a_pin_is_made_once_and_starts_no_thread_to_watch_it():
    result = pin_in_child(max(os.sched_getaffinity(0)))

    assert result["names"] == ["MainThread", "after", "before"]
    assert len(result["threads"]) == 3


def test_no_cpu_named_pins_nothing():
    result = pin_in_child(None)

    assert result["pinned"] is None
    assert all(set(cpus) == os.sched_getaffinity(0) for cpus in result["threads"].values())
    assert result["names"] == ["MainThread", "after", "before"]


def test_a_cpu_the_process_may_not_use_is_refused_naming_the_key():
    allowed = os.sched_getaffinity(0)
    beyond = max(allowed) + 1000

    with pytest.raises(ConfigError, match=rf"cpu_affinity: CPU {beyond} is not one this "
                                          r"process may run on \(it may use "):
        cpu.pin(beyond)

    assert os.sched_getaffinity(0) == allowed  # refused before anything was pinned


def refuse_affinity(pid, cpus):
    raise PermissionError(1, "Operation not permitted")


def test_a_given_cpu_the_system_forbids_stops_the_start_naming_the_key(monkeypatch):
    chosen = max(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "sched_setaffinity", refuse_affinity)

    with pytest.raises(ConfigError, match=rf"cpu_affinity: cannot run on CPU {chosen}: "
                                          r"Operation not permitted"):
        cpu.pin(chosen)


def test_nothing_named_never_touches_the_affinity(monkeypatch):
    monkeypatch.setattr(os, "sched_setaffinity", refuse_affinity)

    assert cpu.pin(None) is None
