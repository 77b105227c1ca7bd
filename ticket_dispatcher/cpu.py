"""One CPU for the serving process (docs/design.md, "One CPU for one interpreter").

CPython runs one thread's Python at a time. A serving process has dozens of threads (HTTP
workers, trigger, execution and client actors) that each hold the interpreter lock for a short
stretch between a socket call and a database statement. Spread over several CPUs, every
hand-over of that lock wakes a thread on another CPU, and the wake-ups cost more than the work:
on a 2-core machine the same dispatches took 12.8 ms of CPU each with the process free to use
both CPUs, and 4.5 ms (at three times the rate) with it kept on one. So ``serve`` pins itself
to one CPU unless told not to (``cpu_affinity``); other processes (the database, the peers) keep
the rest of the machine. With ``"auto"`` it moves to another CPU when other processes crowd its
own (``_Follower``).
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable

from ticket_dispatcher.errors import ConfigError

log = logging.getLogger(__name__)

AUTO, OFF = "auto", "off"
KEY = "cpu_affinity"
CROWDED = 0.25  # of a CPU: how much more other processes use this one than the idlest
LOOK_EVERY = (20.0, 40.0)  # seconds between looks, drawn anew each time


def pin(choice: str | int) -> int | None:
    """Keep every thread of this process, and every thread it starts later, on one CPU: with
    ``"auto"`` the one the fewest other processes are pinned to (``_least_taken``), with a
    number that CPU; ``"off"`` leaves the scheduler free. The CPU pinned, or None when nothing
    was pinned (``"off"``, a platform without CPU affinity, a process that may already use one
    CPU only, or one the system does not let pin itself). An explicit CPU this process may not
    run on is a ``ConfigError`` naming the key."""
    if choice == OFF:
        return None
    if not hasattr(os, "sched_setaffinity"):
        if choice == AUTO:
            log.info("cpu_affinity: this platform cannot pin a process to a CPU; not pinned")
            return None
        raise ConfigError(f"{KEY}: this platform cannot pin a process to a CPU "
                          f"(use \"auto\" or \"off\")")
    allowed = os.sched_getaffinity(0)
    if choice == AUTO:
        if len(allowed) < 2:
            return None
        cpu = _least_taken(allowed)
    elif choice in allowed:
        cpu = int(choice)
    else:
        raise ConfigError(f"{KEY}: CPU {choice} is not one this process may run on "
                          f"(it may use {_ranges(allowed)})")
    try:  # this thread first: the threads it starts inherit its CPU
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:  # a sandbox that forbids it (seccomp), say
        if choice != AUTO:
            raise ConfigError(f"{KEY}: cannot run on CPU {cpu}: {exc.strerror}") from None
        log.warning("cpu_affinity auto: cannot pin this process to a CPU (%s); it runs on "
                    "every CPU it may use", exc.strerror)
        return None
    move_threads({cpu})
    if choice == AUTO:
        _Follower(allowed).start()
    return cpu


def move_threads(cpus: set[int]) -> None:
    """Every thread of this process onto ``cpus``: those started before the pin too (a
    driver's, a library's), which do not inherit it."""
    for thread in _threads():
        try:
            os.sched_setaffinity(thread, cpus)
        except OSError:  # a thread that ended meanwhile
            pass


class _Follower:
    """``"auto"`` after the start: now and then, look whether other processes keep this
    process's CPU busy while another allowed CPU idles (two services pinned to one CPU on a
    host where neither sees the other, say), and move there. A look every 20 to 40 s, drawn
    anew each time, so two processes crowding one CPU do not both move at once. The CPU is
    read back at each look (one moved by hand is followed from where it is); once the process
    may run on more than one CPU again, somebody chose so, and the follower stops."""

    def __init__(self, allowed: set[int], *,
                 look_every: Callable[[], float] = lambda: random.uniform(*LOOK_EVERY)):
        self._allowed, self._look_every = allowed, look_every

    def start(self) -> None:
        threading.Thread(target=self._run, name="cpu-affinity", daemon=True).start()

    def _run(self) -> None:
        before, pause = _usage(), threading.Event()  # never set: a timed wait between looks
        while not pause.wait(self._look_every()):
            pinned = os.sched_getaffinity(0)
            if len(pinned) != 1:  # someone (an operator's taskset) set it otherwise: theirs
                return
            [current], now = pinned, _usage()
            if before is not None and now is not None:
                better = better_cpu(current, *_shares(before, now, self._allowed))
                if better is not None:
                    log.info("running on another CPU", extra={
                        "reason": f"cpu_affinity auto: CPU {current} was busy with other "
                                  f"processes, CPU {better} was not"})
                    move_threads({better})
            before = now


def better_cpu(current: int, busy: dict[int, float], own: float) -> int | None:
    """The CPU to move to, or None to stay: the least busy other CPU, when other processes
    used ``current`` at least ``CROWDED`` of a CPU more than that one was used. ``busy``: each
    allowed CPU's busy share over the last interval (every process, 0 to 1); ``own``: this
    process's share of one CPU over it."""
    others = busy.get(current, 0.0) - own
    candidates = [cpu for cpu in busy if cpu != current]
    if not candidates:
        return None
    idlest = min(candidates, key=lambda cpu: (busy[cpu], cpu))
    return idlest if others - busy[idlest] >= CROWDED else None


def _usage() -> tuple[dict[int, tuple[int, int]], int] | None:
    """Each CPU's (busy, total) clock ticks so far (``/proc/stat``), and this process's own
    CPU ticks (``/proc/self/stat``); None where they cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            lines = stat.read().splitlines()
    except OSError:
        return None
    fields = _own_stat()
    if fields is None:
        return None
    cpus = {}
    for line in lines:
        name, *values = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            ticks = [int(value) for value in values]
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
            cpus[int(name[3:])] = (sum(ticks[:8]) - idle, sum(ticks[:8]))
    return cpus, int(fields[11]) + int(fields[12])  # utime + stime


def _shares(before: tuple[dict[int, tuple[int, int]], int],
            after: tuple[dict[int, tuple[int, int]], int],
            allowed: set[int]) -> tuple[dict[int, float], float]:
    """Each allowed CPU's busy share between two ``_usage`` readings, and this process's."""
    (cpus_before, own_before), (cpus_after, own_after) = before, after
    busy, elapsed = {}, 0
    for cpu in allowed:
        if cpu in cpus_before and cpu in cpus_after:
            total = cpus_after[cpu][1] - cpus_before[cpu][1]
            busy[cpu] = (cpus_after[cpu][0] - cpus_before[cpu][0]) / total if total > 0 else 0.0
            elapsed = max(elapsed, total)
    return busy, (own_after - own_before) / elapsed if elapsed > 0 else 0.0


def _least_taken(allowed: set[int]) -> int:
    """Of ``allowed``, a CPU the fewest other processes are pinned to (another ``serve`` on
    the same host, say), preferring the one this process runs on: two services started one
    after the other share no CPU while a free one is left."""
    taken = dict.fromkeys(allowed, 0)
    for cpus in _pinned_elsewhere():
        if cpus in taken:
            taken[cpus] += 1
    current = _current_cpu()
    return min(allowed, key=lambda cpu: (taken[cpu], cpu != current, cpu))


def _pinned_elsewhere() -> list[int]:
    """The CPU of each other user process this one can see that may run on one CPU only.
    Kernel threads (pinned per CPU, and alike on every CPU) have no memory map and are left
    out; so are processes gone or unreadable meanwhile."""
    me, pinned = str(os.getpid()), []
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit() and name != me]
    except OSError:
        return pinned
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as status:
                lines = status.read().splitlines()
        except OSError:
            continue
        fields = dict(line.partition(":")[::2] for line in lines)
        cpus = fields.get("Cpus_allowed_list", "").strip()
        if "VmSize" in fields and cpus.isdigit():
            pinned.append(int(cpus))
    return pinned


def _current_cpu() -> int | None:
    """The CPU this process last ran on (field 39 of ``/proc/self/stat``), or None."""
    fields = _own_stat()
    try:
        return int(fields[36]) if fields is not None else None
    except (ValueError, IndexError):
        return None


def _own_stat() -> list[str] | None:
    """The fields of ``/proc/self/stat`` after the command name (the first is field 3), or
    None where it cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()
    except OSError:
        return None


def _threads() -> list[int]:
    """This process's thread ids: a thread started before the pin (a driver's, a library's)
    does not inherit it."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []


def _ranges(cpus: set[int]) -> str:
    """``{0, 1, 2, 5}`` as ``0-2, 5``."""
    ordered, parts = sorted(cpus), []
    start = previous = ordered[0]
    for cpu in ordered[1:] + [None]:
        if cpu is not None and cpu == previous + 1:
            previous = cpu
            continue
        parts.append(f"{start}" if start == previous else f"{start}-{previous}")
        if cpu is not None:
            start = previous = cpu
    return ", ".join(parts)
