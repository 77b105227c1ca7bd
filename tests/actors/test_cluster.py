"""The cluster strategy as plain objects: what a single process remembers and replicas read,
and where each takes its work from (docs/design.md, "What single mode still does its own
way"). The runtime's tests of both modes run the real actors (tests/actors/*shared*,
tests/test_replicas_process.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from tests.fakes import issue
from ticket_dispatcher.actors.cluster import (
    ExecutionClaim,
    RememberedKeys,
    SharedReplicas,
    SingleProcess,
    TriggerReads,
    Unshadowed,
    for_mode,
)
from ticket_dispatcher.actors.first_read import FRESH_READ, IssueRead, ReadBegan
from ticket_dispatcher.actors.stopping import Deadline
from ticket_dispatcher.config import ClusterConfig

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
NO_STORE = SimpleNamespace()  # a single process asks it nothing for these


def test_the_mode_picks_the_strategy_once():
    assert isinstance(for_mode(ClusterConfig()), SingleProcess)
    assert isinstance(for_mode(ClusterConfig(mode="shared")), SharedReplicas)


def test_a_single_process_knows_a_key_free_until_an_execution_holds_it_and_after_it_ends():
    keys = RememberedKeys()
    keys.hold(1, "TCID-1|pf_A")
    keys.hold(2, None)  # a dry run holds no key

    assert not keys.known_free(["TCID-1|pf_A"]) and keys.known_free(["TCID-2|pf_A"])
    keys.release(1)
    assert keys.known_free(["TCID-1|pf_A"])


def test_a_key_taken_over_stays_held_when_its_earlier_holder_ends():
    keys = RememberedKeys()
    keys.hold(1, "TCID-1|pf_A")
    keys.hold(2, "TCID-1|pf_A")
    keys.release(1)

    assert not keys.known_free(["TCID-1|pf_A"])


def test_replicas_never_know_a_key_free_without_reading():
    assert not SharedReplicas(timedelta(seconds=5)).lock_keys().known_free([])


def test_a_single_process_keeps_a_trigger_s_read_for_its_first_run_only_while_fresh():
    reads = TriggerReads()
    old = IssueRead(issue(), 1, ReadBegan(at=10.0, stops=0))
    reads.keep([1, 2], old, monotonic=10.0)
    assert reads.take(1) is old and reads.take(1) is None

    late = 10.0 + FRESH_READ.total_seconds() + 1
    reads.keep([3], IssueRead(issue(), 2, ReadBegan(at=late, stops=0)), monotonic=late)
    assert reads.take(2) is None and reads.take(3) is not None


def test_replicas_keep_reads_and_judge_their_peers_writes_when_the_run_starts():
    reads = SharedReplicas(timedelta(seconds=5)).first_reads()
    reads.keep([1], IssueRead(issue(), 1, ReadBegan(at=0.0, stops=0)), monotonic=0.0)

    assert reads.take(1) is not None and reads.take(1) is None


def test_a_noted_execution_settles_once_and_one_not_created_is_forgotten():
    notes = Unshadowed()
    notes.note([(1, "pf_A"), (1, "pf_B")])
    notes.forget([(1, "pf_B")])

    assert notes.settled((1, "pf_A")) and not notes.settled((1, "pf_A"))
    assert not notes.settled((1, "pf_B")) and notes.noted == set()
    assert not SharedReplicas(timedelta(seconds=5)).unshadowed.settled((1, "pf_A"))


def test_a_single_process_runs_all_it_makes_and_claims_nothing_from_the_store():
    single = SingleProcess()

    assert single.runs_here([1, 2, 3], room=1) == [1, 2, 3]
    assert single.claim_triggers(NO_STORE, "me", 4, now=NOW, expires_at=NOW,
                                 first=None) == []
    assert single.claim_executions(NO_STORE, "me", 4, now=NOW, expires_at=NOW,
                                   woken_before=NOW) == ExecutionClaim([], False, None)
    assert single.resumes([1, 2], in_hand={2}) == [1, 2]
    assert single.drain(_refused, Deadline(30)) == timedelta(0)


def test_a_replica_runs_what_it_has_room_for_and_resumes_only_what_it_has_in_hand():
    shared = SharedReplicas(timedelta(seconds=5))

    assert shared.runs_here([1, 2, 3], room=1) == [1]
    assert shared.resumes([1, 2], in_hand={2}) == [2]
    assert shared.due_triggers(NO_STORE, NOW) == []


def test_a_replica_looks_for_the_next_unheld_wake_only_when_the_store_holds_no_more_due():
    def store(due: int) -> SimpleNamespace:
        return SimpleNamespace(executions=SimpleNamespace(
            claim_due=lambda owner, limit, **times: list(range(min(due, limit))),
            next_wake=lambda now: now + timedelta(minutes=1)))

    shared = SharedReplicas(timedelta(seconds=5))
    full = shared.claim_executions(store(5), "me", 2, now=NOW, expires_at=NOW, woken_before=NOW)
    short = shared.claim_executions(store(1), "me", 2, now=NOW, expires_at=NOW,
                                    woken_before=NOW)

    assert full == ExecutionClaim([0, 1], more=True, next_wake=None)
    assert short == ExecutionClaim([0], more=False, next_wake=NOW + timedelta(minutes=1))


def test_a_replica_drains_for_cluster_drain_within_the_shutdown_deadline():
    begun: list[bool] = []
    shared = SharedReplicas(timedelta(seconds=5))

    assert shared.drain(lambda: begun.append(True), Deadline(None)) == timedelta(seconds=5)
    assert shared.drain(lambda: begun.append(True), Deadline(1)) <= timedelta(seconds=1)
    assert begun == [True, True]


def _refused() -> None:
    raise AssertionError("a single process does not drain")
