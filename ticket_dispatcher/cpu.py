"""``serve`` on one CPU when the operator names one (``cpu_affinity``; docs/operations.md, "CPU").

Where the process runs is the operator's choice: ``taskset -c N ticket-dispatcher serve``, a
container runtime's cpuset, or on Kubernetes the kubelet's static CPU manager, which gives a
Guaranteed pod with an integer CPU request cores of its own. By default ``serve`` leaves its
CPU affinity as it was started with. A CPU named in ``cpu_affinity`` pins every thread once,
at start (docs/design.md, "One CPU for one interpreter"); nothing watches or moves it after.
"""

from __future__ import annotations

import os

from ticket_dispatcher.errors import ConfigError

KEY = "cpu_affinity"


def pin(cpu: int | None) -> int | None:
    """Keep every thread of this process, and every thread it starts later, on CPU ``cpu``;
    None leaves the affinity alone. The CPU pinned, or None. A CPU this process may not run
    on, or a platform or sandbox that does not let it pin itself, is a ``ConfigError`` naming
    the key: the operator asked for it."""
    if cpu is None:
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise ConfigError(f"{KEY}: this platform cannot pin a process to a CPU "
                          f"(leave the key out)")
    allowed = os.sched_getaffinity(0)
    if cpu not in allowed:
        raise ConfigError(f"{KEY}: CPU {cpu} is not one this process may run on "
                          f"(it may use {_ranges(allowed)})")
    try:  # this thread first: the threads it starts inherit its CPU
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:  # a sandbox that forbids it (seccomp), say
        raise ConfigError(f"{KEY}: cannot run on CPU {cpu}: {exc.strerror}") from None
    for thread in _threads():  # those started before (a driver's, a library's) too
        try:
            os.sched_setaffinity(thread, {cpu})
        except OSError:  # a thread that ended meanwhile
            pass
    return cpu


def _threads() -> list[int]:
    """This process's thread ids: a thread started before the pin does not inherit it."""
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
