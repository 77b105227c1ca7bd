"""The nemesis's plan is a pure function of its seed and stays within its bounds; the executor
applies a plan, records what it applied, and ends every fault when stopped."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from itertools import pairwise

import pytest

from tests.chaos.nemesis import (
    DB_CUT,
    DB_STALL,
    KILL9,
    MIN_GAP_S,
    ONE_REPLICA,
    PEER_FAULTS,
    POSTGRES_KINDS,
    RESTART_MARGIN_S,
    SIGSTOP,
    SIGTERM_RESTART,
    SQLITE_KINDS,
    SQLITE_LOCK,
    TWO_AT_ONCE,
    WARMUP_S,
    Fault,
    Nemesis,
    down_at,
    schedule,
)

LEASE = 12.0
SEEDS = range(1, 201)
DOWN_SEEDS = range(1, 41)  # each a half-hour plan, every moment a fault starts or ends


def plan(seed: int, duration: float = 1800, kinds=POSTGRES_KINDS, replicas: int = 3):
    return schedule(seed, duration, kinds, replicas, lease_s=LEASE)


def test_the_same_seed_gives_the_same_schedule():
    assert plan(7) == plan(7)
    assert [f.to_json() for f in plan(7, 120)] == [f.to_json() for f in plan(7, 120)]


def test_different_seeds_give_different_schedules():
    plans = {json.dumps([f.to_json() for f in plan(seed, 120)]) for seed in SEEDS}
    assert len(plans) == len(SEEDS)


def test_a_schedule_draws_only_the_kinds_asked_for_and_every_one_over_a_long_run():
    for kinds in ([KILL9], [DB_CUT, "jira_429"], list(POSTGRES_KINDS)):
        drawn = {f.kind for seed in range(1, 20) for f in plan(seed, kinds=kinds)}
        assert drawn == set(kinds) - {TWO_AT_ONCE}, kinds
    assert {f.kind for f in plan(3, kinds=SQLITE_KINDS, replicas=1)} \
        <= set(SQLITE_KINDS) - {TWO_AT_ONCE}


def test_starts_keep_the_warm_up_and_the_minimum_gap_and_every_fault_ends_within_the_run():
    for seed in SEEDS:
        for duration in (60, 120, 1800):
            faults = plan(seed, duration)
            assert faults, (seed, duration)
            groups: dict[int, list[Fault]] = defaultdict(list)
            for fault in faults:
                groups[fault.group].append(fault)
                assert fault.at >= WARMUP_S
                assert fault.kind == SIGTERM_RESTART or fault.duration > 0
                assert fault.end <= duration
            starts = sorted(min(f.at for f in group) for group in groups.values())
            assert all(b - a >= MIN_GAP_S - 1e-6 for a, b in pairwise(starts))
            assert all(len(group) <= 2 for group in groups.values())


def test_each_kind_stays_within_its_own_bounds():
    for seed in SEEDS:
        for fault in plan(seed):
            if fault.kind == SIGSTOP:
                assert LEASE < fault.duration <= LEASE + 8  # past the lease
            elif fault.kind in (DB_CUT, DB_STALL):
                assert 1 <= fault.duration <= 20
                assert fault.target.startswith("db-")
            elif fault.kind == KILL9:
                assert 0.5 <= fault.duration <= 5
            elif fault.kind == "jira_429":
                assert fault.detail["retry_after_s"] in (1, 2, 3)
            elif fault.kind == "jira_slow":
                assert fault.detail["latency_s"] == 10
            elif fault.kind == SIGTERM_RESTART:
                assert sorted(fault.detail["order"]) == [1, 2, 3]
                assert fault.target == "replicas"
            if fault.kind in PEER_FAULTS:
                assert fault.target == PEER_FAULTS[fault.kind]


def test_no_target_has_two_faults_at_once_and_pairs_hit_different_targets():
    for seed in SEEDS:
        faults = plan(seed)
        by_target: dict[str, list[Fault]] = defaultdict(list)
        for fault in faults:
            name = f"replica-{fault.replica}" if fault.replica else fault.target
            by_target[name].append(fault)
        for name, spans in by_target.items():
            for a, b in pairwise(spans):
                assert b.at >= a.end, (seed, name, a, b)
        pairs = defaultdict(list)
        for fault in faults:
            pairs[fault.group].append(fault)
        for group in pairs.values():
            if len(group) == 2:
                assert group[0].target != group[1].target


@pytest.mark.parametrize("replicas", [2, 3, 4])
def test_never_every_replica_down_at_once(replicas):
    overlapping = 0
    for seed in DOWN_SEEDS:
        faults = plan(seed, replicas=replicas)
        moments = sorted({f.at for f in faults} | {f.end for f in faults}
                         | {f.end + RESTART_MARGIN_S - 0.01 for f in faults})
        for moment in moments:
            down = down_at(faults, moment)
            assert len(down) < replicas, (seed, moment, down)
            overlapping += len(down) > 1
        rolling = [f for f in faults if f.kind == SIGTERM_RESTART]
        for deploy in rolling:  # nothing else takes a replica down during a rolling deploy
            assert not [f for f in faults if f.kind in ONE_REPLICA
                        and f.at < deploy.end and deploy.at < f.end + RESTART_MARGIN_S]
    if replicas >= 3:
        assert overlapping, "two replicas were never down together"


def test_the_sqlite_variant_faults_its_one_replica_one_fault_at_a_time():
    for seed in SEEDS:
        faults = plan(seed, 300, kinds=SQLITE_KINDS, replicas=1)
        local = [f for f in faults if f.kind in (KILL9, SQLITE_LOCK)]
        assert {f.replica for f in local} <= {1}
        for a, b in pairwise(local):
            assert b.at >= a.end + RESTART_MARGIN_S
        assert all(f.target == "db-1" for f in faults if f.kind == SQLITE_LOCK)
        assert all(1 <= f.duration <= 10 for f in faults if f.kind == SQLITE_LOCK)


def test_unknown_kinds_are_refused():
    with pytest.raises(ValueError, match="unknown fault kinds: reboot"):
        schedule(1, 60, ["reboot"], 3)


# -- the executor -------------------------------------------------------------------------------


class Recording:
    """Fault actions that only record what they were asked, from the executor's threads."""

    def __init__(self, serving: bool = True):
        self.events: list[tuple[str, str]] = []
        self.serving = serving
        self.lock = threading.Lock()
        self.began = threading.Event()

    def begin(self, fault):
        with self.lock:
            self.events.append(("begin", fault.target))
        self.began.set()
        return {"pid": 42}

    def end(self, fault):
        with self.lock:
            self.events.append(("end", fault.target))
        return {"restored": True}

    def serving_besides(self, replica):
        return self.serving


def test_the_executor_applies_each_fault_and_records_its_actual_times(tmp_path):
    faults = [Fault(0.0, "jira_5xx", "jira", 0.05, {"status": 503}, 1),
              Fault(0.01, KILL9, "replica-2", 0.02, {}, 2)]
    actions = Recording()
    nemesis = Nemesis(faults, actions, tmp_path / "faults.jsonl", say=lambda _: None)
    nemesis.start()
    for thread in nemesis._threads:
        thread.join(timeout=5)
    nemesis.stop(timeout=5)
    lines = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert sorted(line["target"] for line in lines) == ["jira", "replica-2"]
    for line in lines:
        assert line["t_end"] >= line["t_start"]
        assert line["detail"]["pid"] == 42 and line["detail"]["restored"] is True
    assert sorted(actions.events) == [("begin", "jira"), ("begin", "replica-2"),
                                      ("end", "jira"), ("end", "replica-2")]


def test_stopping_ends_a_running_fault_at_once_and_begins_no_later_one(tmp_path):
    faults = [Fault(0.0, DB_CUT, "db-1", 600.0, {}, 1), Fault(600.0, KILL9, "replica-2", 1, {}, 2)]
    actions = Recording()
    nemesis = Nemesis(faults, actions, tmp_path / "faults.jsonl", say=lambda _: None)
    nemesis.start()
    assert actions.began.wait(timeout=5)
    nemesis.stop(timeout=5)
    assert nemesis.done()
    assert actions.events == [("begin", "db-1"), ("end", "db-1")]
    assert len((tmp_path / "faults.jsonl").read_text().splitlines()) == 1


def test_a_replica_fault_that_would_leave_none_serving_is_skipped(tmp_path):
    actions = Recording(serving=False)
    nemesis = Nemesis([Fault(0.0, KILL9, "replica-1", 1, {}, 1)], actions,
                      tmp_path / "faults.jsonl", say=lambda _: None)
    nemesis.SERVING_WAIT_S = 0.05
    nemesis.start()
    nemesis.stop(timeout=5)
    assert actions.events == []
    assert [s["reason"] for s in nemesis.skipped] == [
        "no other replica serves: this fault would leave none"]
