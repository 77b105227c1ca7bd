"""``escalate_assignment_to_leader`` through the behavior with plain fakes: one hop, intent
before the Jira write, reconcile by owner only, no Grand Leader."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.clocks import ManualClock
from tests.domain.test_notification_card import ALICE, BOB, SEND, SEVERITY, Crash, Crashing
from tests.domain.test_notification_page import POLL, TIMEOUT, PageWorld, page
from tests.fakes import FakeContexts
from ticket_dispatcher.domain.actions.escalation_slot import slot_verdict
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    Execution,
    ExecutionMode,
    ExecutionStatus,
    build_rule_executions,
)
from ticket_dispatcher.domain.model import JiraUser, Policy, PolicyStatus, PolicyTrigger, Rule
from ticket_dispatcher.domain.observations import summarize
from ticket_dispatcher.domain.ports import DirectoryUser, Ports
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown

CAROL = JiraUser("acc-carol", "carol@example.com", "Carol")
DAVE = JiraUser("acc-dave", "dave@example.com", "Dave")
ESCALATE = {"type": "escalate_assignment_to_leader"}


def _execution(execution_id: int = 7) -> Execution:
    now = ManualClock().now()
    rules = (Rule(id=1, name="send", priority=10, when={"always": True}, then=[SEND],
                  on_success=OnSuccess.CONTINUE),
             Rule(id=2, name="urgent", priority=20, when=SEVERITY,
                  then=[{"type": "mark_assignment_message_urgent"}, page(1), ESCALATE],
                  on_success=OnSuccess.TERMINATE))
    policy = Policy(id=1, family_id="pf_TEST", version=1, status=PolicyStatus.ACTIVE,
                    name="p", description="", trigger=PolicyTrigger(), rules=rules,
                    created_at=now, updated_at=now)
    return Execution(id=execution_id, trigger_id=1, issue_key="TCID-1", mode=ExecutionMode.LIVE,
                     policy_id=1, policy_family_id="pf_TEST", policy_version=1,
                     rule_executions=build_rule_executions(policy),
                     live_lock_key="TCID-1#pf")


class EscalateWorld(PageWorld):
    """Card, urgent, one page with its wait, then the escalation; Alice's leader is Bob,
    Bob's is Carol (the Grand Leader)."""

    def __init__(self, the_issue=None):
        super().__init__(the_issue)
        self.contexts = FakeContexts()
        self.execution = _execution()
        self.core.users.update({u.email: DirectoryUser(u.email, u.display_name)
                                for u in (ALICE, BOB, CAROL, DAVE)})
        self.core.leaders.update({"alice@example.com": "bob@example.com",
                                  "bob@example.com": "carol@example.com",
                                  "dave@example.com": "carol@example.com"})
        for user in (ALICE, BOB, CAROL, DAVE):
            self.jira.users[user.account_id] = user

    def ports(self, **override) -> Ports:
        return super().ports(**{"contexts": self.contexts, **override})

    def finish(self, ex: Execution | None = None, **ports) -> Execution:
        """Run through the page's whole wait (no ACK) to the end."""
        ex = self.run(ex, **ports)
        for _ in range(TIMEOUT // POLL):
            if ex.status.terminal:
                break
            ex = self.advance(POLL, ex, **ports)
        return ex

    def slot(self) -> dict | None:
        return self.contexts.slot("TCID-1", "assignee")

    def role_writes(self) -> list[tuple]:
        return self.jira.calls("assign") + self.jira.calls("set_l2_assignee")


def escalation(ex: Execution) -> dict:
    return ex.rule_executions[1].action_executions[2].context["escalation"]


def applied(frm: str, to: str, owner: int = 7) -> dict:
    return {"escalation_intent": {"owner_execution_id": owner, "from_account_id": frm,
                                  "to_account_id": to, "to_email": f"{to[4:]}@example.com",
                                  "state": "applied"},
            "auto_escalated_to_account_id": to}


def prepared(frm: str, to: str, owner: int) -> dict:
    slot = applied(frm, to, owner)
    slot["escalation_intent"]["state"] = "prepared"
    slot["auto_escalated_to_account_id"] = None
    return slot


# -- one hop ------------------------------------------------------------------------------------


def test_three_timeouts_escalate_only_to_the_direct_leader_intent_first():
    world = EscalateWorld()

    ex = world.finish()

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert world.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert world.slot() == applied("acc-alice", "acc-bob")
    # the intent was stored prepared before the write, then applied with the marker
    assert [u[2]["escalation_intent"]["state"] for u in world.contexts.updates] == [
        "prepared", "applied"]
    context = escalation(ex)
    assert (context["outcome"], context["leader"]) == (
        "escalated", {"email": "bob@example.com", "account_id": "acc-bob"})
    assert world.jira.calls("edit_labels")[-1] == ("edit_labels", "TCID-1", ("notify-assignee",),
                                                   ())
    assert world.triggers.ensured == [("jira_assignment_assignee", "TCID-1")]


def test_the_hop_is_logged_with_its_from_and_to_accounts(caplog):
    caplog.set_level("INFO", logger="ticket_dispatcher.notification")
    world = EscalateWorld()

    world.finish()

    [hop] = [r for r in caplog.records if r.getMessage() == "escalated to the direct leader"]
    assert (hop.escalation_from, hop.escalation_to, hop.role, hop.issue_key) == (
        "acc-alice", "acc-bob", "assignee", "TCID-1")


def test_l2_role_escalation_writes_the_l2_field_into_its_own_slot():
    world = EscalateWorld()
    world.execution = _execution()
    send = world.execution.rule_executions[0].action_executions[0]
    send.config["role"], send.config["label"] = "l2_assignee", "notify-l2-assignee"
    world.jira.put(replace(world.jira.issues["TCID-1"], assignee=None, l2_assignee=ALICE,
                           labels=("notify-l2-assignee",)))

    ex = world.finish()

    assert escalation(ex)["outcome"] == "escalated"
    assert world.role_writes() == [("set_l2_assignee", "TCID-1", "acc-bob")]
    assert world.contexts.slot("TCID-1", "l2_assignee") == applied("acc-alice", "acc-bob")
    assert world.slot() is None
    assert world.triggers.ensured == [("jira_assignment_l2_assignee", "TCID-1")]


@pytest.mark.parametrize("setup,reason", [
    (lambda w: w.core.leaders.pop("alice@example.com"), "no direct leader"),
    (lambda w: w.core.users.update({"bob@example.com": DirectoryUser("bob@example.com",
                                                                     active=False)}),
     "the leader is inactive"),
    (lambda w: w.core.leaders.update({"alice@example.com": "alice@example.com"}),
     "the leader is the target"),
    (lambda w: w.jira.users.pop("acc-bob"), "the leader has no Jira account"),
])
def test_empty_inactive_self_or_unmapped_leader_writes_nothing_to_jira(setup, reason):
    world = EscalateWorld()
    setup(world)

    ex = world.finish()

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert (escalation(ex)["outcome"], escalation(ex)["reason"]) == ("no_leader", reason)
    assert escalation(ex)["warnings"]
    assert world.role_writes() == [] and world.contexts.updates == []
    assert world.triggers.ensured == []
    # by design, not a failure: the metrics count the escalation skipped
    assert escalation_result(ex) == "skipped"


def escalation_result(ex: Execution) -> str:
    """The ``result`` the metrics count for the escalation of this finished execution."""
    summary = summarize(ex)
    assert summary is not None
    [result] = [r for action, r, _ in summary.actions if action == ESCALATE["type"]]
    return result


class FailingLookup:
    """A port whose ``method`` raises ``failure``, everything else as ``port`` answers."""

    def __init__(self, port, method: str, failure: Exception):
        self._port, self._method, self._failure = port, method, failure

    def __getattr__(self, name):
        if name == self._method:
            def refuse(*args, **kwargs):
                raise self._failure
            return refuse
        return getattr(self._port, name)


@pytest.mark.parametrize("port,method,failure", [
    ("core", "leader", IntegrationError("core GET /users/x/leader: HTTP 500", status=500,
                                        service="core")),
    ("core", "leader", OutcomeUnknown("core read timed out", service="core")),
    ("jira", "find_user_by_email", IntegrationError("jira user search: HTTP 503", status=503,
                                                    service="jira")),
], ids=["core-500", "core-timeout", "jira-search-503"])
def test_a_failed_leader_lookup_is_its_own_failed_outcome_not_no_leader(port, method, failure,
                                                                        caplog):
    caplog.set_level("INFO", logger="ticket_dispatcher.notification")
    world = EscalateWorld()
    failing = FailingLookup(getattr(world, port), method, failure)

    ex = world.finish(**{port: failing})

    context = escalation(ex)
    assert context["outcome"] == "leader_lookup_failed"
    assert context["reason"] == f"the leader could not be looked up ({failure.message})"
    assert context["warnings"] == [f"escalation: {context['reason']}; Jira not changed"]
    # nothing written, nothing woken, and the workflow still ends as a finished execution
    assert world.role_writes() == [] and world.contexts.updates == []
    assert world.triggers.ensured == []
    assert ex.status is ExecutionStatus.SUCCEEDED
    # the action itself failed, as its metric says (what TicketDispatcherLeaderEscalationFailed
    # sees): the execution going on to its end is another matter
    action = ex.rule_executions[1].action_executions[2]
    assert (action.status, action.error) == (
        ActionStatus.FAILED, f"escalation leader_lookup_failed: {context['reason']}")
    assert escalation_result(ex) == "failed"
    [line] = [r for r in caplog.records if "escalation" in r.getMessage()]
    assert (line.getMessage(), line.levelname, line.reason) == (
        "escalation leader lookup failed", "WARNING", context["reason"])


def test_ack_before_the_escalation_terminates_without_a_write():
    world = EscalateWorld()
    ex = world.run()
    world.clock.advance(TIMEOUT - 1)
    ex = world.run(ex)  # still waiting
    world.jira.put(replace(world.jira.issues["TCID-1"], status="In Progress"))
    # the page's last poll sees the ACK: the escalation is skipped
    ex = world.finish(ex)

    assert world.role_writes() == [] and world.contexts.updates == []


# -- no Grand Leader ---------------------------------------------------------------------------


def test_leaders_own_workflow_never_goes_on_to_the_grand_leader():
    world = EscalateWorld()
    world.finish()
    leader_world = EscalateWorld(replace(world.jira.issues["TCID-1"], severity="S1"))
    leader_world.contexts = world.contexts
    leader_world.execution = _execution(8)

    ex = leader_world.finish()

    assert len(leader_world.oncall.pages) == 1  # B is still notified and paged
    assert (escalation(ex)["outcome"], escalation(ex)["reason"]) == ("blocked",
                                                                    "no_grand_leader")
    assert leader_world.role_writes() == []
    assert world.slot() == applied("acc-alice", "acc-bob")  # kept: B is urgent again later


def test_manual_change_to_a_different_target_clears_the_marker_and_allows_one_hop():
    world = EscalateWorld(replace(EscalateWorld().jira.issues["TCID-1"], assignee=DAVE))
    world.contexts.states["TCID-1"] = {"assignee": applied("acc-alice", "acc-bob")}
    world.lark.open_ids["dave@example.com"] = "ou_dave"

    ex = world.finish()

    assert escalation(ex)["outcome"] == "escalated"
    assert world.role_writes() == [("assign", "TCID-1", "acc-carol")]
    assert world.slot() == applied("acc-dave", "acc-carol")


def test_non_owner_meeting_a_pending_intent_fails_closed():
    world = EscalateWorld()
    world.contexts.states["TCID-1"] = {"assignee": prepared("acc-alice", "acc-bob", owner=99)}

    ex = world.finish()

    assert (escalation(ex)["outcome"], escalation(ex)["reason"]) == ("blocked",
                                                                    "pending_intent")
    assert escalation(ex)["warnings"]
    assert world.role_writes() == [] and world.jira.calls("find_user_by_email") == []
    assert world.slot() == prepared("acc-alice", "acc-bob", owner=99)


def test_non_owner_seeing_the_intent_already_applied_in_jira_completes_the_marker():
    """The owner's write landed but its marker checkpoint failed: B's workflow
    completes the marker and never writes C."""
    world = EscalateWorld(replace(EscalateWorld().jira.issues["TCID-1"], assignee=BOB))
    world.contexts.states["TCID-1"] = {"assignee": prepared("acc-alice", "acc-bob", owner=99)}

    ex = world.finish()

    assert (escalation(ex)["outcome"], escalation(ex)["reason"]) == ("blocked",
                                                                    "no_grand_leader")
    assert world.role_writes() == []
    assert world.slot() == applied("acc-alice", "acc-bob", owner=99)


# -- reconcile after a crash ------------------------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_crash_around_the_jira_write_is_reconciled_by_the_owner_without_a_new_leader(when):
    world = EscalateWorld()
    crashing = Crashing(world.jira, "assign", when)
    with pytest.raises(Crash):
        world.finish(jira=crashing)
    assert world.slot()["escalation_intent"]["state"] == "prepared"
    world.core.leaders["alice@example.com"] = "dave@example.com"  # never asked again

    ex = world.finish(world.restart())

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert escalation(ex)["outcome"] == "escalated"
    assert world.jira.issues["TCID-1"].assignee == BOB
    assert world.role_writes() == [("assign", "TCID-1", "acc-bob")]  # once, either way
    assert world.slot() == applied("acc-alice", "acc-bob")


def test_reconcile_of_an_intent_whose_target_changed_meanwhile_abandons_it():
    world = EscalateWorld()
    with pytest.raises(Crash):
        world.finish(jira=Crashing(world.jira, "assign", "before"))
    world.jira.put(replace(world.jira.issues["TCID-1"], assignee=DAVE))  # a manual change

    ex = world.finish(world.restart())

    assert (escalation(ex)["outcome"], world.role_writes()) == ("superseded", [])
    assert world.slot() == {"escalation_intent": None, "auto_escalated_to_account_id": None}
    assert world.jira.issues["TCID-1"].assignee == DAVE


def _crash_once_the_marker_is_stored(world: EscalateWorld) -> None:
    """The process dies right after the slot says applied, before the execution saves it."""
    stored = world.contexts.update_notification_slot

    def update(issue_key, role, mutate, now):
        answer = stored(issue_key, role, mutate, now)
        if (world.contexts.slot(issue_key, role) or {}).get("auto_escalated_to_account_id"):
            world.contexts.update_notification_slot = stored
            raise Crash("after the marker")
        return answer

    world.contexts.update_notification_slot = update
    with pytest.raises(Crash):
        world.finish()
    assert world.slot() == applied("acc-alice", "acc-bob")


def test_an_applied_marker_not_yet_saved_by_its_owner_completes_the_wake_up_on_restart():
    world = EscalateWorld()
    _crash_once_the_marker_is_stored(world)

    ex = world.finish(world.restart())

    assert escalation(ex)["outcome"] == "escalated"
    assert world.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert world.triggers.ensured == [("jira_assignment_assignee", "TCID-1")]


def test_an_applied_hop_reverted_by_hand_before_the_restart_is_never_written_again():
    world = EscalateWorld()
    _crash_once_the_marker_is_stored(world)
    world.jira.put(replace(world.jira.issues["TCID-1"], assignee=ALICE))  # put back by hand

    ex = world.finish(world.restart())

    assert escalation(ex)["outcome"] == "superseded"
    assert world.role_writes() == [("assign", "TCID-1", "acc-bob")]  # the one write only
    assert world.jira.issues["TCID-1"].assignee == ALICE


def test_crash_during_the_wake_up_redoes_it_on_restart_without_a_second_write():
    world = EscalateWorld()
    with pytest.raises(Crash):
        world.finish(jira=Crashing(world.jira, "edit_labels", "before", nth=2))

    ex = world.finish(world.restart())

    assert escalation(ex)["outcome"] == "escalated"
    assert world.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert world.triggers.ensured == [("jira_assignment_assignee", "TCID-1")]


class RefusingWrites:
    """The world's Jira, whose role writes raise ``failures`` one by one before they land."""

    def __init__(self, jira, *failures):
        self.jira, self.failures = jira, list(failures)

    def __getattr__(self, name):
        return getattr(self.jira, name)

    def assign(self, key, account_id):
        if self.failures:
            raise self.failures.pop(0)
        self.jira.assign(key, account_id)


def test_a_role_write_refused_for_good_drops_the_intent():
    world = EscalateWorld()
    refused = IntegrationError("jira answered 400", status=400, service="jira")

    ex = world.finish(jira=RefusingWrites(world.jira, refused))

    assert escalation(ex)["outcome"] == "failed" and escalation(ex)["warnings"]
    assert world.slot()["escalation_intent"] is None
    assert world.jira.issues["TCID-1"].assignee == ALICE


@pytest.mark.parametrize("failure", [
    IntegrationError("jira answered 429", status=429, service="jira", retry_after=20),
    IntegrationError("jira answered 503", status=503, service="jira"),
    OutcomeUnknown("jira timed out", service="jira")], ids=["429", "503", "no answer"])
def test_a_role_write_kept_from_jira_by_a_passing_fault_is_tried_again_and_made_once(failure):
    """The intent stays prepared while the action waits; each try reads the role first, and
    the write that lands is the only one."""
    world = EscalateWorld()
    jira = RefusingWrites(world.jira, failure, failure)

    ex = world.finish(jira=jira)

    assert not ex.status.terminal
    assert escalation(ex)["retries"] == 1 and "escalation" in escalation(ex)["retry_reason"]
    assert world.slot()["escalation_intent"]["state"] == "prepared"
    assert world.jira.issues["TCID-1"].assignee == ALICE
    for _ in range(20):
        if ex.status.terminal:
            break
        ex = world.advance(POLL, ex, jira=jira)

    assert escalation(ex)["outcome"] == "escalated" and escalation(ex)["retries"] == 2
    assert world.role_writes() == [("assign", "TCID-1", "acc-bob")]
    assert world.jira.issues["TCID-1"].assignee == BOB
    assert world.slot()["escalation_intent"]["state"] == "applied"


def test_a_role_write_refused_past_the_retry_budget_drops_the_intent():
    world = EscalateWorld()
    jira = RefusingWrites(world.jira, *[IntegrationError("jira answered 503", status=503,
                                                          service="jira")] * 100)

    ex = world.finish(jira=jira)
    for _ in range(100):
        if ex.status.terminal:
            break
        ex = world.advance(300, ex, jira=jira)

    assert escalation(ex)["outcome"] == "failed"
    assert "503" in escalation(ex)["reason"]
    assert world.slot()["escalation_intent"] is None
    assert world.jira.issues["TCID-1"].assignee == ALICE


# -- the slot verdict ---------------------------------------------------------------------------


def test_slot_verdict_blocks_a_second_hop_and_clears_what_is_about_someone_else():
    assert slot_verdict(None, "acc-alice") == (None, "go")
    assert slot_verdict(applied("acc-alice", "acc-bob"), "acc-bob")[1] == "no_grand_leader"
    assert slot_verdict(applied("acc-alice", "acc-bob"), "acc-dave") == (None, "go")
    assert slot_verdict(prepared("acc-alice", "acc-bob", 9), "acc-alice")[1] == \
        "pending_intent"
    assert slot_verdict(prepared("acc-alice", "acc-bob", 9), "acc-bob") == (
        applied("acc-alice", "acc-bob", 9), "no_grand_leader")
