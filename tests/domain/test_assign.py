"""The assign and assign_l2 executors with plain fakes and a real engineer table."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import QueryCounter
from tests.fakes import FakeDirectory, FakeJira, FakeOnCall, bare_ports, issue
from ticket_dispatcher.domain.actions.assign import AssignExecutor
from ticket_dispatcher.domain.actions.base import ActionError, ActionRun
from ticket_dispatcher.domain.catalog import ActionType
from ticket_dispatcher.domain.execution import Execution, ExecutionMode
from ticket_dispatcher.domain.ports import GroupMember, Responder
from ticket_dispatcher.errors import CallAbandoned, IntegrationError, OutcomeUnknown
from ticket_dispatcher.timeutil import format_time

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


@pytest.fixture
def world(sqlite_store):
    jira = FakeJira(issue(labels=("auto-dispatch", "keep")))
    # The field's own write, then the label's: the project's edit screen refuses the one edit
    # (``one_edit`` lifts that, for the tests of the one edit).
    jira.screen_refusing.add("TCID")
    directory = FakeDirectory(groups={"payments": [
        GroupMember("Carol@example.com"), GroupMember("gone@example.com", False),
        GroupMember("a@example.com")]})
    oncall = FakeOnCall(teams={"sre": [Responder("b@example.com"), Responder("a@example.com")]})
    for email in ("a@example.com", "b@example.com", "carol@example.com", "gone@example.com"):
        sqlite_store.engineers.put(email, dispatch_enabled=True, now=NOW)
        jira.add_user(email)
    ports = bare_ports(jira=jira, core=directory, oncall=oncall,
                       engineers=sqlite_store.engineers)
    return ports


def run_of(ports, config: dict, the_issue=None, executor=None, *, now: datetime = NOW,
           mode: ExecutionMode = ExecutionMode.LIVE) -> tuple[ActionRun, AssignExecutor]:
    executor = executor or AssignExecutor(ActionType.ASSIGN)
    the_issue = the_issue or ports.jira.issues["TCID-1"]
    execution = Execution(id=1, trigger_id=1, issue_key=the_issue.key, mode=mode,
                          policy_id=1, policy_family_id="pf_X", policy_version=1,
                          rule_executions=[])
    context = executor.build_context(the_issue, None, config)
    return ActionRun(execution=execution, issue=the_issue, config=config, context=context,
                     now=now, ports=ports, checkpoint=no_checkpoint), executor


def no_checkpoint() -> None:
    """``assign`` never saves mid-step: it is idempotent by reading the issue first."""
    raise AssertionError("assign asked for a checkpoint")


def receiver_config(receiver: dict, strategy: str = "first") -> dict:
    return {"receiver": receiver, "strategy": strategy}


@pytest.mark.parametrize("receiver,candidates", [
    ({"type": "user", "user": "B@Example.com"}, ["b@example.com"]),
    ({"type": "users", "users": ["b@example.com", "a@example.com", "B@example.com"]},
     ["b@example.com", "a@example.com"]),
    ({"type": "group", "group": "payments"}, ["carol@example.com", "a@example.com"]),
    ({"type": "oncall_team", "oncall_team": "sre"}, ["b@example.com", "a@example.com"]),
])
def test_receivers_keep_configured_order_and_drop_duplicates(world, receiver, candidates):
    run, executor = run_of(world, receiver_config(receiver))

    executor.plan(run)

    assert run.context["assign"]["candidates"] == candidates
    assert run.context["assign"]["assignee"] == candidates[0]


def test_disabled_and_unknown_engineers_are_dropped(world):
    world.engineers.put("a@example.com", dispatch_enabled=False, now=NOW)
    run, executor = run_of(world, receiver_config(
        {"type": "users", "users": ["a@example.com", "stranger@example.com", "b@example.com"]}))

    executor.plan(run)

    assert run.context["assign"]["candidates"] == ["b@example.com"]


def test_empty_result_is_no_candidates_with_the_reason_kept(world):
    world.engineers.put("b@example.com", dispatch_enabled=False, now=NOW)
    run, executor = run_of(world, receiver_config({"type": "user", "user": "b@example.com"}))

    with pytest.raises(ActionError) as raised:
        executor.plan(run)

    assert raised.value.code == "no_candidates"
    assert "none of them dispatch-enabled" in run.context["assign"]["reason"]
    assert run.context["assign"]["candidates"] == []


def test_unresolvable_group_is_a_plan_failure(world):
    run, executor = run_of(world, receiver_config({"type": "group", "group": "nope"}))

    with pytest.raises(ActionError) as raised:
        executor.plan(run)

    assert raised.value.code == "plan_failed"
    assert "nope" in run.context["assign"]["reason"]


def test_round_robin_prefers_never_dispatched_then_oldest_then_order(world):
    world.engineers.update_dispatch_state("a@example.com", dispatched_at=NOW, issue_key="X-1",
                                          now=NOW)
    users = {"type": "users", "users": ["a@example.com", "b@example.com"]}
    run, executor = run_of(world, receiver_config(users, "round_robin"))
    executor.plan(run)
    assert run.context["assign"]["assignee"] == "b@example.com"
    assert run.context["assign"]["reason"] == "round_robin: never dispatched before"

    world.engineers.update_dispatch_state("b@example.com", dispatched_at=NOW + timedelta(1),
                                          issue_key="X-2", now=NOW)
    run, executor = run_of(world, receiver_config(users, "round_robin"))
    executor.plan(run)
    assert run.context["assign"]["assignee"] == "a@example.com"
    assert run.context["assign"]["reason"] == "round_robin: oldest last_dispatched_at"


ABC = {"type": "users", "users": ["a@example.com", "b@example.com", "carol@example.com"]}


def planned(ports, config: dict, **options) -> str:
    run, executor = run_of(ports, config, **options)
    executor.plan(run)
    return run.context["assign"]["assignee"]


def test_live_round_robin_takes_the_turn_when_it_plans(world):
    run, executor = run_of(world, receiver_config(ABC, "round_robin"))

    executor.plan(run)

    # advanced before any Jira call, so a concurrent plan already sees it taken
    assert run.context["assign"]["assignee"] == "a@example.com"
    assert run.context["assign"]["reason"] == "round_robin: never dispatched before"
    engineer = world.engineers.get("a@example.com")
    assert (engineer.last_dispatched_at, engineer.last_dispatched_issue) == (NOW, "TCID-1")
    assert world.jira.writes == []
    assert [planned(world, receiver_config(ABC, "round_robin"), now=NOW + timedelta(minutes=i))
            for i in range(1, 4)] == ["b@example.com", "carol@example.com", "a@example.com"]


def test_dry_run_round_robin_plans_without_advancing_the_turn(world):
    config = receiver_config(ABC, "round_robin")

    turns = [planned(world, config, mode=ExecutionMode.DRY_RUN) for _ in range(3)]

    assert turns == ["a@example.com"] * 3
    assert all(world.engineers.get(email).last_dispatched_at is None
               for email in ABC["users"])


def test_first_never_advances_the_turn_when_it_plans(world):
    assert planned(world, receiver_config(ABC)) == "a@example.com"
    assert world.engineers.get("a@example.com").last_dispatched_at is None


def test_a_dispatch_recorded_late_keeps_the_rotation(world):
    # Two executions: the one whose clock read earlier (now=NOW) takes its turn second.
    config = receiver_config(ABC, "round_robin")
    assert planned(world, config, now=NOW + timedelta(seconds=1)) == "a@example.com"
    run, executor = run_of(world, config)
    executor.plan(run)
    executor.execute(run)  # records b's dispatch at NOW, before a's turn

    later = [planned(world, config, now=NOW + timedelta(seconds=i)) for i in (2, 3, 4)]

    assert run.context["assign"]["assignee"] == "b@example.com"
    assert world.jira.issues["TCID-1"].assignee.email == "b@example.com"
    assert later == ["carol@example.com", "a@example.com", "b@example.com"]


def test_a_turns_assignment_landing_after_the_engineers_next_turn_keeps_the_rotation(world):
    # a's turn for TCID-1 is taken first; its Jira write lands only after a has taken its next
    # turn (TCID-4) and b another one: the turns already placed a, and the late record must
    # not move a behind b.
    config = receiver_config(ABC, "round_robin")
    run, executor = run_of(world, config, now=NOW + timedelta(seconds=1))
    executor.plan(run)
    other = world.jira.issues["TCID-1"]
    turns = [planned(world, config, the_issue=replace(other, key=f"TCID-{n}"),
                     now=NOW + timedelta(seconds=n)) for n in (2, 3, 4, 5)]
    executor.execute(replace(run, now=NOW + timedelta(seconds=6)))

    later = [planned(world, config, the_issue=replace(other, key=f"TCID-{n}"),
                     now=NOW + timedelta(seconds=n)) for n in (7, 8, 9)]

    assert run.context["assign"]["assignee"] == "a@example.com"
    assert world.jira.issues["TCID-1"].assignee.email == "a@example.com"
    assert turns == ["b@example.com", "carol@example.com", "a@example.com", "b@example.com"]
    assert later == ["carol@example.com", "a@example.com", "b@example.com"]


def test_a_turn_with_no_dispatch_enabled_candidate_is_no_candidates(world):
    for email in ABC["users"]:
        world.engineers.put(email, dispatch_enabled=False, now=NOW)
    run, executor = run_of(world, receiver_config(ABC, "round_robin"))

    with pytest.raises(ActionError) as raised:
        executor.plan(run)

    assert raised.value.code == "no_candidates"
    assert run.context["assign"]["candidates"] == []
    assert "none of them dispatch-enabled" in run.context["assign"]["reason"]
    assert "turn_taken" not in run.context["assign"]


def test_a_live_turn_reads_its_candidates_in_the_transaction_that_takes_it(world):
    # One read of the engineers with their time off, who may take the issue; then the turn:
    # one read of the eligible, locked, and its one write. The candidates the plan records are
    # the ones the turn chose among.
    run, executor = run_of(world, receiver_config(ABC, "round_robin"))

    with QueryCounter(world.engineers.db) as queries:
        executor.plan(run)

    assert queries.count == 3
    assert run.context["assign"]["candidates"] == ABC["users"]
    assert run.context["assign"]["assignee"] == "a@example.com"


def test_context_is_snapshotted_at_creation_and_filled_in_place_by_plan(world):
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    snapshot = run.context
    assert snapshot["assign"]["assignee"] == "" and snapshot["assign"]["current_assignee"] == ""

    executor.plan(run)

    assert run.context is snapshot and snapshot["assign"]["assignee"] == "a@example.com"


def test_execute_assigns_records_dispatch_and_removes_the_label(world):
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    executor.execute(run)

    jira = world.jira
    assert jira.issues["TCID-1"].assignee.email == "a@example.com"
    assert jira.calls("edit_labels") == [("edit_labels", "TCID-1", (), ("auto-dispatch",))]
    engineer = world.engineers.get("a@example.com")
    assert engineer.last_dispatched_issue == "TCID-1" and engineer.last_dispatched_at == NOW
    assert engineer.jira_account_id == "acc-a"  # cached after the exact-email search


def test_cached_account_id_skips_the_user_search(world):
    world.engineers.put("a@example.com", dispatch_enabled=True, jira_account_id="acc-a",
                        now=NOW)
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    executor.execute(run)

    assert world.jira.calls("find_user_by_email") == []


def test_assign_l2_sets_the_l2_picker_not_the_assignee(world):
    executor = AssignExecutor(ActionType.ASSIGN_L2)
    run, _ = run_of(world, receiver_config({"type": "user", "user": "b@example.com"}),
                    executor=executor)
    executor.plan(run)

    executor.execute(run)

    assert world.jira.issues["TCID-1"].l2_assignee.email == "b@example.com"
    assert world.jira.issues["TCID-1"].assignee is None


def test_jira_refusal_fails_and_leaves_the_engineer_untouched(world):
    world.jira.fail_writes("assign", IntegrationError("jira PUT failed: HTTP 400", status=400,
                                                      service="jira"))
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    with pytest.raises(ActionError, match="HTTP 400"):
        executor.execute(run)

    assert world.engineers.get("a@example.com").last_dispatched_at is None


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_write_refused_by_a_passing_fault_parks_until_its_next_try(world, status):
    world.jira.fail_writes("assign", IntegrationError(
        f"jira PUT failed: HTTP {status}", status=status, service="jira", retry_after=30))
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    result = executor.execute(run)

    assert result.kind.value == "park"
    assert result.until == NOW + timedelta(seconds=30)  # Retry-After over the 5 s backoff
    state = run.context["assign"]
    assert state["retries"] == 1 and f"HTTP {status}" in state["retry_reason"]
    assert "jira_updated" not in state
    assert world.engineers.get("a@example.com").last_dispatched_at is None

    # The wake: the issue read again, the write made once
    run.issue = world.jira.issues["TCID-1"]
    assert executor.execute(run).kind.value == "continue"
    assert len(world.jira.calls("assign")) == 1
    assert world.jira.issues["TCID-1"].assignee.email == "a@example.com"
    assert world.engineers.get("a@example.com").last_dispatched_issue == "TCID-1"


@pytest.mark.parametrize("failure,retried", [
    (IntegrationError("jira GET /user/search failed: HTTP 429", status=429, service="jira",
                      retry_after=20), True),
    (OutcomeUnknown("jira GET /user/search: no answer", service="jira"), True),
    (IntegrationError("jira GET /user/search failed: HTTP 403", status=403, service="jira"),
     False)])
def test_an_account_search_kept_from_jira_by_a_passing_fault_is_made_again(
        world, failure, retried):
    world.jira.fail_writes("find_user_by_email", failure)
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    if not retried:
        with pytest.raises(ActionError, match="HTTP 403"):
            executor.execute(run)
        return
    assert executor.execute(run).kind.value == "park"
    assert "searching Jira for a@example.com" in run.context["assign"]["retry_reason"]
    assert world.jira.calls("assign") == []
    assert executor.execute(run).kind.value == "continue"
    assert world.jira.issues["TCID-1"].assignee.email == "a@example.com"
    assert world.engineers.get("a@example.com").jira_account_id == "acc-a"


def test_a_retried_write_that_landed_is_not_made_again(world):
    world.jira.fail_writes("assign", IntegrationError("jira PUT failed: HTTP 502", status=502,
                                                      service="jira"), applied=True)
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)
    assert executor.execute(run).kind.value == "park"

    run.issue = world.jira.issues["TCID-1"]  # the wake's fresh read: the PUT had landed
    result = executor.execute(run)

    assert result.kind.value == "continue"
    assert len(world.jira.calls("assign")) == 1
    assert run.context["assign"]["jira_outcome"] == "already assigned"


def test_a_retry_never_writes_over_someone_who_set_the_field_meanwhile(world):
    world.jira.fail_writes("assign", IntegrationError("jira PUT failed: HTTP 503", status=503,
                                                      service="jira"))
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)
    assert executor.execute(run).kind.value == "park"
    run.issue = world.jira.put(replace(world.jira.issues["TCID-1"],
                                       assignee=world.jira.users["acc-b"]))

    with pytest.raises(ActionError, match="became b@example.com"):
        executor.execute(run)

    assert world.jira.calls("assign") == []


def test_a_write_past_the_retry_budget_fails_with_the_last_reason(world):
    executor = AssignExecutor(ActionType.ASSIGN, retry_budget=timedelta(minutes=1))
    run, _ = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}),
                    executor=executor)
    executor.plan(run)
    run.context["assign"].update(retries=6, retrying_since=format_time(NOW - timedelta(
        minutes=2)))
    world.jira.fail_writes("assign", IntegrationError("jira PUT failed: HTTP 429", status=429,
                                                      service="jira"))

    with pytest.raises(ActionError, match="HTTP 429.*past the retry budget of 1m"):
        executor.execute(run)


def test_engineer_update_failure_keeps_jira_and_fails_the_action(world, monkeypatch):
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    def broken(*args, **kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(world.engineers, "update_dispatch_state", broken)
    with pytest.raises(ActionError, match="Jira assignment kept"):
        executor.execute(run)

    assert world.jira.issues["TCID-1"].assignee.email == "a@example.com"


def test_label_removal_refused_is_only_logged(world, caplog):
    world.jira.fail_writes("edit_labels", IntegrationError("jira PUT failed: HTTP 400",
                                                           status=400, service="jira"))
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    result = executor.execute(run)

    assert result.kind.value == "continue"
    assert "auto-assign label" in caplog.text


def test_label_removal_met_by_a_passing_fault_is_retried_without_assigning_again(world):
    world.jira.fail_writes("edit_labels", IntegrationError("jira PUT failed: HTTP 429",
                                                           status=429, service="jira"))
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    assert executor.execute(run).kind.value == "park"
    run.issue = world.jira.issues["TCID-1"]
    result = executor.execute(run)

    assert result.kind.value == "continue"
    assert len(world.jira.calls("assign")) == 1
    assert "auto-dispatch" not in world.jira.issues["TCID-1"].labels
    assert run.context["assign"]["label_removed"] == "auto-dispatch"
    assert world.engineers.get("a@example.com").last_dispatched_issue == "TCID-1"


def test_no_jira_user_with_that_email_fails_the_action(world):
    world.engineers.put("new@example.com", dispatch_enabled=True, now=NOW)
    run, executor = run_of(world, receiver_config({"type": "user", "user": "new@example.com"}))
    executor.plan(run)

    with pytest.raises(ActionError, match="no Jira user"):
        executor.execute(run)


# --- the one edit: the field and the label together -----------------------------------------


def one_edit(ports) -> FakeJira:
    """The project's edit screen has the field: the one edit is allowed."""
    ports.jira.screen_refusing.clear()
    return ports.jira


@pytest.mark.parametrize("action_type,field,l2", [
    (ActionType.ASSIGN, "assignee", False),
    (ActionType.ASSIGN_L2, "l2_assignee", True),
])
def test_the_field_and_the_label_are_written_in_one_edit(world, action_type, field, l2):
    jira = one_edit(world)
    executor = AssignExecutor(action_type)
    run, _ = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}),
                    executor=executor)
    executor.plan(run)

    executor.execute(run)

    assert jira.writes[1:] == [("assign_and_label", "TCID-1", "acc-a", ("auto-dispatch",), l2)]
    assert getattr(jira.issues["TCID-1"], field).email == "a@example.com"
    assert jira.issues["TCID-1"].labels == ("keep",)
    assert run.context["assign"]["label_removed"] == "auto-dispatch"
    assert world.engineers.get("a@example.com").last_dispatched_issue == "TCID-1"


def test_without_the_label_the_field_is_written_by_its_own_endpoint(world):
    jira = one_edit(world)
    jira.put(replace(jira.issues["TCID-1"], labels=("keep",)))
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    executor.execute(run)

    assert jira.writes[1:] == [("assign", "TCID-1", "acc-a")]


def test_a_refusing_edit_screen_writes_the_field_then_the_label_each_once(world):
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    executor.execute(run)

    assert world.jira.writes[1:] == [("assign", "TCID-1", "acc-a"),
                                     ("edit_labels", "TCID-1", (), ("auto-dispatch",))]


def test_a_one_edit_with_its_answer_lost_is_confirmed_and_never_made_again(world):
    jira = one_edit(world)
    jira.fail_writes("assign_and_label", OutcomeUnknown("jira PUT: no answer within 10 s",
                                                        service="jira"), applied=True)
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    result = executor.execute(run)

    assert result.kind.value == "continue"
    assert jira.loads == ["TCID-1"]  # read before anything is written again
    assert [w[0] for w in jira.writes[1:]] == ["assign_and_label"]  # and nothing was
    assert run.context["assign"]["jira_outcome"] == "unknown; confirmed by re-reading the issue"
    assert run.context["assign"]["label_removed"] == "auto-dispatch"


def test_a_one_edit_refused_by_a_passing_fault_parks_and_its_wake_writes_once(world):
    jira = one_edit(world)
    jira.fail_writes("assign_and_label", IntegrationError("jira answered 503", status=503,
                                                          service="jira"))
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)

    assert executor.execute(run).kind.value == "park"
    woken, _ = run_of(world, run.config, the_issue=jira.issues["TCID-1"], executor=executor,
                      now=NOW + timedelta(minutes=1))
    woken.context = run.context
    executor.execute(woken)

    assert [w[0] for w in jira.writes[1:]] == ["assign_and_label"]
    assert jira.issues["TCID-1"].labels == ("keep",)


# --- an unknown outcome is decided by re-reading the issue ---------------------------------


def write_then_lose_the_answer(ports, method: str, lands: bool,
                               error: Exception | None = None) -> None:
    """``jira.<method>`` takes effect (or not) but its caller never hears back."""
    real = getattr(ports.jira, method)

    def write(key, account_id):
        if lands:
            real(key, account_id)
        raise error or OutcomeUnknown("jira PUT: no answer within 10 s", service="jira")

    setattr(ports.jira, method, write)


@pytest.mark.parametrize("action_type,method,field", [
    (ActionType.ASSIGN, "assign", "assignee"),
    (ActionType.ASSIGN_L2, "set_l2_assignee", "l2_assignee"),
])
def test_unknown_outcome_confirmed_by_rereading_is_a_success(world, action_type, method,
                                                              field):
    executor = AssignExecutor(action_type)
    run, _ = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}),
                    executor=executor)
    executor.plan(run)
    write_then_lose_the_answer(world, method, lands=True)

    result = executor.execute(run)

    assert result.kind.value == "continue"
    assert getattr(world.jira.issues["TCID-1"], field).email == "a@example.com"
    assert world.jira.loads == ["TCID-1"]  # the re-read
    assert run.context["assign"]["jira_outcome"] == "unknown; confirmed by re-reading the issue"
    engineer = world.engineers.get("a@example.com")
    assert engineer.last_dispatched_issue == "TCID-1" and engineer.last_dispatched_at == NOW
    assert run.context["assign"]["label_removed"] == "auto-dispatch"


def test_unknown_outcome_with_someone_else_assigned_fails_without_dispatch_state(world):
    world.jira.put(replace(world.jira.issues["TCID-1"],
                           assignee=world.jira.users["acc-b"]))  # someone else, meanwhile
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}),
                           the_issue=issue(labels=("auto-dispatch",)))
    executor.plan(run)
    write_then_lose_the_answer(world, "assign", lands=False)

    with pytest.raises(ActionError) as raised:
        executor.execute(run)

    message = raised.value.message
    assert "unknown outcome" in message and "no answer within 10 s" in message
    assert "assignee is b@example.com, not a@example.com" in message
    assert world.engineers.get("a@example.com").last_dispatched_at is None
    assert "jira_outcome" not in run.context["assign"]


def test_unknown_outcome_with_a_refused_reread_fails_saying_so(world):
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)
    write_then_lose_the_answer(world, "assign", lands=True)
    world.jira.fail_next("TCID-1", status=403)

    with pytest.raises(ActionError) as raised:
        executor.execute(run)

    assert "unknown outcome" in raised.value.message
    assert "re-reading the issue failed too: jira answered 403" in raised.value.message
    assert world.engineers.get("a@example.com").last_dispatched_at is None


def test_unknown_outcome_not_landed_is_tried_again_after_another_read(world):
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)
    write_then_lose_the_answer(world, "assign", lands=False)

    result = executor.execute(run)

    assert result.kind.value == "park"
    assert "unknown outcome" not in run.context["assign"].get("jira_outcome", "")
    assert world.engineers.get("a@example.com").last_dispatched_at is None


@pytest.mark.parametrize("action_type,method,field", [
    (ActionType.ASSIGN, "assign", "assignee"),
    (ActionType.ASSIGN_L2, "set_l2_assignee", "l2_assignee"),
])
def test_a_resumed_execution_whose_put_landed_does_not_assign_again(world, action_type, method,
                                                                   field):
    # The issue as loaded when the execution actor restarted: the first PUT had landed.
    loaded = world.jira.put(replace(world.jira.issues["TCID-1"],
                                    **{field: world.jira.users["acc-a"]}))
    executor = AssignExecutor(action_type)
    run, _ = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}),
                    the_issue=loaded, executor=executor)
    executor.plan(run)

    result = executor.execute(run)

    assert result.kind.value == "continue"
    assert world.jira.calls(method) == []
    assert run.context["assign"]["jira_outcome"] == "already assigned"
    assert world.engineers.get("a@example.com").last_dispatched_issue == "TCID-1"


@pytest.mark.parametrize("during", ["write", "reread"])
def test_call_abandoned_at_shutdown_propagates_untouched(world, during, monkeypatch):
    run, executor = run_of(world, receiver_config({"type": "user", "user": "a@example.com"}))
    executor.plan(run)
    abandoned = CallAbandoned("jira assign: the service is shutting down")
    if during == "write":
        write_then_lose_the_answer(world, "assign", lands=False, error=abandoned)
    else:
        write_then_lose_the_answer(world, "assign", lands=False)

        def reread(key):
            raise abandoned

        monkeypatch.setattr(world.jira, "load_issue", reread)

    with pytest.raises(CallAbandoned) as raised:
        executor.execute(run)

    assert raised.value is abandoned
    assert world.engineers.get("a@example.com").last_dispatched_at is None
    assert "jira_updated" not in run.context["assign"]
