"""``send_assignment_notification`` through the behavior with plain fakes: the snapshot, the
card phases, the comment, the guarded label consume and recovery from a crash at every external
call."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from tests.clocks import ManualClock
from tests.fakes import (
    FakeContexts,
    FakeDirectory,
    FakeJira,
    FakeLark,
    FakeTriggers,
    MemoryCheckpoints,
    NotConfiguredTriggers,
    RecordingAction,
    bare_ports,
    issue,
)
from ticket_dispatcher.domain.actions.base import ActionRegistry
from ticket_dispatcher.domain.actions.notification import validate_page_config
from ticket_dispatcher.domain.actions.registry import product_registry
from ticket_dispatcher.domain.behavior import Behavior, StepKind
from ticket_dispatcher.domain.catalog import OnSuccess
from ticket_dispatcher.domain.execution import (
    ActionStatus,
    Execution,
    ExecutionMode,
    ExecutionStatus,
    build_rule_executions,
)
from ticket_dispatcher.domain.model import JiraUser, Policy, PolicyStatus, PolicyTrigger, Rule
from ticket_dispatcher.domain.ports import DirectoryUser, Ports
from ticket_dispatcher.errors import IntegrationError, OutcomeUnknown

ALICE = JiraUser("acc-alice", "alice@example.com", "Alice")
BOB = JiraUser("acc-bob", "bob@example.com", "Bob")
LABEL = "notify-assignee"
SEVERITY = {"field": "issue.custom_fields.severity", "operator": "in",
            "values": ["S1", "S2", "S1 - Service Unavailable", "S2 - Significant Impact"]}
SEND = {"type": "send_assignment_notification",
        "send_assignment_notification": {"role": "assignee", "label": LABEL}}
PAGE = {"type": "page_assignment", "page_assignment": {
    "attempt": 1, "ack_pending_statuses": ["WAITING FOR FIRST RESPONSE"],
    "ack_timeout": "5m", "poll_interval": "5s"}}


class Crash(Exception):
    """The process died here (not a business outcome: nothing catches it)."""


def notification_issue(**overrides):
    values = dict(assignee=ALICE, labels=(LABEL,), severity="S3", priority=None,
                  status="WAITING FOR FIRST RESPONSE")
    values.update(overrides)
    return issue(**values)


class World:
    """One execution of a Severity Assignee policy on the real behavior; the page
    action is a recording stand-in."""

    def __init__(self, the_issue=None):
        self.clock = ManualClock()
        self.jira = FakeJira(the_issue or notification_issue())
        self.lark = FakeLark({"alice@example.com": "ou_alice", "bob@example.com": "ou_bob"})
        self.core = FakeDirectory()
        self.triggers = FakeTriggers()
        self.contexts = FakeContexts()
        self.page = RecordingAction("page_assignment", config_check=validate_page_config)
        self.checkpoints = MemoryCheckpoints()
        registry = product_registry()
        registry.register(self.page)
        self.registry: ActionRegistry = registry
        self.execution = _execution()

    def ports(self, **override) -> Ports:
        ports = dict(jira=self.jira, lark=self.lark, core=self.core, triggers=self.triggers,
                     contexts=self.contexts)
        ports.update(override)
        return bare_ports(**ports)

    def run(self, ex: Execution | None = None, **ports) -> Execution:
        """Drive to the end (or a park); a fresh Behavior each time, as after a restart."""
        ex = ex or self.execution
        behavior = Behavior(self.registry, self.checkpoints, self.clock.now, self.ports(**ports))
        snapshot = self.jira.issues["TCID-1"]  # what RunExecution loads at (re)start
        for _ in range(100):
            if behavior.step(ex, snapshot).kind is not StepKind.ADVANCED:
                return ex
        raise AssertionError("execution did not settle")

    def restart(self) -> Execution:
        """Reload the execution as last persisted (what boot recovery sees)."""
        return copy.deepcopy(self.checkpoints.last)

    def comments(self) -> list[str]:
        return [text for _, _, text in self.jira.calls("add_internal_comment")]


def _execution() -> Execution:
    now = ManualClock().now()
    rules = (Rule(id=1, name="send-assignment-notification", priority=10, when={"always": True},
                  then=[SEND], on_success=OnSuccess.CONTINUE),
             Rule(id=2, name="urgent-assignment-notification", priority=20, when=SEVERITY,
                  then=[{"type": "mark_assignment_message_urgent"}, PAGE],
                  on_success=OnSuccess.TERMINATE))
    policy = Policy(id=1, family_id="pf_TEST", version=1, status=PolicyStatus.ACTIVE,
                    name="p", description="", trigger=PolicyTrigger(), rules=rules,
                    created_at=now, updated_at=now)
    return Execution(id=7, trigger_id=1, issue_key="TCID-1", mode=ExecutionMode.LIVE,
                     policy_id=1, policy_family_id="pf_TEST", policy_version=1,
                     rule_executions=build_rule_executions(policy), live_lock_key="TCID-1#pf")


def card_context(ex: Execution) -> dict:
    return ex.rule_executions[0].action_executions[0].context["notification"]


class Crashing:
    """A port that dies once, ``before`` or ``after`` the real call of ``method``."""

    def __init__(self, port, method: str, when: str, nth: int = 1):
        self._port, self._method, self._when, self._left = port, method, when, nth

    def __getattr__(self, name):
        real = getattr(self._port, name)
        if name != self._method:
            return real

        def call(*args, **kwargs):
            self._left -= 1
            if self._left == 0 and self._when == "before":
                raise Crash(name)
            answer = real(*args, **kwargs)
            if self._left == 0:
                raise Crash(name)
            return answer
        return call


# -- plan ---------------------------------------------------------------------------------------


def test_plan_persists_the_snapshot_before_any_external_call():
    world = World()
    world.lark.fail["send_card"] = [Crash("send")]  # the first external write

    with pytest.raises(Crash):
        world.run()

    planned = next(saved for saved in world.checkpoints.saved
                   if saved.rule_executions[0].action_executions[0].planned_at)
    context = card_context(planned)
    assert context["snapshot"] == {
        "role": "assignee", "label": LABEL, "project": "TCID",
        "target": {"account_id": "acc-alice", "email": "alice@example.com",
                   "display_name": "Alice", "active": True},
        "urgency": {"field": "issue.custom_fields.severity", "value": "S3", "urgent": False},
        "status": "WAITING FOR FIRST RESPONSE", "summary": "Payment page is down"}
    assert context["card_phase"] == "prepared" and context["card_uuid"] == "td-7-0-0"
    assert world.jira.writes == [] and world.lark.sends == []


# -- the normal workflow ----------------------------------------------------------------------


def test_normal_ticket_gets_one_card_one_comment_and_the_label_consumed():
    world = World()

    ex = world.run()

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert [(o, u) for o, _, u in world.lark.sends] == [("ou_alice", "td-7-0-0")]
    assert world.comments() == ["[ticket-manager] Assignment notification sent\n"
                                "Target: Alice (alice@example.com)\nUrgent: no"]
    assert LABEL not in world.jira.issues["TCID-1"].labels
    context = card_context(ex)
    assert "warnings" not in context
    assert (context["card_status"], context["message_id"], context["target_lark_id"],
            context["notification_comment_status"], context["label_phase"], context["outcome"]
            ) == ("sent", "om_td-7-0-0", "ou_alice", "written", "removed", "sent")
    assert world.triggers.ensured == [] and world.lark.urgents == []
    assert [a.status for a in ex.rule_executions[1].action_executions] == [
        ActionStatus.SKIPPED, ActionStatus.SKIPPED]


def test_core_open_id_is_preferred_over_a_lark_lookup():
    world = World()
    world.core.users["alice@example.com"] = DirectoryUser("alice@example.com", open_id="ou_core")
    world.lark.fail["open_ids_by_email"] = [IntegrationError("never asked")]

    world.run()

    assert world.lark.sends[0][0] == "ou_core"


@pytest.mark.parametrize("failure,status", [
    (IntegrationError("lark answered 500", status=500, service="lark"), "failed"),
    (OutcomeUnknown("lark read timed out", service="lark"), "unknown")])
def test_card_failure_is_completed_with_warning_without_a_comment(failure, status):
    world = World()
    world.lark.fail["send_card"] = [failure]

    ex = world.run()

    context = card_context(ex)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert (context["card_status"], context["outcome"]) == (status, "completed_with_warning")
    assert "message_id" not in context and context["warnings"]
    assert world.comments() == []  # no "sent" comment for a card that was not sent
    assert LABEL not in world.jira.issues["TCID-1"].labels


def test_unresolvable_lark_identity_is_a_card_failure_and_the_urgent_rule_still_runs():
    world = World(notification_issue(severity="S1"))
    world.lark.open_ids = {}

    ex = world.run()

    context = card_context(ex)
    assert context["card_status"] == "failed" and world.lark.sends == []
    urgent = ex.rule_executions[1].action_executions[0].context["urgent"]
    assert urgent["urgent_status"] == "skipped"
    assert world.page.calls == [("plan", 7), ("execute", 7)]  # the phone channel goes on


def test_comment_failure_is_a_warning_and_the_label_is_still_consumed():
    world = World()
    world.jira.failing_writes.add("add_internal_comment")

    ex = world.run()

    context = card_context(ex)
    assert context["notification_comment_status"] == "failed"
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert LABEL not in world.jira.issues["TCID-1"].labels


RATE_LIMITED = IntegrationError("jira answered 429", status=429, service="jira", retry_after=30)


def test_a_comment_refused_by_a_rate_limit_is_written_once_after_the_wait():
    world = World()
    world.jira.fail_writes("add_internal_comment", RATE_LIMITED)

    parked = world.run()

    context = card_context(parked)
    assert not parked.status.terminal and context["retries"] == 1
    assert "429" in context["retry_reason"] and "notification_comment_phase" not in context
    assert len(world.lark.sends) == 1 and world.comments() == []
    world.clock.advance(30)
    ex = world.run(parked)

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert len(world.lark.sends) == 1  # the card is not sent again
    assert len(world.comments()) == 1
    assert card_context(ex)["notification_comment_status"] == "written"
    assert LABEL not in world.jira.issues["TCID-1"].labels


def test_a_label_removal_kept_from_jira_by_a_passing_fault_is_tried_again():
    world = World()
    world.jira.fail_writes("edit_labels", IntegrationError("jira answered 503", status=503,
                                                           service="jira"))

    parked = world.run()

    assert not parked.status.terminal
    assert LABEL in world.jira.issues["TCID-1"].labels
    world.clock.advance(5)
    ex = world.run(parked)

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert LABEL not in world.jira.issues["TCID-1"].labels
    assert card_context(ex)["label_phase"] == "removed"
    assert len(world.lark.sends) == 1 and len(world.comments()) == 1


def test_an_urgent_card_never_waits_for_a_refused_jira_write():
    """The App-urgent and the pages come next: the comment is a warning, as before."""
    world = World(notification_issue(severity="S1"))
    world.jira.fail_writes("add_internal_comment", RATE_LIMITED)

    ex = world.run()

    context = card_context(ex)
    assert context["notification_comment_status"] == "failed" and "retries" not in context
    assert world.page.calls == [("plan", 7), ("execute", 7)]  # the phone channel goes on


@pytest.mark.parametrize("target", [None, replace(ALICE, active=False),
                                    replace(ALICE, account_id=""), replace(ALICE, email="")])
def test_invalid_target_records_a_warning_consumes_the_label_and_terminates(target):
    world = World(notification_issue(assignee=target, severity="S1"))

    ex = world.run()

    context = card_context(ex)
    assert context["outcome"] == "target_invalid" and context["warnings"]
    assert world.lark.sends == [] and world.comments() == []
    assert LABEL not in world.jira.issues["TCID-1"].labels
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert [a.status for a in ex.rule_executions[1].action_executions] == [
        ActionStatus.SKIPPED, ActionStatus.SKIPPED]  # terminate: no urgent, no page


# -- the guarded label consume -------------------------------------------------------------


class ChangeOn:
    """Jira whose issue changes right after the n-th load (a concurrent reassignment)."""

    def __init__(self, jira: FakeJira, after_loads: int, **changes):
        self.jira, self.after, self.changes = jira, after_loads, changes

    def __getattr__(self, name):
        return getattr(self.jira, name)

    def load_issue(self, key):
        loaded = self.jira.load_issue(key)
        self.after -= 1
        if self.after == 0:
            self.jira.put(replace(self.jira.issues[key], **self.changes))
        return loaded

    def edit_labels(self, key, add=(), remove=()):
        return self.jira.edit_labels(key, add=add, remove=remove)


def test_target_changed_before_the_delete_keeps_the_label_and_terminates():
    world = World(notification_issue(severity="S1"))
    world.jira.put(replace(world.jira.issues["TCID-1"], assignee=BOB))
    snapshot = notification_issue(severity="S1")  # the RunExecution snapshot still says Alice
    behavior = Behavior(world.registry, world.checkpoints, world.clock.now, world.ports())
    ex = world.execution
    while behavior.step(ex, snapshot).kind is StepKind.ADVANCED:
        pass

    context = card_context(ex)
    assert context["label_phase"] == "kept"
    assert LABEL in world.jira.issues["TCID-1"].labels
    assert world.jira.calls("edit_labels") == [] and world.triggers.ensured == []
    assert context["outcome"] == "stale"
    assert ex.rule_executions[1].action_executions[0].status is ActionStatus.SKIPPED


@pytest.mark.parametrize("changes,seen", [
    ({"assignee": BOB}, "target changed"),
    ({"severity": "S1"}, "urgency changed")])
def test_change_seen_after_the_delete_restores_the_label_and_ensures_a_wake_up(changes, seen):
    world = World()
    jira = ChangeOn(world.jira, after_loads=1, **changes)  # changes right after the pre-check

    ex = world.run(jira=jira)

    context = card_context(ex)
    assert context["label_check"] == {"after_delete": seen}
    assert (context["label_phase"], context["trigger_phase"]) == ("restored", "ensured")
    assert LABEL in world.jira.issues["TCID-1"].labels
    assert world.triggers.ensured == [("jira_assignment_assignee", "TCID-1")]


def test_urgency_change_within_the_same_class_is_no_real_change():
    world = World(notification_issue(severity="S1"))
    jira = ChangeOn(world.jira, after_loads=1, severity="S2 - Significant Impact")

    ex = world.run(jira=jira)

    assert card_context(ex)["label_check"] == {"after_delete": "unchanged"}
    assert LABEL not in world.jira.issues["TCID-1"].labels
    assert world.triggers.ensured == []


def test_a_wake_up_that_cannot_be_ensured_is_a_warning():
    world = World()
    jira = ChangeOn(world.jira, after_loads=1, assignee=BOB)

    ex = world.run(jira=jira, triggers=NotConfiguredTriggers())  # no outbox

    context = card_context(ex)
    assert context["trigger_phase"] == "failed" and ex.status is ExecutionStatus.SUCCEEDED
    assert LABEL in world.jira.issues["TCID-1"].labels


# -- crash and restart at every external call -------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_card_started_without_a_result_is_never_sent_again(when):
    world = World()
    with pytest.raises(Crash):
        world.run(lark=Crashing(world.lark, "send_card", when))
    assert card_context(world.checkpoints.last)["card_phase"] == "started"

    ex = world.run(world.restart())

    context = card_context(ex)
    assert len(world.lark.sends) == (1 if when == "after" else 0)
    assert (context["card_status"], context["card_phase"]) == ("unknown", "finished")
    assert world.comments() == []  # an unknown card gets no "sent" comment
    assert LABEL not in world.jira.issues["TCID-1"].labels
    assert ex.status is ExecutionStatus.SUCCEEDED


@pytest.mark.parametrize("when", ["before", "after"])
def test_comment_started_without_a_result_is_never_written_again(when):
    world = World()
    with pytest.raises(Crash):
        world.run(jira=Crashing(world.jira, "add_internal_comment", when))

    ex = world.run(world.restart())

    context = card_context(ex)
    assert len(world.comments()) == (1 if when == "after" else 0)
    assert context["notification_comment_status"] == "unknown"
    assert len(world.lark.sends) == 1 and context["card_status"] == "sent"
    assert LABEL not in world.jira.issues["TCID-1"].labels


@pytest.mark.parametrize("when", ["before", "after"])
def test_crash_around_the_label_delete_redoes_the_guarded_consume(when):
    world = World()
    with pytest.raises(Crash):
        world.run(jira=Crashing(world.jira, "edit_labels", when))
    assert card_context(world.checkpoints.last)["label_phase"] == "remove_started"

    ex = world.run(world.restart())

    context = card_context(ex)
    assert context["label_phase"] == "removed"
    assert context["label_check"] == {"after_delete": "unchanged"}
    assert LABEL not in world.jira.issues["TCID-1"].labels
    assert len(world.lark.sends) == 1 and len(world.comments()) == 1


@pytest.mark.parametrize("method,nth", [("edit_labels", 2), ("load_issue", 2)])
def test_crash_before_the_post_check_redoes_it_and_restores_the_label(method, nth):
    world = World()
    jira = ChangeOn(world.jira, after_loads=1, assignee=BOB)
    with pytest.raises(Crash):
        world.run(jira=Crashing(jira, method, "before", nth))

    ex = world.run(world.restart())

    context = card_context(ex)
    assert (context["label_phase"], context["trigger_phase"]) == ("restored", "ensured")
    assert LABEL in world.jira.issues["TCID-1"].labels
    assert len(world.lark.sends) == 1 and len(world.comments()) == 1


@pytest.mark.parametrize("when", ["before", "after"])
def test_crash_around_ensuring_the_wake_up_ensures_it_again(when):
    world = World()
    jira = ChangeOn(world.jira, after_loads=1, assignee=BOB)
    with pytest.raises(Crash):
        world.run(jira=jira,
                  triggers=Crashing(world.triggers, "ensure_reserved_trigger", when))
    assert card_context(world.checkpoints.last)["trigger_phase"] == "required"

    ex = world.run(world.restart())

    # a duplicate wake-up is allowed, a missing one is not
    assert len(world.triggers.ensured) == (2 if when == "after" else 1)
    assert card_context(ex)["trigger_phase"] == "ensured"
    assert len(world.lark.sends) == 1 and len(world.jira.calls("edit_labels")) == 2


def test_dry_run_plans_without_any_external_call():
    world = World()
    world.execution.mode = ExecutionMode.DRY_RUN

    ex = world.run()

    assert card_context(ex)["card_phase"] == "prepared"
    assert world.lark.sends == [] and world.jira.writes == []


# -- the escalation slot seen by the card -----------------------------------------------------


def _slot(intent_state: str | None, to: str, marker: str | None, owner: int = 99) -> dict:
    intent = None if intent_state is None else {
        "owner_execution_id": owner, "from_account_id": "acc-zed", "to_account_id": to,
        "to_email": "x@example.com", "state": intent_state}
    return {"escalation_intent": intent, "auto_escalated_to_account_id": marker}


def test_card_for_a_manually_chosen_target_clears_the_marker_of_an_earlier_hop():
    world = World()  # the target is now Alice (D): Bob (B) had been escalated to before
    world.contexts.states["TCID-1"] = {"assignee": _slot("applied", "acc-bob", "acc-bob")}

    ex = world.run()

    assert world.contexts.slot("TCID-1", "assignee") is None  # Alice gets her own hop
    assert card_context(ex)["outcome"] == "sent"


def test_card_for_the_escalated_leader_keeps_and_completes_the_marker():
    world = World()  # Alice is the leader an earlier hop wrote; its marker was never saved
    world.contexts.states["TCID-1"] = {"assignee": _slot("prepared", "acc-alice", None)}

    world.run()

    slot = world.contexts.slot("TCID-1", "assignee")
    assert slot["auto_escalated_to_account_id"] == "acc-alice"  # no Grand Leader for Alice
    assert slot["escalation_intent"]["state"] == "applied"


def test_card_leaves_another_executions_pending_intent_to_its_owner():
    world = World()
    pending = _slot("prepared", "acc-bob", None)
    world.contexts.states["TCID-1"] = {"assignee": copy.deepcopy(pending)}

    world.run()

    assert world.contexts.slot("TCID-1", "assignee") == pending  # only its owner reconciles


def test_an_unreadable_escalation_slot_warns_but_never_holds_up_the_card():
    world = World()

    class Down(FakeContexts):
        def find(self, issue_key):
            raise IntegrationError("database unavailable", service="contexts")

    ex = world.run(contexts=Down())

    context = card_context(ex)
    assert context["card_status"] == "sent" and len(world.lark.sends) == 1
    assert any("escalation state" in warning for warning in context["warnings"])
