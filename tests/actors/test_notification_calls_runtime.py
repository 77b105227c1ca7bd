"""The counters that move as calls happen, on the real runtime and database
(docs/operations.md, "Metrics"): ``assignment_calls_total`` counts each card, App-urgent and
page when its result is saved, long before the terminal families; a restart — also one right
around a call (the crash hook of tests/faults.py) — never counts a call twice; dry runs count
nothing. And an escalation whose leader lookup failed is counted failed, apart from
``no_leader``."""

from __future__ import annotations

import pytest

from tests.actors import test_notification_faults as faults
from tests.actors.test_metrics_runtime import action, n12_samples, start_urgent, value
from tests.actors.test_notification_card_runtime import put
from tests.actors.test_notification_escalation_runtime import (
    EscalationHarness,
    automation,
    escalation,
    role_writes,
    run_out,
)
from tests.actors.test_notification_escalation_runtime import put as put_urgent
from tests.actors.test_notification_faults import (
    AFTER,
    BEFORE,
    CASES,
    STATUS_OF,
    Case,
    FaultHarness,
    run_workflow,
)
from tests.domain.test_notification_page import PENDING, POLL, TIMEOUT
from tests.harness import rule
from ticket_dispatcher.domain.actions.notification_state import CALL_RESULTS
from ticket_dispatcher.domain.execution import ExecutionStatus
from ticket_dispatcher.domain.ports import PageOutcome, PageResult
from ticket_dispatcher.errors import IntegrationError
from ticket_dispatcher.metrics import PREFIX

ESCALATE = "escalate_assignment_to_leader"
FAILED_PAGE = PageResult(PageOutcome.FAILED, call_error="no_phone_number")


def counted(metrics, call: str, result: str, attempt: str = "") -> float:
    return metrics.registry.get_sample_value(PREFIX + "assignment_calls_total", {
        "call": call, "result": result, "role": "assignee", "attempt": attempt}) or 0.0


def all_calls(metrics) -> dict[tuple[str, str, str, str], float]:
    """Every ``assignment_calls_total`` series that moved."""
    return {(s.labels["call"], s.labels["result"], s.labels["role"], s.labels["attempt"]):
            s.value for family in metrics.registry.collect()
            if family.name == PREFIX + "assignment_calls" for s in family.samples
            if s.name.endswith("_total") and s.value}


@pytest.fixture
def world(urgent_world):
    return urgent_world


def test_a_failed_page_is_counted_at_once_while_the_terminal_families_wait(world):
    world.oncall.outcomes = [FAILED_PAGE] * 3
    execution_id = start_urgent(world)

    assert world.execution(execution_id).status is ExecutionStatus.EXECUTING
    assert all_calls(world.metrics) == {("card", "succeeded", "assignee", ""): 1,
                                        ("urgent", "succeeded", "assignee", ""): 1,
                                        ("page", "failed", "assignee", "1"): 1}
    assert n12_samples(world) == {}  # the terminal families count when the workflow ends

    for _ in range(TIMEOUT // POLL):
        world.advance(POLL)
    assert counted(world.metrics, "page", "failed", "2") == 1  # attempt 2, as it pages
    world.restart()
    for _ in range(2 * TIMEOUT // POLL):
        world.advance(POLL)

    assert world.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert all_calls(world.metrics) == {("card", "succeeded", "assignee", ""): 1,
                                        ("urgent", "succeeded", "assignee", ""): 1,
                                        ("page", "failed", "assignee", "1"): 1,
                                        ("page", "failed", "assignee", "2"): 1,
                                        ("page", "failed", "assignee", "3"): 1}
    assert value(world, "assignment_notification_events_total", event="page_failed") == 3
    assert action(world, "page_assignment", "failed", "1") == 1  # the terminal family as before


def test_every_call_series_is_exported_at_zero_before_any_call(world):
    for call, attempts in (("card", [""]), ("urgent", [""]), ("page", ["1", "2", "3"])):
        for result in ("succeeded", "failed", "unknown"):
            for attempt in attempts:
                for role in ("assignee", "l2_assignee"):
                    assert world.metrics.registry.get_sample_value(
                        PREFIX + "assignment_calls_total",
                        {"call": call, "result": result, "role": role,
                         "attempt": attempt}) == 0, (call, result, attempt, role)


def test_a_dry_run_counts_no_call(world):
    put(world, severity="S1", status=PENDING)
    policy = world.store.policies.list_active()[0]

    trigger = world.post_trigger(policy_id=policy.id, dryrun={"overwrite_data": {}})

    assert world.execution(trigger.execution_ids[0]).status is ExecutionStatus.SUCCEEDED
    assert all_calls(world.metrics) == {}


# -- a crash right around a call (tests/faults.py) ---------------------------------------------

CALL_OF = {"card": ("card", ""), "urgent": ("urgent", ""),
           **{f"page{n}": ("page", str(n)) for n in (1, 2, 3)}}
CALL_CASES = [case for case in CASES if case.effect in CALL_OF]


def expected_calls(case: Case, when: str, statuses: dict[str, str | None]) -> dict:
    """What the counter must hold: each call once, by the result its execution saved —
    except the call whose result was saved just before the process died, which the dead
    process never got to count (a count lost, never one twice)."""
    expected = {}
    for effect, (call, attempt) in CALL_OF.items():
        if (effect, case.phase, when) == (case.effect, "result", AFTER):
            continue
        result = CALL_RESULTS.get(statuses[effect] or "")
        if result:
            expected[call, result, "assignee", attempt] = 1
    return expected


def saved_calls(ex) -> dict:
    """Each call of an execution the crash did not touch, once, by the result it saved."""
    statuses = {effect: STATUS_OF[effect](ex) for effect in CALL_OF}
    return {(call, CALL_RESULTS[statuses[effect]], "assignee", attempt): 1
            for effect, (call, attempt) in CALL_OF.items()
            if CALL_RESULTS.get(statuses[effect] or "")}


@pytest.fixture
def make_faulty(store):
    """tests/actors/test_notification_faults.py's harness and policy (card, urgent, three
    pages, the escalation); its one Metrics lives across the restart."""
    started: list[FaultHarness] = []

    def build(case: Case, when: str) -> FaultHarness:
        harness = FaultHarness(store, case.checkpoint, when).start()
        started.append(harness)
        harness.policy(rule(faults.SEND, name="send", priority=10, on_success="continue"),
                       rule(faults.URGENT, faults.page(1), faults.page(2), faults.page(3),
                            faults.ESCALATE, name="urgent", priority=20,
                            when=faults.SEVERITY),
                       source_in=(faults.ASSIGNEE,), labels=(faults.LABEL,))
        return harness

    yield build
    for harness in started:
        harness.stop()


@pytest.mark.parametrize("case,when", [
    pytest.param(case, when, id=f"{case.checkpoint.name}-{when}")
    for case in CALL_CASES for when in (BEFORE, AFTER)])
def test_a_crash_around_a_call_never_counts_it_twice(make_faulty, case, when):
    h = make_faulty(case, when)

    execution_id = run_workflow(h, case.scenario)

    assert h.injector.fired, f"the workflow never reached {case.checkpoint.name}"
    ex = h.execution(execution_id)
    statuses = {effect: STATUS_OF[effect](ex) for effect in CALL_OF}
    expected = expected_calls(case, when, statuses)
    # The escalation leaves a wake-up for the new assignee; when the trigger poll took it
    # before the end, that workflow's calls are counted too, each once.
    h.wait_idle()
    for other in h.executions():
        if other.id != execution_id:
            for key, count in saved_calls(other).items():
                expected[key] = expected.get(key, 0) + count
    assert all_calls(h.metrics) == expected
    if case.unknown(when):  # the restart found the call started: one unknown, counted then
        call, attempt = CALL_OF[case.effect]
        assert counted(h.metrics, call, "unknown", attempt) == 1


# -- the escalation's outcomes ------------------------------------------------------------------


@pytest.fixture
def escalating(store):
    harness = EscalationHarness(store).start()
    harness.workflow_policy()
    yield harness
    harness.stop()


def escalations(h, result: str) -> float:
    return h.runtime.deps.metrics.registry.get_sample_value(
        PREFIX + "assignment_action_total",
        {"action": ESCALATE, "result": result, "role": "assignee", "attempt": ""}) or 0.0


def test_a_leader_lookup_core_refuses_ends_leader_lookup_failed_and_counts_failed(escalating):
    def refused(email):
        raise IntegrationError("core GET /api/v1/users/alice@example.com/leader failed: "
                               "HTTP 500", status=500, service="core")

    escalating.directory.leader = refused
    put_urgent(escalating)

    ex = run_out(escalating, automation(escalating))

    assert ex.status is ExecutionStatus.SUCCEEDED
    context = escalation(ex)
    assert context["outcome"] == "leader_lookup_failed"
    assert context["reason"].startswith("the leader could not be looked up (core GET")
    assert role_writes(escalating) == [] and escalating.triggers.ensured == []
    assert (escalations(escalating, "failed"), escalations(escalating, "skipped")) == (1, 0)


def test_no_direct_leader_stays_no_leader_and_counts_skipped(escalating):
    escalating.directory.leaders.pop("alice@example.com")
    put_urgent(escalating)

    ex = run_out(escalating, automation(escalating))

    assert escalation(ex)["outcome"] == "no_leader"
    assert (escalations(escalating, "failed"), escalations(escalating, "skipped")) == (0, 1)
