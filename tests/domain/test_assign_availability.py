"""Assignment skips whoever cannot take the ticket, for every strategy, on both engines: time
off at the business time, working hours where the action asks for them, caps on open issues;
then the fallback receiver, then ``no_eligible_candidate`` naming everyone; and the rotation
stays fair for someone back from time off. Business time: Monday 2026-11-30 01:00 UTC."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from tests.domain.test_assign import run_of
from tests.fakes import FakeJira, bare_ports, issue
from ticket_dispatcher.domain.actions.assign import AssignExecutor
from ticket_dispatcher.domain.actions.base import ActionError
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.availability import TimeOff
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import ExecutionMode, FailureCode
from ticket_dispatcher.domain.validation import validate_policy

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
ABC = ["a@example.com", "b@example.com", "carol@example.com"]


@pytest.fixture
def world(store):
    jira = FakeJira(issue())
    for email in [*ABC, "lead@example.com"]:
        store.engineers.put(email, dispatch_enabled=True, now=NOW)
        jira.add_user(email)
    return bare_ports(jira=jira, engineers=store.engineers)


def away(store, email: str, start: datetime, end: datetime, reason: str = "vacation") -> None:
    store.time_off.add(TimeOff(None, email, start, end, reason, "api"), NOW)


def hours(store, email: str, zone: str, working_hours: dict | None,
          cap: int | None = None) -> None:
    store.engineers.put(email, dispatch_enabled=True, now=NOW, availability={
        "timezone": zone, "working_hours": working_hours, "max_open_issues": cap})


def config(strategy: str = "round_robin", users=ABC, **extra) -> dict:
    return {"receiver": {"type": "users", "users": list(users)}, "strategy": strategy, **extra}


def plan(world, the_config: dict, *, now: datetime = NOW,
         mode: ExecutionMode = ExecutionMode.LIVE) -> dict:
    run, executor = run_of(world, the_config, now=now, mode=mode)
    executor.plan(run)
    return run.context["assign"]


def plan_fails(world, the_config: dict) -> tuple[ActionError, dict]:
    run, executor = run_of(world, the_config)
    with pytest.raises(ActionError) as raised:
        executor.plan(run)
    return raised.value, run.context["assign"]


@pytest.mark.parametrize("strategy", ["round_robin", "first", "random", "balanced"])
def test_someone_on_time_off_is_never_chosen_whatever_the_strategy(world, strategy, store):
    away(store, "a@example.com", NOW - timedelta(days=1), NOW + timedelta(days=3))
    away(store, "b@example.com", NOW - timedelta(days=1), NOW + timedelta(hours=1))

    state = plan(world, config(strategy))

    assert state["assignee"] == "carol@example.com"
    assert state["candidates"] == ABC  # every dispatch-enabled one, passed over or not
    verdicts = {v["email"]: v for v in state["judged"]}  # those passed over
    assert set(verdicts) == {"a@example.com", "b@example.com"}
    assert verdicts["a@example.com"]["eligible"] is False
    assert verdicts["a@example.com"]["reasons"] == [
        "on time off until Thu 2026-12-03 01:00 UTC (vacation)"]


def test_time_off_is_judged_at_the_business_time_not_today(world, store):
    away(store, "a@example.com", NOW + timedelta(days=10), NOW + timedelta(days=12))

    later = plan(world, config("first"), now=NOW + timedelta(days=11),
                 mode=ExecutionMode.DRY_RUN)
    now = plan(world, config("first"), mode=ExecutionMode.DRY_RUN)

    assert later["assignee"] == "b@example.com"
    assert now["assignee"] == "a@example.com"


def test_working_hours_matter_only_where_the_action_says(world, store):
    # 01:00 UTC: 09:00 in Shanghai, 02:00 in Paris, 20:00 on Sunday in New York
    hours(store, "a@example.com", "Europe/Paris", {"mon": ["09:00-17:00"]})
    hours(store, "b@example.com", "America/New_York", {"mon": ["09:00-17:00"]})
    hours(store, "carol@example.com", "Asia/Shanghai", {"mon": ["09:00-18:00"]})

    default = plan(world, config("first"))
    required = plan(world, config("first", availability={"working_hours": "required"}))
    preferred = plan(world, config("round_robin", availability={"working_hours": "preferred"}))

    assert default["assignee"] == "a@example.com"  # today's behaviour: hours not looked at
    assert required["assignee"] == preferred["assignee"] == "carol@example.com"
    reasons = {v["email"]: v["reasons"] for v in required["judged"]}
    assert reasons["b@example.com"] == [
        "outside working hours: Sun 20:00 in America/New_York; next at Mon 09:00"]


def test_preferred_takes_someone_outside_their_hours_when_nobody_is_inside(world, store):
    for email in ABC:
        hours(store, email, "Europe/Paris", {"mon": ["09:00-17:00"]})

    state = plan(world, config("first", availability={"working_hours": "preferred"}))
    _, refused = plan_fails(world, config("first", availability={"working_hours": "required"}))

    assert state["assignee"] == "a@example.com"
    assert refused["assignee"] == ""


def test_someone_at_their_cap_of_open_issues_is_skipped(world, store):
    hours(store, "a@example.com", "UTC", None, cap=2)
    world.jira.open_issues.update({"acc-a": 2, "acc-b": 5, "acc-carol": 0})

    engineers_cap = plan(world, config("first"))
    actions_cap = plan(world, config("first", availability={"max_open_issues": 3}))

    assert engineers_cap["assignee"] == "b@example.com"  # b has no cap of their own
    assert engineers_cap["counts"] == {"a@example.com": 2, "b@example.com": 5,
                                       "carol@example.com": 0}
    assert actions_cap["assignee"] == "carol@example.com"  # a's own 2 and the action's 3
    assert "at capacity: 5 open issues, cap 3" in {
        reason for v in actions_cap["judged"] for reason in v["reasons"]}


def test_nobody_eligible_goes_to_the_fallback_receiver_under_the_same_rules(world, store):
    for email in ABC:
        away(store, email, NOW - timedelta(hours=1), NOW + timedelta(days=1))
    fallback = {"type": "user", "user": "lead@example.com"}

    state = plan(world, config(fallback=fallback))

    assert state["assignee"] == "lead@example.com"
    assert state["fallback"] is True
    assert [v["email"] for v in state["judged"]] == ABC  # passed over
    assert state["candidates"] == [*ABC, "lead@example.com"]


def test_nobody_eligible_anywhere_fails_naming_every_candidate_and_why(world, store):
    for email in [*ABC, "lead@example.com"]:
        away(store, email, NOW - timedelta(hours=1), NOW + timedelta(days=1), "offsite")

    error, state = plan_fails(world, config(fallback={"type": "user",
                                                      "user": "lead@example.com"}))

    assert error.code is FailureCode.NO_ELIGIBLE_CANDIDATE
    assert error.message.startswith("no eligible candidate: a@example.com on time off until")
    for email in [*ABC, "lead@example.com"]:
        assert email in error.message
    assert state["reason"] == error.message
    assert state["assignee"] == ""


def test_a_fallback_naming_someone_the_receiver_named_judges_them_once(world, store):
    for email in [*ABC, "lead@example.com"]:
        away(store, email, NOW - timedelta(hours=1), NOW + timedelta(days=1), "offsite")

    error, state = plan_fails(world, config(fallback={
        "type": "users", "users": ["lead@example.com", "b@example.com"]}))

    assert [v["email"] for v in state["judged"]] == [*ABC, "lead@example.com"]
    assert state["candidates"] == [*ABC, "lead@example.com"]
    assert error.message.count("b@example.com") == 1


def test_a_receiver_of_nobody_dispatch_enabled_still_fails_as_no_candidates(world, store):
    store.engineers.put("a@example.com", dispatch_enabled=False, now=NOW)

    error, _ = plan_fails(world, config(users=["a@example.com"]))

    assert error.code is FailureCode.NO_CANDIDATES


def test_round_robin_gives_someone_back_from_two_weeks_one_ticket_then_their_turn(world, store):
    """No catch-up: turns skipped while away are not owed. The one back is first in line
    once (their mark is the oldest), then waits behind everyone like the others."""
    away(store, "a@example.com", NOW - timedelta(days=14), NOW)
    for minute in range(6):  # a rotation while a is away
        plan(world, config(), now=NOW - timedelta(days=1) + timedelta(minutes=minute))

    after = [plan(world, config(), now=NOW + timedelta(minutes=minute))["assignee"]
             for minute in range(9)]

    assert Counter(after) == {"a@example.com": 3, "b@example.com": 3, "carol@example.com": 3}
    assert after[0] == "a@example.com"


def test_balanced_counts_someone_back_as_no_fewer_than_the_least_loaded(world, store):
    """Back from leave with no open issues, a would take every ticket until they had as many
    as the others; counted as the fewest of the others, a shares the turns with them."""
    away(store, "a@example.com", NOW - timedelta(days=14), NOW - timedelta(days=1))
    world.jira.open_issues.update({"acc-a": 0, "acc-b": 4, "acc-carol": 4})

    state = plan(world, config("balanced"))
    second = plan(world, config("balanced"), now=NOW + timedelta(minutes=1))

    assert state["counts"] == {"a@example.com": 0, "b@example.com": 4, "carol@example.com": 4}
    assert "a@example.com is back from time off and counts as 4" in state["reason"]
    assert {state["assignee"], second["assignee"]} != {"a@example.com"}


def test_a_dry_run_shows_every_verdict_and_takes_no_turn(world, store):
    away(store, "a@example.com", NOW - timedelta(days=1), NOW + timedelta(days=1))

    state = plan(world, config(), mode=ExecutionMode.DRY_RUN)

    assert [(v["email"], v["eligible"]) for v in state["judged"]] == [("a@example.com", False)]
    assert state["candidates"] == ABC
    assert all(e.last_dispatched_at is None
               for e in store.engineers.enabled_by_email(ABC))


@pytest.mark.parametrize("availability,path", [
    ({"working_hours": "sometimes"}, "availability.working_hours"),
    ({"max_open_issues": 0}, "availability.max_open_issues"),
    ({"max_open_issues": -3}, "availability.max_open_issues"),
    ({"cap": 3}, "availability.cap"),
])
def test_bad_availability_options_are_refused_naming_the_field(availability, path):
    policy = {"name": "p", "trigger": {"enable": True, "project_key_in": ["TCID"]},
              "rules": [{"name": "r", "priority": 1, "when": {"always": True}, "then": [
                  {"type": "assign", "assign": {**config(), "availability": availability}}],
                  "transition": {"on_success": "terminate"}}]}

    problems = validate_policy(policy, product_registry())

    assert any(p.path.endswith(path) for p in problems), problems


def test_an_unknown_engineer_in_l2_skips_alike(world, store):
    away(store, "a@example.com", NOW - timedelta(days=1), NOW + timedelta(days=1))
    run, executor = run_of(world, config("first"), executor=AssignExecutor(ActionType.ASSIGN_L2))

    executor.plan(run)

    assert run.context["assign"]["assignee"] == "b@example.com"


def test_a_round_robin_counts_open_issues_when_someone_has_a_cap_of_their_own(world, store):
    """Whoever is at their own cap is passed over; the turn goes among the others."""
    hours(store, "a@example.com", "UTC", None, cap=2)
    world.jira.open_issues.update({"acc-a": 2, "acc-b": 0, "acc-carol": 0})
    away(store, "carol@example.com", NOW - timedelta(hours=1), NOW + timedelta(days=1))

    state = plan(world, config())

    assert state["assignee"] == "b@example.com"
    assert state["counts"] == {"a@example.com": 2, "b@example.com": 0}
    assert {v["email"]: v["codes"] for v in state["judged"]} == {
        "a@example.com": ["at_capacity"], "carol@example.com": ["time_off"]}
    assert [e.email for e in store.engineers.enabled_by_email(ABC)
            if e.last_dispatched_at is not None] == ["b@example.com"]  # one turn, b's
