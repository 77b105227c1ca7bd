"""Slots, dedupe, live mutual exclusion under races, recovery and cancel."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pykka
import pytest

from tests.clocks import ManualClock
from tests.factories import OPERATOR_AUTHOR
from tests.fakes import GateAction, RecordingAction, issue
from tests.harness import Harness, rule
from ticket_dispatcher.actors.messages import Enqueue, Pull
from ticket_dispatcher.actors.pool import ExecutionPool, _created_now
from ticket_dispatcher.actors.runtime import Runtime
from ticket_dispatcher.actors.slots import SlotQueue
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.execution import (
    Execution,
    ExecutionMode,
    ExecutionStatus,
    FailureCode,
    TriggerStatus,
)
from ticket_dispatcher.domain.fanout import new_execution
from ticket_dispatcher.errors import Conflict


def test_the_eleventh_execution_waits_for_a_free_slot(make_harness):
    gate = GateAction()
    h = make_harness(gate, slots=10)
    h.policy(rule("test_gate"))
    for n in range(1, 12):
        h.jira.put(issue(key=f"TCID-{n}"))

    triggers = [h.post_trigger(f"TCID-{n}", settle=False) for n in range(1, 12)]
    gate.wait_entered(10)
    h.wait_until(lambda: all(h.trigger(t.id).status is TriggerStatus.COMPLETED
                             for t in triggers))
    status = h.runtime.status()["pool"]

    assert status["busy"] == 10 and status["queue_length"] == 1
    assert len(gate.entered) == 10
    gate.open()
    h.wait_idle()
    executions = [h.execution(h.trigger(t.id).execution_ids[0]) for t in triggers]
    assert all(e.status is ExecutionStatus.SUCCEEDED for e in executions)
    assert len(gate.entered) == 11


def test_the_same_execution_enqueued_twice_runs_once(make_harness):
    """Boot recovery, a crash restart and a wake-up each tell the pool ``Enqueue``; one that
    arrives while the execution already runs must not start it a second time."""
    gate = GateAction()
    h = make_harness(gate)
    h.policy(rule("test_gate"))
    trigger = h.post_trigger(settle=False)
    gate.wait_entered(1)
    execution_id = h.trigger(trigger.id).execution_ids[0]
    (pool,) = pykka.ActorRegistry.get_by_class(ExecutionPool)
    loads = len(h.jira.loads)

    h.runtime.activity.tell(pool, Enqueue(execution_id))
    h.runtime.activity.tell(pool, Enqueue(execution_id))
    status = h.runtime.status()["pool"]  # asked after the tells: the pool has handled both
    gate.open()
    h.wait_idle()

    assert (status["busy"], status["queue_length"]) == (1, 0)
    assert len(h.jira.loads) == loads  # no second ExecutionActor loaded the checkpoint
    assert gate.planned == [execution_id]
    assert gate.entered == [execution_id]
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED


def test_a_claim_from_the_store_never_starts_a_second_actor_for_an_execution_in_hand(
        db_url, make_harness, monkeypatch):
    """Shared mode: the pool started an execution created here, and before its actor claimed
    it the pool claimed due work from the store, which found it unheld. The execution runs
    once, in the actor already started: a second one would plan again (a second round-robin
    turn) and fence the first out mid-step."""
    if not db_url.startswith("postgres"):
        pytest.skip("replicas share a PostgreSQL database")
    gate = GateAction()
    h = make_harness(gate, cluster_mode="shared", database_url=db_url)
    h.policy(rule("test_gate"))
    claim, waiting, go = h.store.executions.claim_loaded, threading.Event(), threading.Event()

    def held_back(*args, **kwargs):  # the first claim waits until the pool has pulled
        if not go.is_set():
            waiting.set()
            assert go.wait(20), "the test never let the claim go"
        return claim(*args, **kwargs)

    monkeypatch.setattr(h.store.executions, "claim_loaded", held_back)
    trigger = h.post_trigger(settle=False)
    assert waiting.wait(20), "the actor never claimed"
    (pool,) = pykka.ActorRegistry.get_by_class(ExecutionPool)
    h.runtime.activity.tell(pool, Pull())
    status = h.runtime.status()["pool"]  # asked after the tell: the pool has pulled
    go.set()
    gate.wait_entered(1)
    gate.open()
    h.wait_idle()

    [execution_id] = h.trigger(trigger.id).execution_ids
    assert status["busy"] == 1
    assert gate.planned == [execution_id]
    assert gate.entered == [execution_id]
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED


def test_executions_are_enqueued_in_creation_order(make_harness):
    noop = RecordingAction()
    h = make_harness(noop, slots=1)
    for _ in range(4):
        h.policy(rule("test_noop"))

    trigger = h.post_trigger()

    assert [c[1] for c in noop.calls if c[0] == "plan"] == trigger.execution_ids


def test_racing_triggers_create_exactly_one_live_execution(make_harness):
    h = make_harness(RecordingAction("test_wait", park_for=60))
    h.policy(rule("test_wait"))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: h.post_trigger(settle=False), range(16)))
    h.wait_idle()

    live = h.executions(issue_key="TCID-1")
    assert len(live) == 1
    assert live[0].status is ExecutionStatus.EXECUTING


def test_lock_key_unique_index_stops_a_second_writer(store):
    """Two writers that both saw the key idle (two processes): the database lets one win."""
    harness = Harness(store, RecordingAction())
    policy = harness.policy(rule("test_noop"))
    registry = ActionRegistry([RecordingAction()])
    clock = ManualClock()
    results: list[str] = []
    barrier = threading.Barrier(4)

    def writer() -> None:
        trigger = store.triggers.create("jira_automation", "TCID-1", policy_id=None,
                                        dryrun=None, now=clock.now())
        execution = new_execution(trigger, policy, issue(), None, registry, clock.now())
        barrier.wait(timeout=10)
        try:
            store.executions.create(trigger.id, [execution], issue_key="TCID-1",
                                    ensure_context=True, now=clock.now())
            results.append("created")
        except Conflict:
            results.append("conflict")

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(results) == ["conflict"] * 3 + ["created"]
    assert len(store.executions.page(issue_key="TCID-1")[0]) == 1


def test_failing_creation_transaction_leaves_nothing_and_fails_the_trigger(make_harness,
                                                                          monkeypatch):
    h = make_harness(RecordingAction("test_wait", park_for=60))
    policy = h.policy(rule("test_wait"))
    holder = h.post_trigger()
    # Another process took the lock between our check and our insert: the check sees nothing.
    monkeypatch.setattr(h.store.executions, "busy_lock_keys", lambda keys: set())

    loser = h.post_trigger(policy_id=policy.id)

    assert loser.status is TriggerStatus.FAILED
    assert loser.execution_ids == []
    assert [e.trigger_id for e in h.executions()] == [holder.id]


def test_poll_picks_up_pending_triggers_when_they_are_due(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    stored = h.store.triggers.create("jira_automation", "TCID-1", policy_id=None,
                                     dryrun=None, now=h.clock.now())

    h.advance(4)
    assert h.trigger(stored.id).status is TriggerStatus.PENDING
    h.advance(1)  # trigger_poll_interval = 5 s

    assert h.trigger(stored.id).status is TriggerStatus.COMPLETED


def test_boot_recovers_pending_and_processing_triggers(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    pending = h.store.triggers.create("jira_automation", "TCID-1", policy_id=None,
                                      dryrun=None, now=h.clock.now())
    stuck = h.store.triggers.create("jira_automation", "TCID-1", policy_id=None,
                                    dryrun=None, now=h.clock.now())
    assert h.store.triggers.claim(stuck.id, h.clock.now()) is not None  # left processing

    h.restart()
    h.wait_idle()

    assert h.trigger(pending.id).status is TriggerStatus.COMPLETED
    assert h.trigger(stuck.id).status is TriggerStatus.COMPLETED


def test_boot_recovers_created_executions_in_creation_order(make_harness):
    noop = RecordingAction()
    h = make_harness(noop, slots=1)
    h.stop()
    policy = h.policy(rule("test_noop"))
    registry = ActionRegistry([noop])
    ids = []
    for n in range(3):
        key = f"TCID-{n + 1}"
        h.jira.put(issue(key=key))
        trigger = h.store.triggers.create("jira_automation", key, policy_id=None, dryrun=None,
                                          now=h.clock.now())
        execution = new_execution(trigger, policy, issue(key=key), None, registry,
                                  h.clock.now())
        ids += h.store.executions.create(trigger.id, [execution], issue_key=key,
                                         ensure_context=True, now=h.clock.now())

    h.start()
    h.wait_idle()

    assert [c[1] for c in noop.calls if c[0] == "plan"] == ids
    assert all(h.execution(i).status is ExecutionStatus.SUCCEEDED for i in ids)


def test_start_fails_when_the_recovery_query_fails(sqlite_store, monkeypatch):
    def broken():
        raise RuntimeError("database is gone")

    monkeypatch.setattr(sqlite_store.executions, "recoverable", broken)
    harness = Harness(sqlite_store)
    runtime = Runtime(harness.config, sqlite_store, ManualClock(), ports=harness.ports(),
                      registry=harness.registry)

    with pytest.raises(RuntimeError, match="database is gone"):
        runtime.start()


def test_cancel_a_parked_execution_fails_it_with_cancelled(make_harness):
    h = make_harness(RecordingAction("test_wait", park_for=60), RecordingAction())
    h.policy(rule("test_wait", "test_noop"))
    execution_id = h.post_trigger().execution_ids[0]

    outcome = h.runtime.cancel(execution_id, "cancelled by test", by=OPERATOR_AUTHOR)
    h.advance(60)

    execution = h.execution(execution_id)
    assert outcome == "applied"
    assert execution.status is ExecutionStatus.FAILED
    assert execution.failure_code == FailureCode.CANCELLED
    assert [a.status.value for a in execution.rule_executions[0].action_executions] \
        == ["skipped", "skipped"]
    assert execution.live_lock_key is None


def test_cancel_a_running_execution_stops_it_at_its_next_step(make_harness):
    gate, noop = GateAction(), RecordingAction()
    h = make_harness(gate, noop)
    h.policy(rule("test_gate", "test_noop"))
    trigger = h.post_trigger(settle=False)
    gate.wait_entered(1)
    execution_id = h.trigger(trigger.id).execution_ids[0]

    outcome = h.runtime.cancel(execution_id, "cancelled by test", by=OPERATOR_AUTHOR)
    gate.open()
    h.wait_idle()

    execution = h.execution(execution_id)
    assert outcome == "signalled"
    assert execution.failure_code == FailureCode.CANCELLED
    assert noop.calls == []


def test_cancel_a_finished_execution_is_a_conflict(make_harness):
    h = make_harness(RecordingAction())
    h.policy(rule("test_noop"))
    execution_id = h.post_trigger().execution_ids[0]

    with pytest.raises(Conflict):
        h.runtime.cancel(execution_id, "too late", by=OPERATOR_AUTHOR)


# -- the slot queue: new work and wakes take turns --------------------------------------------


def test_new_work_and_wakes_take_turns_for_a_free_slot_each_in_arrival_order():
    queue, at = SlotQueue(), ManualClock().now()
    for execution_id in (1, 2, 3, 4):
        queue.push(execution_id, at, wake=True)
    queue.push(10, at)
    queue.push(11, at)

    order = [queue.pop() for _ in range(len(queue))]

    assert order == [10, 1, 11, 2, 3, 4]  # a dispatch waits behind at most one wake


def test_the_slot_queue_knows_its_members_and_its_oldest_arrival():
    clock = ManualClock()
    queue = SlotQueue()
    queue.push(1, clock.now(), wake=True)
    clock.advance(5)
    queue.push(2, clock.now())

    assert (len(queue), 1 in queue, 3 in queue) == (2, True, False)
    assert queue.oldest() == clock.now() - timedelta(seconds=5)
    queue.pop()
    queue.pop()
    assert (len(queue), queue.oldest()) == (0, None)


def test_a_live_execution_is_stamped_created_when_its_locks_were_found_free():
    """Its trigger built it earlier; stamped then, it could read as created before the
    execution whose lock it took had ended."""
    built = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    admitted = built + timedelta(seconds=7)
    live, dry = (Execution(id=0, trigger_id=1, issue_key="TCID-1", mode=mode, policy_id=1,
                           policy_family_id="f", policy_version=1, rule_executions=[],
                           business_now=built, created_at=built, updated_at=built)
                 for mode in (ExecutionMode.LIVE, ExecutionMode.DRY_RUN))

    _created_now([live, dry], admitted)

    assert live.created_at == live.updated_at == live.business_now == admitted
    assert dry.created_at == dry.updated_at == dry.business_now == built  # frozen business time
