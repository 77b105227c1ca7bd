"""One trigger's processing (actors/trigger_processor.py), without an actor: the processor is
built with the store, a ManualClock, the fake Jira and a fake execution pool, and the test
asks it to process a trigger in its own thread. What it decides: when a trigger is put off,
when it fails, what it asks the pool to create, and when it is only interrupted."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.fakes import RecordingAction
from tests.harness import Harness, rule
from ticket_dispatcher.actors.activity import Activity
from ticket_dispatcher.actors.cluster import SingleProcess
from ticket_dispatcher.actors.deps import RuntimeDeps
from ticket_dispatcher.actors.messages import CreateExecutions, CreationResult, TriggerOutcome
from ticket_dispatcher.actors.scheduler import Scheduler
from ticket_dispatcher.actors.shadow import ShadowRequest
from ticket_dispatcher.actors.trigger_processor import (
    CreationUnanswered,
    TriggerProcessor,
    TriggerWork,
)
from ticket_dispatcher.domain.execution import TriggerStatus


class FakePool:
    """The execution pool's creation: records each request and answers ``ids``."""

    def __init__(self, ids: tuple[int, ...] = (41,), error: Exception | None = None):
        self.requests: list[CreateExecutions] = []
        self.ids = list(ids)
        self.error = error

    def create(self, request: CreateExecutions) -> CreationResult:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        return CreationResult(execution_ids=self.ids)


@pytest.fixture
def world(store):
    """A harness that is never started: its store, clock, fakes and configuration only."""
    return Harness(store, RecordingAction())


def deps_of(h: Harness) -> RuntimeDeps:
    return RuntimeDeps(config=h.config, store=h.store, clock=h.clock, registry=h.registry,
                       ports=h.ports(), scheduler=Scheduler(h.clock), activity=Activity(),
                       cluster=SingleProcess(), metrics=h.metrics)


def processor(h: Harness, pool: FakePool, deps: RuntimeDeps | None = None) -> TriggerProcessor:
    offered: list[ShadowRequest] = []
    return TriggerProcessor(deps or deps_of(h), pool.create, offered.append)


def pending(h: Harness) -> TriggerWork:
    trigger = h.store.triggers.create("jira_automation", "TCID-1", policy_id=None, dryrun=None,
                                      now=h.clock.now())
    return TriggerWork(trigger.id)


def test_a_matched_trigger_asks_the_pool_to_create_one_execution_per_policy(world):
    policy = world.policy(rule("test_noop"))
    pool = FakePool(ids=(41,))
    work = pending(world)

    outcome = processor(world, pool).process(work)

    assert outcome is TriggerOutcome.COMPLETED
    (request,) = pool.requests
    assert request.trigger.id == work.trigger_id and not request.explicit
    assert [e.policy_id for e in request.executions] == [policy.id]
    assert request.lease is not None and work.hold.lease == request.lease
    assert request.read is not None and request.read.issue.key == "TCID-1"


def test_a_trigger_no_policy_matches_completes_without_asking_the_pool(world):
    world.policy(rule("test_noop"), projects=("OTHER",))
    pool = FakePool()
    work = pending(world)

    outcome = processor(world, pool).process(work)

    assert outcome is TriggerOutcome.COMPLETED and pool.requests == []
    assert world.store.triggers.get(work.trigger_id).status is TriggerStatus.COMPLETED


def test_a_passing_fault_of_the_issue_load_puts_the_trigger_off(world):
    world.policy(rule("test_noop"))
    world.jira.fail_next("TCID-1", status=503)
    pool = FakePool()
    work = pending(world)
    start = world.clock.now()

    outcome = processor(world, pool).process(work)

    trigger = world.store.triggers.get(work.trigger_id)
    assert outcome is TriggerOutcome.RETRYING and pool.requests == []
    assert trigger.status is TriggerStatus.PENDING
    assert (trigger.retry_count, trigger.retry_since) == (1, start)
    assert trigger.available_at - start == timedelta(seconds=5)


def test_a_permanent_answer_to_the_issue_load_fails_the_trigger(world):
    world.policy(rule("test_noop"))
    world.jira.fail_next("TCID-1", status=404)
    work = pending(world)

    outcome = processor(world, FakePool()).process(work)

    trigger = world.store.triggers.get(work.trigger_id)
    assert outcome is TriggerOutcome.FAILED
    assert trigger.status is TriggerStatus.FAILED and "issue load failed" in trigger.failure_reason


def test_a_pool_that_does_not_answer_interrupts_the_trigger_which_keeps_its_claim(world):
    world.policy(rule("test_noop"))
    pool = FakePool(error=CreationUnanswered("late"))
    work = pending(world)

    outcome = processor(world, pool).process(work)

    assert outcome is TriggerOutcome.INTERRUPTED
    assert world.store.triggers.get(work.trigger_id).status is TriggerStatus.PROCESSING
    assert work.hold.lease is not None


def test_nothing_is_processed_once_the_runtime_stops(world):
    world.policy(rule("test_noop"))
    pool = FakePool()
    work = pending(world)
    deps = deps_of(world)
    deps.stopping.set()

    assert processor(world, pool, deps).process(work) is None
    assert world.store.triggers.get(work.trigger_id).status is TriggerStatus.PENDING
