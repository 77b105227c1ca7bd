"""The nemesis of the chaos soak: a seeded plan of faults, and the executor that applies it.

``schedule(seed, duration_s, kinds, replicas)`` is a pure function of its inputs: one
``random.Random(seed)`` draws every fault, so a run is repeated by giving its seed again (the
soak prints the plan at the start and writes it into ``run.json``). What it draws from:

- on the replicas: ``kill9`` (SIGKILL, then a new generation after a short down time),
  ``sigstop`` (SIGSTOP for longer than the lease, then SIGCONT), ``sigterm_restart`` (a rolling
  deploy: every replica in turn gets SIGTERM, exits, and is started again before the next),
  ``db_cut`` and ``db_stall`` (the replica's own relay to PostgreSQL closes every connection and
  refuses new ones, or accepts them and never answers), ``sqlite_lock`` (on SQLite: another
  process holds the file's write lock);
- on the peers, through the fakes' control API: ``jira_5xx``, ``jira_429`` (with a
  ``Retry-After``), ``jira_slow``, ``lark_fail``, ``lark_slow``, ``oncall_fail``,
  ``oncall_slow``;
- ``two_at_once``: two of the above, on different targets, starting together.

The plan is bounded: a first fault only after a warm-up, at least ``min_gap_s`` between two
starts, at most one fault on a target at a time, every fault ends within the run, and at least
one replica is serving at every moment (a replica counts as down from its fault's start until
``RESTART_MARGIN_S`` after its end, time enough to serve again; a rolling deploy takes the
replicas one at a time and lets no other replica fault beside it). A single replica (the SQLite
variant) has nobody to keep serving: its faults take it down alone.

``Nemesis`` applies a plan against the live world (``FaultActions``: the cluster and the fakes)
from one thread per fault, writes one line per fault it applied into ``faults.jsonl`` with the
actual start and end, and on ``stop`` ends every fault still running. Before taking a replica
down it checks, with the live cluster, that another one still serves; a fault that would leave
none is skipped and reported, not applied.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# -- the kinds ----------------------------------------------------------------------------------

KILL9, SIGSTOP, SIGTERM_RESTART = "kill9", "sigstop", "sigterm_restart"
DB_CUT, DB_STALL, SQLITE_LOCK = "db_cut", "db_stall", "sqlite_lock"
PEER_FAULTS = {  # kind -> the peer it hits
    "jira_5xx": "jira", "jira_429": "jira", "jira_slow": "jira",
    "lark_fail": "lark", "lark_slow": "lark",
    "oncall_fail": "oncall", "oncall_slow": "oncall",
}
TWO_AT_ONCE = "two_at_once"
ONE_REPLICA = (KILL9, SIGSTOP, DB_CUT, DB_STALL, SQLITE_LOCK)  # take one replica down
REPLICA_FAULTS = (*ONE_REPLICA, SIGTERM_RESTART)
SINGLE_FAULTS = (*ONE_REPLICA, SIGTERM_RESTART, *PEER_FAULTS)
POSTGRES_KINDS = (KILL9, SIGSTOP, SIGTERM_RESTART, DB_CUT, DB_STALL, *PEER_FAULTS, TWO_AT_ONCE)
SQLITE_KINDS = (KILL9, SQLITE_LOCK, *PEER_FAULTS, TWO_AT_ONCE)

# -- the bounds ---------------------------------------------------------------------------------

WARMUP_S = 5.0  # the load runs alone first
MIN_GAP_S = 3.0  # between two starts; a gap is drawn between this and three times it
RESTART_MARGIN_S = 12.0  # after a replica fault ends, until the replica serves again
ROLLING_STEP_S = 8.0  # a rolling deploy's time per replica: drain, shutdown, start, ready
PAIR_SPREAD_S = 1.0  # the second fault of a pair starts within this of the first
MAX_FAULTS = 2000  # whatever the duration


@dataclass(frozen=True)
class Fault:
    """One planned fault: ``at`` seconds after the start, lasting ``duration`` seconds (for
    ``kill9`` the time the replica stays dead before it is started again; for a rolling deploy
    the time it is expected to take)."""

    at: float
    kind: str
    target: str  # "replica-2", "db-2", "replicas" (a rolling deploy), "jira", ...
    duration: float
    detail: dict[str, Any] = field(default_factory=dict)
    group: int = 0  # the faults of a ``two_at_once`` share their group

    @property
    def end(self) -> float:
        return self.at + self.duration

    @property
    def replica(self) -> int | None:
        """The replica a one-replica fault takes down (1-based), else None."""
        if self.kind == SQLITE_LOCK:
            return 1
        if self.kind in ONE_REPLICA:
            return int(self.target.rpartition("-")[2])
        return None

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "kind": self.kind, "target": self.target,
                "duration_s": self.duration, "detail": dict(self.detail), "group": self.group}

    def describe(self) -> str:
        extra = "".join(f" {key}={value}" for key, value in sorted(self.detail.items()))
        return (f"{self.at:8.2f}s  {self.kind:<16} {self.target:<9} "
                f"{self.duration:6.2f}s{extra}")


def schedule(seed: int, duration_s: float, kinds: Sequence[str], replicas: int, *,
             lease_s: float = 12.0, min_gap_s: float = MIN_GAP_S,
             warmup_s: float = WARMUP_S) -> list[Fault]:
    """The faults of one run, in start order: a pure function of its arguments."""
    unknown = [kind for kind in kinds if kind not in (*SINGLE_FAULTS, TWO_AT_ONCE)]
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(unknown)}")
    if replicas < 1:
        raise ValueError("at least one replica")
    plan = _Plan(random.Random(seed), duration_s, replicas, lease_s)
    singles = [kind for kind in kinds if kind != TWO_AT_ONCE]
    at = warmup_s
    group = 0
    while at < duration_s and len(plan.faults) < MAX_FAULTS and singles:
        group += 1
        kind = plan.rng.choice(list(kinds))
        if kind == TWO_AT_ONCE:
            if len(singles) >= 2:
                first, second = plan.rng.sample(singles, 2)
                plan.add(first, at, group)
                at += plan.rng.uniform(0, PAIR_SPREAD_S)
                plan.add(second, at, group)
        else:
            plan.add(kind, at, group)
        at += plan.rng.uniform(min_gap_s, 3 * min_gap_s)  # from the group's last start
    return sorted(plan.faults, key=lambda fault: (fault.at, fault.target))


class _Plan:
    """The faults drawn so far and what each target is busy with."""

    def __init__(self, rng: random.Random, duration_s: float, replicas: int, lease_s: float):
        self.rng, self.duration_s, self.replicas, self.lease_s = (
            rng, duration_s, replicas, lease_s)
        self.faults: list[Fault] = []
        self.busy: dict[str, float] = {}  # target ("replica-2", "jira") -> busy until
        self.rolling_until = 0.0

    def add(self, kind: str, at: float, group: int) -> None:
        """Draw ``kind``'s parameters and a free target; keep the fault only if it fits the
        bounds (a target free at ``at``, an end within the run)."""
        duration, detail = self._draw(kind)
        at, duration = round(at, 3), round(duration, 3)  # as the plan keeps them
        if kind in PEER_FAULTS:
            target = PEER_FAULTS[kind]
            candidates = [target] if self.busy.get(target, 0.0) <= at else []
        elif kind == SIGTERM_RESTART:
            order = self.rng.sample(range(1, self.replicas + 1), self.replicas)
            detail["order"] = order
            duration = float(ROLLING_STEP_S * self.replicas)
            free = all(self.busy.get(_replica(i), 0.0) <= at for i in order)
            candidates = ["replicas"] if free and self.rolling_until <= at else []
        else:
            candidates = self._replicas_free(at, kind)
        pick = self.rng.choice(candidates) if candidates else None
        if pick is None or at + duration > self.duration_s:
            return
        if kind in PEER_FAULTS:
            self.busy[pick] = at + duration
        elif kind == SIGTERM_RESTART:
            self.rolling_until = at + duration
            for index in detail["order"]:
                self.busy[_replica(index)] = at + duration
        else:
            self.busy[pick] = at + duration + RESTART_MARGIN_S
            if kind in (DB_CUT, DB_STALL):
                pick = f"db-{pick.rpartition('-')[2]}"
            elif kind == SQLITE_LOCK:
                pick = "db-1"
        self.faults.append(Fault(at, kind, pick, duration, detail, group))

    def _replicas_free(self, at: float, kind: str) -> list[str]:
        if self.rolling_until > at:
            return []
        names = [_replica(i) for i in range(1, self.replicas + 1)]
        if kind == SQLITE_LOCK:
            names = names[:1]
        down = sum(1 for name in names if self.busy.get(name, 0.0) > at)
        if self.replicas > 1 and down + 1 >= self.replicas:
            return []  # one more down would leave none serving
        return [name for name in names if self.busy.get(name, 0.0) <= at]

    def _draw(self, kind: str) -> tuple[float, dict[str, Any]]:
        """(duration, detail) of one fault of ``kind``."""
        rng = self.rng
        if kind == KILL9:
            return rng.uniform(0.5, 5.0), {}
        if kind == SIGSTOP:  # past the lease: the others must take its work over
            return rng.uniform(self.lease_s + 2, self.lease_s + 8), {}
        if kind in (DB_CUT, DB_STALL):
            return rng.uniform(1.0, 20.0), {}
        if kind == SQLITE_LOCK:
            return rng.uniform(1.0, 10.0), {}
        if kind == SIGTERM_RESTART:
            return 0.0, {}
        if kind == "jira_5xx":
            return rng.uniform(2.0, 15.0), {"status": rng.choice([500, 502, 503])}
        if kind == "jira_429":
            return rng.uniform(2.0, 15.0), {"retry_after_s": rng.choice([1, 2, 3])}
        if kind == "jira_slow":
            return rng.uniform(5.0, 20.0), {"latency_s": 10.0}
        if kind in ("lark_fail", "oncall_fail"):
            return rng.uniform(2.0, 15.0), {"status": rng.choice([500, 503])}
        # lark_slow, oncall_slow
        return rng.uniform(3.0, 15.0), {"latency_s": rng.choice([2.0, 5.0, 8.0])}


def _replica(index: int) -> str:
    return f"replica-{index}"


def down_at(faults: Iterable[Fault], moment: float) -> set[int]:
    """The replicas the plan has down at ``moment`` (a rolling deploy counts as one, the one
    it is replacing then, approximated as its first)."""
    down: set[int] = set()
    for fault in faults:
        if fault.replica is not None and fault.at <= moment < fault.end + RESTART_MARGIN_S:
            down.add(fault.replica)
        elif fault.kind == SIGTERM_RESTART and fault.at <= moment < fault.end:
            order = fault.detail["order"]
            down.add(order[min(len(order) - 1, int((moment - fault.at) // ROLLING_STEP_S))])
    return down


# -- the executor -------------------------------------------------------------------------------


class FaultActions(Protocol):
    """What the nemesis does to the live world. ``begin`` applies a fault and returns what it
    learned (a pid, a generation); ``end`` undoes it. ``serving_besides(i)`` says whether a
    replica other than ``i`` serves now."""

    def begin(self, fault: Fault) -> dict[str, Any]: ...

    def end(self, fault: Fault) -> dict[str, Any]: ...

    def serving_besides(self, replica: int) -> bool: ...


class Nemesis:
    """Applies a plan from the moment ``start`` is called; ``stop`` ends what still runs."""

    SERVING_WAIT_S = 15.0  # a replica fault waits this long for another replica to serve

    def __init__(self, plan: Sequence[Fault], actions: FaultActions, faults_path: Path, *,
                 say: Callable[[str], None] = print, clock: Callable[[], float] = time.time):
        self.plan = list(plan)
        self.actions = actions
        self.path = faults_path
        self.say = say
        self.clock = clock
        self.applied: list[dict[str, Any]] = []
        self.skipped: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._t0 = 0.0

    def start(self, t0: float | None = None) -> None:
        self._t0 = self.clock() if t0 is None else t0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()
        for fault in self.plan:
            thread = threading.Thread(target=self._run, args=(fault,), daemon=True,
                                      name=f"nemesis-{fault.kind}-{fault.target}")
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 120.0) -> None:
        """No fault begins from now on; each one running is ended at once (bounded)."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        alive = [thread.name for thread in self._threads if thread.is_alive()]
        if alive:
            self.say(f"nemesis: faults still ending after {timeout:g} s: {', '.join(alive)}")

    def done(self) -> bool:
        return all(not thread.is_alive() for thread in self._threads)

    def _wait_until(self, moment: float) -> bool:
        """Wait for ``moment`` (relative to the start); False when stopped first."""
        return not self._stop.wait(max(0.0, self._t0 + moment - self.clock()))

    def _run(self, fault: Fault) -> None:
        if not self._wait_until(fault.at):
            return
        replica = fault.replica
        if replica is not None and not self._others_serve(replica):
            self._skip(fault, "no other replica serves: this fault would leave none")
            return
        t_start = self.clock()
        try:
            learned = self.actions.begin(fault)
        except Exception as exc:  # a fault that could not be applied is reported, not fatal
            self._skip(fault, f"could not begin: {type(exc).__name__}: {exc}")
            return
        if not learned.pop("finished", False):
            self._stop.wait(max(0.0, t_start + fault.duration - self.clock()))
            try:
                learned.update(self.actions.end(fault))
            except Exception as exc:
                learned["end_error"] = f"{type(exc).__name__}: {exc}"
        t_end = self.clock()
        planned = {"planned_at": fault.at, "planned_duration_s": fault.duration,
                   "group": fault.group}
        # A fault made of steps (a rolling deploy: one replica after another) is one line per
        # step, each with the replica it hit.
        steps = learned.pop("steps", None) or [
            {"t_start": t_start, "t_end": t_end, "target": fault.target, "detail": learned}]
        records = [{"t_start": step["t_start"], "t_end": step["t_end"], "kind": fault.kind,
                    "target": step["target"],
                    "detail": {**fault.detail, **learned, **step["detail"], **planned}}
                   for step in steps]
        with self._lock:
            self.applied.extend(records)
            with self.path.open("a") as out:
                for record in records:
                    out.write(json.dumps(record) + "\n")
        self.say(f"fault {fault.kind} on {fault.target}: {t_end - t_start:.1f} s")

    def _others_serve(self, replica: int) -> bool:
        if self.actions.serving_besides(replica):
            return True
        deadline = time.monotonic() + self.SERVING_WAIT_S
        while time.monotonic() < deadline:
            if self._stop.wait(0.2):
                return False
            if self.actions.serving_besides(replica):
                return True
        return False

    def _skip(self, fault: Fault, reason: str) -> None:
        with self._lock:
            self.skipped.append({**fault.to_json(), "reason": reason})
        self.say(f"fault {fault.kind} on {fault.target} skipped: {reason}")
