"""``cpu.pin``: the serving process on one CPU. Each pin runs in a child process, so the test
run itself keeps every CPU."""

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

# A thread started before the pin, the pin, a thread started after it; then every thread's CPUs.
CHILD = """
import json, os, sys, threading
from ticket_dispatcher import cpu
release = threading.Event()
before = threading.Thread(target=release.wait); before.start()
pinned = cpu.pin(json.loads(sys.argv[1]))
after = threading.Thread(target=release.wait); after.start()
threads = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
release.set()
print(json.dumps({"pinned": pinned, "threads": threads}))
"""


def pin_in_child(choice: str | int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(choice)], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=True)
    return json.loads(done.stdout)


def test_auto_puts_every_thread_on_one_cpu_the_process_may_use():
    result = pin_in_child("auto")

    assert result["pinned"] in os.sched_getaffinity(0)
    # the main thread, one started before, one after, and the one that follows the load
    assert len(result["threads"]) == 4
    assert all(cpus == [result["pinned"]] for cpus in result["threads"].values())


def test_auto_leaves_a_cpu_other_processes_are_pinned_to():
    crowded = min(os.sched_getaffinity(0))
    # Three processes pinned to one CPU, each saying so and then alive until the test ends.
    helper = (f"import os, sys; os.sched_setaffinity(0, {{{crowded}}}); print('pinned', "
              f"flush=True); sys.stdin.read()")
    pinned = [subprocess.Popen([sys.executable, "-c", helper], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        assert [process.stdout.readline() for process in pinned] == ["pinned\n"] * 3

        result = pin_in_child("auto")

        assert result["pinned"] != crowded
        assert all(cpus == [result["pinned"]] for cpus in result["threads"].values())
    finally:
        for process in pinned:
            process.stdin.close()
            process.wait(timeout=10)


def test_a_given_cpu_is_the_one_every_thread_runs_on():
    chosen = max(os.sched_getaffinity(0))

    result = pin_in_child(chosen)

    assert result["pinned"] == chosen
    assert all(cpus == [chosen] for cpus in result["threads"].values())


def test_off_pins_nothing():
    result = pin_in_child("off")

    assert result["pinned"] is None
    assert all(set(cpus) == os.sched_getaffinity(0) for cpus in result["threads"].values())


def test_a_cpu_the_process_may_not_use_is_refused_naming_the_key():
    allowed = os.sched_getaffinity(0)
    beyond = max(allowed) + 1000

    with pytest.raises(ConfigError, match=rf"cpu_affinity: CPU {beyond} is not one this "
                                          r"process may run on \(it may use "):
        cpu.pin(beyond)

    assert os.sched_getaffinity(0) == allowed  # refused before anything was pinned


def refuse_affinity(pid, cpus):
    raise PermissionError(1, "Operation not permitted")


def test_auto_runs_unpinned_where_the_system_forbids_pinning(monkeypatch, caplog):
    allowed = os.sched_getaffinity(0)
    monkeypatch.setattr(os, "sched_setaffinity", refuse_affinity)

    assert cpu.pin("auto") is None

    assert os.sched_getaffinity(0) == allowed
    assert "cannot pin this process to a CPU (Operation not permitted)" in caplog.text


def test_a_given_cpu_the_system_forbids_stops_the_start_naming_the_key(monkeypatch):
    chosen = max(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "sched_setaffinity", refuse_affinity)

    with pytest.raises(ConfigError, match=rf"cpu_affinity: cannot run on CPU {chosen}: "
                                          r"Operation not permitted"):
        cpu.pin(chosen)


def test_a_cpu_crowded_by_other_processes_is_left_for_the_idlest():
    assert cpu.better_cpu(0, {0: 1.0, 1: 0.1, 2: 0.3}, own=0.2) == 1
    assert cpu.better_cpu(0, {0: 1.0, 1: 0.2}, own=0.5) == 1  # two busy services on one CPU
    assert cpu.better_cpu(0, {0: 0.9, 1: 0.5}, own=0.3) is None  # others 0.6, idlest 0.5
    assert cpu.better_cpu(0, {0: 1.0, 1: 0.0}, own=0.9) is None  # busy with its own work
    assert cpu.better_cpu(0, {0: 1.0}, own=0.0) is None  # nowhere to go


# Pinned by hand to a CPU two spinning processes crowd, the follower (a look every 0.2 s)
# moves every thread of the process, one started before it included, to another CPU.
FOLLOWER = """
import json, os, sys, threading, time
from ticket_dispatcher import cpu
crowded = int(sys.argv[1])
release = threading.Event()
os.sched_setaffinity(0, {crowded})
worker = threading.Thread(target=release.wait); worker.start()
cpu._Follower(os.sched_getaffinity(0) | set(json.loads(sys.argv[2])),
              look_every=lambda: 0.2).start()
deadline = time.monotonic() + 20
while os.sched_getaffinity(0) == {crowded} and time.monotonic() < deadline:
    time.sleep(0.05)
threads = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
release.set()
print(json.dumps(threads))
"""


def run_crowded(script: str) -> tuple[int, list[int], dict]:
    """``script`` in a child process, given the first CPU this process may use (which two
    spinning processes pinned to it keep busy meanwhile) and every such CPU; its JSON answer."""
    allowed = sorted(os.sched_getaffinity(0))
    crowded = allowed[0]
    spin = f"import os; os.sched_setaffinity(0, {{{crowded}}}); print('spinning', flush=True)\n" \
           "while True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE,
                                 text=True) for _ in range(2)]
    try:
        assert [process.stdout.readline() for process in spinners] == ["spinning\n"] * 2
        done = subprocess.run([sys.executable, "-c", script, str(crowded), json.dumps(allowed)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    finally:
        for process in spinners:
            process.kill()
            process.wait(timeout=10)
    return crowded, allowed, json.loads(done.stdout)


def test_auto_moves_off_a_cpu_other_processes_crowd():
    crowded, allowed, threads = run_crowded(FOLLOWER)

    [moved_to] = {tuple(cpus) for cpus in threads.values()}
    assert len(moved_to) == 1 and moved_to[0] != crowded and moved_to[0] in allowed


# Pinned to a crowded CPU, then given every CPU back by hand (as `taskset -a -p` would): at
# its next look the follower stops, and every thread may still use every CPU.
HANDS_OFF = """
import json, os, sys, threading
from ticket_dispatcher import cpu
crowded, everything = int(sys.argv[1]), set(json.loads(sys.argv[2]))
os.sched_setaffinity(0, {crowded})
cpu._Follower(everything, look_every=lambda: 0.2).start()
for thread in os.listdir("/proc/self/task"):
    os.sched_setaffinity(int(thread), everything)
[follower] = [t for t in threading.enumerate() if t.name == "cpu-affinity"]
follower.join(timeout=10)
print(json.dumps({"stopped": not follower.is_alive(), "threads": [
    sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]}))
"""


def test_the_follower_leaves_a_process_given_every_cpu_back_alone():
    _, allowed, result = run_crowded(HANDS_OFF)

    assert result["stopped"]
    assert all(cpus == allowed for cpus in result["threads"])
