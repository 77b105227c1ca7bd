"""The balanced and random strategies of assign and assign_l2, with plain fakes and a real
engineer table: counts per candidate, ties, failures, the candidate bound and the draw."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from tests.domain.test_assign import run_of
from tests.fakes import FakeDirectory, FakeJira, bare_ports, issue
from ticket_dispatcher.domain.actions.assign import AssignExecutor
from ticket_dispatcher.domain.actions.balanced import DEFAULT_COUNT_JQL, MAX_CANDIDATES
from ticket_dispatcher.domain.actions.base import ActionError
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import ExecutionMode
from ticket_dispatcher.domain.jql import fill
from ticket_dispatcher.domain.ports import GroupMember, NotConfiguredJira
from ticket_dispatcher.domain.validation import validate_policy
from ticket_dispatcher.errors import CallAbandoned

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
ABC = ["a@example.com", "b@example.com", "carol@example.com"]


class Scripted(random.Random):
    """An rng whose draws are the given indexes, in order."""

    def __init__(self, *indexes: int):
        super().__init__()
        self.indexes = list(indexes)
        self.asked: list[int] = []

    def randrange(self, stop, *args, **kwargs) -> int:  # type: ignore[override]
        self.asked.append(stop)
        return self.indexes.pop(0)


@pytest.fixture
def world(sqlite_store):
    jira = FakeJira(issue())
    for email in ABC:
        sqlite_store.engineers.put(email, dispatch_enabled=True, now=NOW)
        jira.add_user(email)
    return bare_ports(jira=jira, core=FakeDirectory(), engineers=sqlite_store.engineers)


def balanced(users=ABC, **extra) -> dict:
    return {"receiver": {"type": "users", "users": list(users)}, "strategy": "balanced",
            **extra}


def plan(ports, config: dict, **options) -> dict:
    run, executor = run_of(ports, config, **options)
    executor.plan(run)
    return run.context["assign"]


def plan_fails(ports, config: dict, **options) -> tuple[ActionError, dict]:
    run, executor = run_of(ports, config, **options)
    with pytest.raises(ActionError) as raised:
        executor.plan(run)
    return raised.value, run.context["assign"]


def open_issues(ports, **by_name: int) -> None:
    ports.jira.open_issues.update({f"acc-{name}": n for name, n in by_name.items()})


# -- balanced ------------------------------------------------------------------------------------


def test_balanced_chooses_the_candidate_with_the_fewest_open_issues(world):
    open_issues(world, a=3, b=1, carol=2)

    state = plan(world, balanced())

    assert state["assignee"] == "b@example.com"
    assert state["account_id"] == "acc-b"  # found by the search: execute needs no other
    assert state["reason"] == "balanced: fewest open issues (1)"
    assert state["counts"] == {"a@example.com": 3, "b@example.com": 1, "carol@example.com": 2}
    assert state["count_jql"] == DEFAULT_COUNT_JQL
    assert world.jira.writes == [("find_user_by_email", e) for e in ABC]  # reads only


def test_balanced_fills_the_jql_per_candidate_with_the_quoted_account(world):
    world.engineers.set_jira_account_id("a@example.com", 'we"ird\\id', now=NOW)
    jql = "project = TCID AND assignee = {account} AND status != Closed"

    state = plan(world, balanced(count_jql=jql))

    assert world.jira.counted == [
        'project = TCID AND assignee = "we\\"ird\\\\id" AND status != Closed',
        'project = TCID AND assignee = "acc-b" AND status != Closed',
        'project = TCID AND assignee = "acc-carol" AND status != Closed']
    assert state["count_jql"] == jql
    assert ("find_user_by_email", "a@example.com") not in world.jira.writes  # cached


def test_the_default_jql_counts_a_candidates_unfinished_issues_as_a_quoted_string():
    assert DEFAULT_COUNT_JQL == "assignee = {account} AND statusCategory != Done"
    assert fill(DEFAULT_COUNT_JQL, "557058:f58131cb") == \
        'assignee = "557058:f58131cb" AND statusCategory != Done'


def test_a_live_balanced_plan_caches_the_accounts_it_searched(world):
    plan(world, balanced())

    assert [world.engineers.get(e).jira_account_id for e in ABC] == ["acc-a", "acc-b",
                                                                    "acc-carol"]
    world.jira.writes.clear()
    plan(world, balanced())
    assert world.jira.writes == []  # no user search the second time


def test_a_dry_run_counts_and_shows_them_but_writes_nothing(world):
    open_issues(world, a=2, b=0, carol=5)

    state = plan(world, balanced(), mode=ExecutionMode.DRY_RUN)

    assert (state["assignee"], state["counts"]) == (
        "b@example.com", {"a@example.com": 2, "b@example.com": 0, "carol@example.com": 5})
    assert all(world.engineers.get(e).jira_account_id == "" for e in ABC)  # nothing cached
    assert all(world.engineers.get(e).last_dispatched_at is None for e in ABC)


def test_a_tie_goes_to_the_never_dispatched_then_the_oldest_then_configured_order(world):
    open_issues(world, a=1, b=1, carol=1)
    world.engineers.update_dispatch_state("a@example.com", dispatched_at=NOW, issue_key="X-1",
                                          now=NOW)
    dry = ExecutionMode.DRY_RUN

    assert plan(world, balanced(), mode=dry)["assignee"] == "b@example.com"
    world.engineers.update_dispatch_state("b@example.com", dispatched_at=NOW + timedelta(1),
                                          issue_key="X-2", now=NOW)
    world.engineers.update_dispatch_state("carol@example.com",
                                          dispatched_at=NOW + timedelta(2), issue_key="X-3",
                                          now=NOW)
    state = plan(world, balanced(), mode=dry)
    assert state["assignee"] == "a@example.com"
    assert state["reason"] == ("balanced: fewest open issues (1), tied with 2 more; "
                               "round_robin: oldest last_dispatched_at")


def test_a_tie_only_counts_among_the_least_loaded(world):
    open_issues(world, a=0, b=4, carol=0)
    world.engineers.update_dispatch_state("a@example.com", dispatched_at=NOW, issue_key="X-1",
                                          now=NOW)

    state = plan(world, balanced(), mode=ExecutionMode.DRY_RUN)

    # b was never dispatched either, but has more open issues than a and carol
    assert state["assignee"] == "carol@example.com"
    assert state["reason"].startswith("balanced: fewest open issues (0), tied with 1 more;")


def test_a_live_tie_takes_the_turn_among_the_tied_so_the_next_plan_gets_the_other(world):
    open_issues(world, a=2, b=0, carol=0)

    first = plan(world, balanced())
    second = plan(world, balanced(), now=NOW + timedelta(seconds=1))

    # the counts have not moved yet (no write happened), the turn has
    assert (first["assignee"], second["assignee"]) == ("b@example.com", "carol@example.com")
    assert world.engineers.get("b@example.com").last_dispatched_issue == "TCID-1"
    assert world.engineers.get("a@example.com").last_dispatched_at is None


def test_a_single_least_loaded_candidate_takes_no_turn_at_plan(world):
    open_issues(world, a=0, b=1, carol=1)

    plan(world, balanced())

    assert world.engineers.get("a@example.com").last_dispatched_at is None


def test_a_failed_count_fails_the_plan_naming_whose_and_never_falls_back(world):
    open_issues(world, a=3, b=1, carol=2)
    world.jira.failing_counts.add("acc-carol")

    error, state = plan_fails(world, balanced())

    assert error.code == "plan_failed"
    assert error.message == state["reason"]
    assert state["reason"].startswith("balanced: counting open issues of carol@example.com "
                                      "failed: jira POST /rest/api/2/search/approximate-count "
                                      "failed: HTTP 400")
    assert state["counts"] == {"a@example.com": 3, "b@example.com": 1}  # what was counted
    assert state["assignee"] == ""  # b has the fewest of those counted: not chosen anyway


def test_several_failed_counts_name_every_candidate(world):
    world.jira.failing_counts.update({"acc-a", "acc-carol"})

    error, _ = plan_fails(world, balanced())

    assert "counting open issues of a@example.com failed" in error.message
    assert error.message.endswith("(and for carol@example.com)")


def test_a_candidate_without_a_jira_user_fails_the_plan(world):
    world.jira.users.pop("acc-b")

    error, state = plan_fails(world, balanced())

    assert (error.code, state["reason"]) == ("plan_failed",
                                             "balanced: no Jira user has the email b@example.com")
    assert world.jira.counted == []


def test_a_jira_that_cannot_count_at_all_fails_the_plan(world, monkeypatch):
    monkeypatch.setattr(world.jira, "count_issues", NotConfiguredJira().count_issues)

    error, state = plan_fails(world, balanced())

    assert error.code == "plan_failed"
    assert state["reason"] == ("balanced: counting open issues failed: jira is not configured "
                               "(count_issues)")


def test_shutdown_during_the_counts_propagates_untouched(world, monkeypatch):
    abandoned = CallAbandoned("jira approximate_count: the service is shutting down")

    def shut_down(jqls):
        raise abandoned

    monkeypatch.setattr(world.jira, "count_issues", shut_down)
    run, executor = run_of(world, balanced())

    with pytest.raises(CallAbandoned) as raised:
        executor.plan(run)

    assert raised.value is abandoned


def test_a_group_with_more_candidates_than_balanced_counts_fails_at_plan(world):
    members = [f"e{n}@example.com" for n in range(MAX_CANDIDATES + 1)]
    for email in members:
        world.engineers.put(email, dispatch_enabled=True, now=NOW)
    world.core.groups["big"] = [GroupMember(email) for email in members]
    config = {"receiver": {"type": "group", "group": "big"}, "strategy": "balanced"}

    error, state = plan_fails(world, config)

    assert error.code == "plan_failed"
    assert state["reason"] == ("balanced: group 'big' has 51 dispatch-enabled candidates; "
                               "balanced counts open issues for at most 50")
    assert world.jira.counted == [] and world.jira.writes == []


def test_a_group_at_the_bound_is_counted(world):
    members = [f"e{n}@example.com" for n in range(MAX_CANDIDATES)]
    for email in members:
        world.engineers.put(email, dispatch_enabled=True, now=NOW)
        world.jira.add_user(email)
    world.core.groups["big"] = [GroupMember(email) for email in members]
    world.jira.open_issues.update({f"acc-{e.split('@')[0]}": 1 for e in members})
    world.jira.open_issues["acc-e42"] = 0

    state = plan(world, {"receiver": {"type": "group", "group": "big"}, "strategy": "balanced"})

    assert len(state["counts"]) == 50 and state["assignee"] == "e42@example.com"


def test_assign_l2_balances_the_same_way(world):
    open_issues(world, a=1, b=0, carol=1)
    executor = AssignExecutor(ActionType.ASSIGN_L2)
    jql = "cf[10053] = {account} AND statusCategory != Done"

    run, _ = run_of(world, balanced(count_jql=jql), executor=executor)
    executor.plan(run)
    executor.execute(run)

    assert run.context["assign"]["assignee"] == "b@example.com"
    assert world.jira.counted[1] == 'cf[10053] = "acc-b" AND statusCategory != Done'
    assert world.jira.issues["TCID-1"].l2_assignee.email == "b@example.com"


def test_execute_assigns_the_balanced_choice_without_searching_again(world):
    open_issues(world, a=1, b=1, carol=0)
    run, executor = run_of(world, balanced())
    executor.plan(run)
    searches = len(world.jira.calls("find_user_by_email"))

    executor.execute(run)

    assert world.jira.issues["TCID-1"].assignee.email == "carol@example.com"
    assert len(world.jira.calls("find_user_by_email")) == searches


# -- random --------------------------------------------------------------------------------------


def test_random_assigns_the_drawn_candidate_and_says_so(world):
    rng = Scripted(2)
    executor = AssignExecutor(ActionType.ASSIGN, rng=rng)
    config = {"receiver": {"type": "users", "users": ABC}, "strategy": "random"}

    state = plan(world, config, executor=executor)

    assert rng.asked == [3]
    assert state["assignee"] == "carol@example.com"
    assert state["reason"] == "random: drawn uniformly among 3 candidates"
    assert "counts" not in state and world.jira.writes == []


def test_random_draws_only_among_dispatch_enabled_candidates(world):
    world.engineers.put("b@example.com", dispatch_enabled=False, now=NOW)
    rng = Scripted(1)
    executor = AssignExecutor(ActionType.ASSIGN, rng=rng)
    config = {"receiver": {"type": "users", "users": ABC}, "strategy": "random"}

    state = plan(world, config, executor=executor)

    assert rng.asked == [2] and state["assignee"] == "carol@example.com"


def test_a_dry_run_shows_the_draw_and_takes_no_turn(world):
    executor = AssignExecutor(ActionType.ASSIGN, rng=Scripted(1))
    config = {"receiver": {"type": "users", "users": ABC}, "strategy": "random"}

    state = plan(world, config, executor=executor, mode=ExecutionMode.DRY_RUN)

    assert state["assignee"] == "b@example.com"
    assert all(world.engineers.get(e).last_dispatched_at is None for e in ABC)


def test_random_is_uniform_among_the_candidates(world):
    executor = AssignExecutor(ActionType.ASSIGN, rng=random.Random(18))
    config = {"receiver": {"type": "users", "users": ABC}, "strategy": "random"}

    drawn = [plan(world, config, executor=executor)["assignee"] for _ in range(600)]

    assert {email: drawn.count(email) for email in ABC} == pytest.approx(
        {email: 200 for email in ABC}, abs=40)


def test_the_product_draws_from_the_systems_randomness():
    executor = AssignExecutor(ActionType.ASSIGN)

    assert isinstance(executor._rng, random.SystemRandom)


# -- validation ----------------------------------------------------------------------------------


def policy_with(config: dict, action_type: str = "assign") -> dict:
    return {"name": "p", "trigger": {"project_key_in": ["TCID"]}, "rules": [{
        "name": "r", "priority": 1, "when": {"always": True},
        "then": [{"type": action_type, action_type: config}]}]}


def problems(config: dict, action_type: str = "assign") -> list[tuple[str, str]]:
    found = validate_policy(policy_with(config, action_type), product_registry())
    return [(p.path, p.message) for p in found]


PATH = "rules[0].then[0].assign"


@pytest.mark.parametrize("strategy", ["balanced", "random"])
def test_both_strategies_are_valid_for_both_action_types(strategy):
    for action_type in ("assign", "assign_l2"):
        assert problems({"receiver": {"type": "group", "group": "g"}, "strategy": strategy},
                        action_type) == []


def test_a_balanced_users_list_is_bounded_at_validation():
    users = [f"e{n}@example.com" for n in range(MAX_CANDIDATES + 1)]

    assert problems(balanced(users)) == [(
        f"{PATH}.receiver.users",
        "balanced counts open issues for at most 50 candidates; this list has 51")]
    assert problems(balanced(users[:50])) == []
    assert problems(balanced(users[:50] + ["E0@example.com"])) == []  # the same engineer
    assert problems({"receiver": {"type": "users", "users": users},
                     "strategy": "round_robin"}) == []
    assert problems({**balanced(users[:2]), "fallback": {"type": "users", "users": users}}) == [(
        f"{PATH}.fallback.users",
        "balanced counts open issues for at most 50 candidates; this list has 51")]


@pytest.mark.parametrize("jql,message", [
    ("assignee = currentUser()", "must contain {account}, where each candidate's Jira "
                                 "account goes"),
    ('assignee = "{account}"', "{account} is put in as a quoted JQL string; remove the "
                               "quotes around it"),
    ("assignee = '{account}'", "{account} is put in as a quoted JQL string; remove the "
                               "quotes around it"),
    ("  ", "must not be empty"),
    ("assignee = {account} AND " + "x" * 2000, "is longer than 2000 characters"),
])
def test_a_count_jql_must_count_per_candidate(jql, message):
    assert problems(balanced(count_jql=jql)) == [(f"{PATH}.count_jql", message)]


def test_a_count_jql_belongs_to_balanced_only():
    config = {"receiver": {"type": "user", "user": "a@example.com"}, "strategy": "first",
              "count_jql": DEFAULT_COUNT_JQL}

    assert problems(config) == [(f"{PATH}.count_jql", "is only used by the balanced strategy")]


def test_a_count_jql_that_is_not_a_string_is_a_shape_problem():
    found = validate_policy(policy_with(balanced(count_jql=["assignee = {account}"])),
                            product_registry())

    assert [(p.path, p.kind) for p in found] == [(f"{PATH}.count_jql", "shape")]
