"""``escalate_assignment_to_leader`` end to end on the real runtime and database (docs/design.md,
"The escalation slot"): three timeouts, one hop to the direct leader, the leader's own workflow
woken by the trigger poll and never escalated further, reconcile by the owner after a restart.

People: Alice's direct leader is Bob, Bob's is Carol (the Grand Leader: never written), Dave's
is Erin, Erin's is Frank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from tests.domain.test_notification_card import ALICE, BOB, LABEL, SEND, SEVERITY
from tests.domain.test_notification_page import PENDING, POLL, TIMEOUT, page
from tests.fakes import FakeDirectory, FakeLark, issue
from tests.harness import Harness, rule
from ticket_dispatcher.actors.execution import load_backoff
from ticket_dispatcher.actors.runtime import Runtime
from ticket_dispatcher.domain.behavior import Behavior
from ticket_dispatcher.domain.execution import Execution, ExecutionStatus, TriggerStatus
from ticket_dispatcher.domain.model import JiraUser
from ticket_dispatcher.domain.ports import DirectoryUser, Ports
from ticket_dispatcher.errors import CallAbandoned, Conflict, DispatcherError

CAROL = JiraUser("acc-carol", "carol@example.com", "Carol")
DAVE = JiraUser("acc-dave", "dave@example.com", "Dave")
ERIN = JiraUser("acc-erin", "erin@example.com", "Erin")
FRANK = JiraUser("acc-frank", "frank@example.com", "Frank")
PEOPLE = (ALICE, BOB, CAROL, DAVE, ERIN, FRANK)
LEADERS = {"alice@example.com": "bob@example.com", "bob@example.com": "carol@example.com",
           "dave@example.com": "erin@example.com", "erin@example.com": "frank@example.com"}

ASSIGNEE, L2 = "jira_assignment_assignee", "jira_assignment_l2_assignee"
L2_LABEL = "notify-l2-assignee"
SEND_L2 = {"type": "send_assignment_notification",
           "send_assignment_notification": {"role": "l2_assignee", "label": L2_LABEL}}
ESCALATE = {"type": "escalate_assignment_to_leader"}
ESCALATION_INDEX = 4  # urgent, page 1, page 2, page 3, escalate
RUN_OUT_STEPS = 4  # three whole ACK waits, and a margin


class RecordingDirectory(FakeDirectory):
    """Core, recording whose direct leader was asked for."""

    def __init__(self):
        super().__init__(users={u.email: DirectoryUser(u.email, u.display_name)
                                for u in PEOPLE}, leaders=dict(LEADERS))
        self.leader_lookups: list[str] = []
        self.on_leader: Callable[[], None] | None = None

    def leader(self, email: str) -> DirectoryUser | None:
        self.leader_lookups.append(email)
        if self.on_leader is not None:
            self.on_leader()
        return super().leader(email)


class EnsuredTriggers:
    """The store's trigger outbox (the service's ``TriggerIntake``), recording each wake-up."""

    def __init__(self, triggers):
        self._triggers = triggers
        self.ensured: list[tuple[str, str]] = []

    def ensure_reserved_trigger(self, source, issue_key, now) -> None:
        self.ensured.append((source, issue_key))
        self._triggers.ensure_reserved_trigger(source, issue_key, now)


class Slots:
    """The store's context repository as the ``NotificationState`` port, with two hooks:
    ``after_prepared`` runs once an intent has been stored ``prepared``; ``fail_applied``
    makes the update that marks an intent ``applied`` fail inside its transaction."""

    def __init__(self, contexts):
        self._contexts = contexts
        self.after_prepared: Callable[[], None] | None = None
        self.fail_applied = False

    def find(self, issue_key):
        return self._contexts.find(issue_key)

    def update_notification_slot(self, issue_key, role, mutate, now):
        def checked(slot):
            new = mutate(slot)
            if self.fail_applied and _state(new) == "applied":
                self.fail_applied = False
                raise DispatcherError("the database refused the checkpoint")
            return new

        context = self._contexts.update_notification_slot(issue_key, role, checked, now)
        if _state(context.assignment_notification_state.get(role)) == "prepared" and \
                self.after_prepared is not None:
            hook, self.after_prepared = self.after_prepared, None
            hook()
        return context


def _state(slot: dict | None) -> str | None:
    return ((slot or {}).get("escalation_intent") or {}).get("state")


class EscalationHarness(Harness):
    """The harness with Lark, the trigger outbox and the context repository wired in."""

    def __init__(self, store, **config):
        super().__init__(store, NOTIFICATIONS_ENABLED="true", **config)
        self.directory = RecordingDirectory()
        self.lark = FakeLark({u.email: f"ou_{u.email.split('@')[0]}" for u in PEOPLE})
        self.triggers = EnsuredTriggers(self.store.triggers)
        self.slots = Slots(self.store.contexts)
        for user in PEOPLE:
            self.jira.users[user.account_id] = user

    def start(self) -> EscalationHarness:
        ports = Ports(jira=self.jira, core=self.directory, oncall=self.oncall,
                      engineers=self.store.engineers, lark=self.lark, triggers=self.triggers,
                      contexts=self.slots, maintenance=self.maintenance())
        self.runtime = Runtime(self.config, self.store, self.clock, ports=ports,
                               registry=self.registry)
        self.runtime.start()
        return self

    def workflow_policy(self, send: dict = SEND, source: str = ASSIGNEE, label: str = LABEL):
        """A Severity policy: the card, then urgent, three pages and the escalation."""
        return self.policy(rule(send, name="send", priority=10, on_success="continue"),
                           rule({"type": "mark_assignment_message_urgent"}, page(1), page(2),
                                page(3), ESCALATE, name="urgent", priority=20, when=SEVERITY),
                           source_in=(source,), labels=(label,))


@pytest.fixture
def world(store):
    harness = EscalationHarness(store).start()
    harness.workflow_policy()
    yield harness
    harness.stop()


# -- driving ------------------------------------------------------------------------------------


def put(h, **changes) -> None:
    values = dict(assignee=ALICE, labels=(LABEL,), severity="S1", priority=None,
                  status=PENDING)
    values.update(changes)
    h.jira.put(issue(**values))


def change(h, **changes) -> None:
    h.jira.put(replace(h.jira.issues["TCID-1"], **changes))


def automation(h, source: str = ASSIGNEE, label: str = LABEL) -> int | None:
    """Jira Automation on a role change or an urgent transition: the role label, then
    the reserved-source trigger; the new execution's ID, if one was created."""
    if label not in h.jira.issues["TCID-1"].labels:
        change(h, labels=(*h.jira.issues["TCID-1"].labels, label))
    trigger = h.post_trigger(source=source)
    return trigger.execution_ids[0] if trigger.execution_ids else None


def run_out(h, execution_id: int) -> Execution:
    """Let the ACK waits expire, a whole wait at a time (its parked poll wakes late and finds
    the deadline passed), until the execution ends."""
    for _ in range(RUN_OUT_STEPS):
        if h.execution(execution_id).status.terminal:
            break
        h.advance(TIMEOUT)
    ex = h.execution(execution_id)
    assert ex.status.terminal, "the workflow did not end"
    return ex


def paged_three_times(h) -> int:
    """A workflow started and its three pages made, the last one's wait running: its
    execution's id."""
    put(h)
    execution_id = automation(h)
    for _ in range(RUN_OUT_STEPS):
        if len(h.oncall.pages) == 3:
            break
        h.advance(TIMEOUT)
    assert len(h.oncall.pages) == 3
    return execution_id


def next_execution(h, seen: int) -> Execution:
    """Advance by trigger polls until an execution after ``seen`` exists (the ensured
    wake-up, possibly deferred once while the previous workflow was still live)."""
    for _ in range(4):
        newer = [e for e in h.executions() if e.id > seen]
        if newer:
            assert len(newer) == 1, f"one wake-up, yet executions {[e.id for e in newer]}"
            return newer[0]
        h.advance(h.config.trigger_poll_interval.total_seconds())
    raise AssertionError("no new execution was created")


def escalation(ex: Execution) -> dict:
    return ex.rule_executions[1].action_executions[ESCALATION_INDEX].context["escalation"]


def slot(h, role: str = "assignee") -> dict | None:
    return h.store.contexts.get("TCID-1").assignment_notification_state.get(role)


def applied(owner: int, frm: JiraUser, to: JiraUser) -> dict:
    return {"escalation_intent": {"owner_execution_id": owner, "from_account_id": frm.account_id,
                                  "to_account_id": to.account_id, "to_email": to.email,
                                  "state": "applied"},
            "auto_escalated_to_account_id": to.account_id}


def role_writes(h) -> list[tuple]:
    return h.jira.calls("assign") + h.jira.calls("set_l2_assignee")


def paged(h) -> list[str]:
    return [email for email, *_ in h.oncall.pages]


def cards_to(h, person: JiraUser) -> int:
    return sum(open_id == f"ou_{person.email.split('@')[0]}" for open_id, _, _ in h.lark.sends)


def escalate_alice(h) -> Execution:
    """Alice's workflow to its end: three pages without an ACK, then the hop to Bob."""
    put(h)
    ex = run_out(h, automation(h))
    assert escalation(ex)["outcome"] == "escalated"
    return ex


# -- one hop ----------------------------------------------------------------------------------


def test_three_timeouts_write_only_the_direct_leader_and_wake_the_leaders_workflow(world):
    ex = escalate_alice(world)

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert paged(world) == ["alice@example.com"] * 3
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]
    assert world.jira.issues["TCID-1"].assignee == BOB
    assert LABEL in world.jira.issues["TCID-1"].labels  # re-added after Alice's consumed it
    assert world.triggers.ensured == [(ASSIGNEE, "TCID-1")]
    assert slot(world) == applied(ex.id, ALICE, BOB)
    assert world.directory.leader_lookups == ["alice@example.com"]
    assert escalation(ex)["leader"] == {"email": "bob@example.com", "account_id": "acc-bob"}


def test_the_leaders_woken_workflow_is_notified_and_paged_but_never_goes_to_the_grand_leader(
        world):
    first = escalate_alice(world)

    leader = run_out(world, next_execution(world, first.id).id)

    assert leader.trigger_id != first.trigger_id  # the ensured wake-up, found by the poll
    assert world.trigger(leader.trigger_id).source == ASSIGNEE
    assert leader.status is ExecutionStatus.SUCCEEDED
    assert cards_to(world, BOB) == 1
    assert world.lark.urgents[-1] == (f"om_td-{leader.id}-0-0", "ou_bob")
    assert paged(world) == ["alice@example.com"] * 3 + ["bob@example.com"] * 3
    assert (escalation(leader)["outcome"], escalation(leader)["reason"]) == (
        "blocked", "no_grand_leader")
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]
    assert world.directory.leader_lookups == ["alice@example.com"]  # Bob's leader never asked for
    assert world.triggers.ensured == [(ASSIGNEE, "TCID-1")]
    assert LABEL not in world.jira.issues["TCID-1"].labels  # consumed by Bob's workflow
    assert slot(world) == applied(first.id, ALICE, BOB)


def test_the_leader_urgent_again_later_is_notified_and_paged_again_but_still_not_escalated(
        world):
    first = escalate_alice(world)
    run_out(world, next_execution(world, first.id).id)
    change(world, severity="S3")  # downgraded, then urgent again: Automation fires
    change(world, severity="S1")

    again = run_out(world, automation(world))

    assert cards_to(world, BOB) == 2
    assert paged(world)[-3:] == ["bob@example.com"] * 3 and len(paged(world)) == 9
    assert (escalation(again)["outcome"], escalation(again)["reason"]) == (
        "blocked", "no_grand_leader")
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]
    assert slot(world) == applied(first.id, ALICE, BOB)


def test_a_manual_change_to_another_target_clears_the_marker_and_allows_one_more_hop(world):
    first = escalate_alice(world)
    run_out(world, next_execution(world, first.id).id)
    change(world, assignee=DAVE)  # a person reassigns Bob's ticket to Dave

    dave = run_out(world, automation(world))
    erin = run_out(world, next_execution(world, dave.id).id)

    assert cards_to(world, DAVE) == 1 and paged(world).count("dave@example.com") == 3
    assert escalation(dave)["outcome"] == "escalated"
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob"),
                                  ("assign", "TCID-1", "acc-erin")]
    # whoever cleared Bob's marker (the card or the escalation guard), only Erin's is left
    assert slot(world) == applied(dave.id, DAVE, ERIN)
    assert (escalation(erin)["outcome"], escalation(erin)["reason"]) == (
        "blocked", "no_grand_leader")
    assert "erin@example.com" not in world.directory.leader_lookups


@pytest.mark.parametrize("setup,reason", [
    (lambda h: h.directory.leaders.pop("alice@example.com"), "no direct leader"),
    (lambda h: h.directory.users.update(
        {"bob@example.com": DirectoryUser("bob@example.com", active=False)}),
     "the leader is inactive"),
    (lambda h: h.directory.leaders.update({"alice@example.com": "alice@example.com"}),
     "the leader is the target"),
    (lambda h: h.jira.users.pop("acc-bob"), "the leader has no Jira account"),
], ids=["empty", "inactive", "self", "unmappable"])
def test_an_empty_inactive_self_or_unmappable_leader_writes_nothing_to_jira(world, setup,
                                                                           reason):
    setup(world)
    put(world)

    ex = run_out(world, automation(world))
    world.advance(3 * POLL)  # nothing was woken up

    assert ex.status is ExecutionStatus.SUCCEEDED
    assert (escalation(ex)["outcome"], escalation(ex)["reason"]) == ("no_leader", reason)
    assert role_writes(world) == [] and world.jira.issues["TCID-1"].assignee == ALICE
    assert world.triggers.ensured == [] and LABEL not in world.jira.issues["TCID-1"].labels
    assert slot(world) is None
    assert [e.id for e in world.executions()] == [ex.id]


# -- reconcile after a restart ----------------------------------------------------------------


def die_in_assign(h, landed: bool, then: Callable[[], None] | None = None) -> None:
    """The next role write is cut by a shutdown: ``landed`` says whether Jira applied it."""
    original = h.jira.assign

    def assign(key, account_id):
        h.jira.assign = original
        if landed:
            original(key, account_id)
        if then is not None:
            then()
        raise CallAbandoned("jira assign: the service is shutting down")

    h.jira.assign = assign


@pytest.mark.parametrize("landed", [False, True], ids=["current_is_from", "current_is_to"])
def test_a_prepared_intent_is_reconciled_by_its_owner_after_a_restart_with_one_write(world,
                                                                                    landed):
    put(world)
    die_in_assign(world, landed)
    first = automation(world)
    run_out_until_escalating(world, first)
    assert _state(slot(world)) == "prepared"
    world.directory.leaders["alice@example.com"] = "dave@example.com"  # never asked again

    world.restart()
    world.wait_idle()

    ex = world.execution(first)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert escalation(ex)["outcome"] == "escalated"
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]  # once, either way
    assert world.jira.issues["TCID-1"].assignee == BOB
    assert slot(world) == applied(first, ALICE, BOB)
    assert world.directory.leader_lookups == ["alice@example.com"]
    assert world.triggers.ensured == [(ASSIGNEE, "TCID-1")]
    leader = run_out(world, next_execution(world, first).id)
    assert escalation(leader)["reason"] == "no_grand_leader" and len(role_writes(world)) == 1


def test_a_prepared_intent_whose_role_someone_else_took_is_superseded_not_overwritten(world):
    put(world)
    die_in_assign(world, landed=False, then=lambda: change(world, assignee=DAVE))
    first = automation(world)
    run_out_until_escalating(world, first)

    world.restart()
    world.wait_idle()

    ex = world.execution(first)
    assert (escalation(ex)["outcome"], ex.status) == ("superseded", ExecutionStatus.SUCCEEDED)
    assert role_writes(world) == [] and world.jira.issues["TCID-1"].assignee == DAVE
    assert slot(world) == {"escalation_intent": None, "auto_escalated_to_account_id": None}
    assert world.triggers.ensured == []


def run_out_until_escalating(h, execution_id: int) -> None:
    """Through the three waits; the escalation was cut in its Jira write and stays
    ``executing`` for boot recovery."""
    for _ in range(RUN_OUT_STEPS):
        h.advance(TIMEOUT)
        if h.jira.issues["TCID-1"].assignee != ALICE or _state(slot(h)) == "prepared":
            break
    ex = h.execution(execution_id)
    assert ex.status is ExecutionStatus.EXECUTING and escalation(ex)["intent"]


def test_a_write_that_landed_without_its_marker_is_completed_by_the_leaders_workflow(world):
    """The owner failed at the marker checkpoint after its Jira write: Bob's own
    workflow completes the marker and never writes Carol."""
    world.slots.fail_applied = True
    put(world)

    first = run_out(world, automation(world))
    assert first.status is ExecutionStatus.FAILED
    assert world.jira.issues["TCID-1"].assignee == BOB
    assert _state(slot(world)) == "prepared" and world.triggers.ensured == []
    leader = run_out(world, automation(world))  # Automation saw the assignee change

    assert cards_to(world, BOB) == 1 and paged(world).count("bob@example.com") == 3
    assert (escalation(leader)["outcome"], escalation(leader)["reason"]) == (
        "blocked", "no_grand_leader")
    assert slot(world) == applied(first.id, ALICE, BOB)
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]
    assert world.directory.leader_lookups == ["alice@example.com"]


def test_a_non_owner_meeting_a_pending_intent_fails_closed(world):
    pending = {"escalation_intent": {"owner_execution_id": 999, "from_account_id": "acc-alice",
                                     "to_account_id": "acc-bob", "to_email": "bob@example.com",
                                     "state": "prepared"},
               "auto_escalated_to_account_id": None}
    world.store.contexts.update_notification_slot("TCID-1", "assignee", lambda _: pending,
                                                  world.clock.now())
    put(world)

    ex = run_out(world, automation(world))
    world.advance(3 * POLL)

    assert (escalation(ex)["outcome"], escalation(ex)["reason"]) == ("blocked",
                                                                    "pending_intent")
    assert escalation(ex)["warnings"]
    assert role_writes(world) == [] and world.jira.calls("find_user_by_email") == []
    assert world.directory.leader_lookups == []
    assert world.triggers.ensured == [] and [e.id for e in world.executions()] == [ex.id]
    assert slot(world) == pending


# -- duplicate wake-ups and manual changes ----------------------------------------------------


@pytest.mark.parametrize("arrival", ["after_the_hop", "with_the_next_poll"])
def test_the_ensured_wake_up_and_a_duplicate_automation_trigger_notify_the_leader_once(world,
                                                                                      arrival):
    first = escalate_alice(world)

    # Automation saw the assignee change; the label is already there
    if arrival == "after_the_hop":
        automation(world)
    else:
        world.runtime.accept_trigger(ASSIGNEE, "TCID-1")
        world.advance(world.config.trigger_poll_interval.total_seconds())
    leader = next_execution(world, first.id)
    run_out(world, leader.id)
    world.advance(3 * POLL)  # every deferred duplicate has had its turn

    assert [e.id for e in world.executions()] == [first.id, leader.id]
    assert cards_to(world, BOB) == 1 and paged(world).count("bob@example.com") == 3
    assert world.store.triggers.recoverable() == []  # no wake-up left pending
    triggers = [world.trigger(trigger_id) for trigger_id in range(1, 4)]
    assert [t.source for t in triggers] == [ASSIGNEE] * 3
    assert all(t.status is TriggerStatus.COMPLETED for t in triggers)


@pytest.mark.parametrize("moment", ["during_the_leader_lookup", "after_the_intent_is_stored"])
def test_a_manual_reassignment_before_the_guarded_read_is_not_overwritten(world, moment):
    def reassign() -> None:
        change(world, assignee=DAVE)

    if moment == "during_the_leader_lookup":
        world.directory.on_leader = reassign
    else:
        world.slots.after_prepared = reassign
    put(world)

    ex = run_out(world, automation(world))

    assert escalation(ex)["outcome"] == "superseded"
    assert role_writes(world) == [] and world.jira.issues["TCID-1"].assignee == DAVE
    assert slot(world) == {"escalation_intent": None, "auto_escalated_to_account_id": None}
    assert world.triggers.ensured == []


# -- both roles at once -----------------------------------------------------------------------


def test_assignee_and_l2_escalations_at_the_same_time_keep_both_slots(world):
    world.workflow_policy(SEND_L2, L2, L2_LABEL)
    put(world, l2_assignee=DAVE, labels=(LABEL, L2_LABEL))
    assignee = world.runtime.accept_trigger(ASSIGNEE, "TCID-1")
    l2 = world.runtime.accept_trigger(L2, "TCID-1")
    world.wait_idle()
    [assignee_id] = world.trigger(assignee.id).execution_ids
    [l2_id] = world.trigger(l2.id).execution_ids

    run_out(world, assignee_id)
    run_out(world, l2_id)

    assert sorted(role_writes(world)) == [("assign", "TCID-1", "acc-bob"),
                                          ("set_l2_assignee", "TCID-1", "acc-erin")]
    assert slot(world, "assignee") == applied(assignee_id, ALICE, BOB)
    assert slot(world, "l2_assignee") == applied(l2_id, DAVE, ERIN)
    assert sorted(world.triggers.ensured) == [(ASSIGNEE, "TCID-1"), (L2, "TCID-1")]


def test_jira_down_at_the_last_deadline_holds_the_escalation_until_jira_answers(world):
    """The interleaving: page 3's wait reaches its deadline while Jira fails. The page goes on
    without the issue (its timeout); the escalation after it writes Jira, so it waits for the
    issue's load retry instead of running on the page's stand-in, and escalates once Jira is
    back."""
    execution_id = paged_three_times(world)
    world.jira.fail_next("TCID-1", times=1000)

    world.advance(TIMEOUT)

    ex = world.execution(execution_id)
    page_3 = ex.rule_executions[1].action_executions[ESCALATION_INDEX - 1].context["page"]
    assert page_3["outcome"] == "timeout"
    assert ex.status is ExecutionStatus.EXECUTING and ex.load_attempts >= 1
    assert role_writes(world) == [] and "outcome" not in escalation(ex)

    world.jira.failures.clear()
    world.advance(load_backoff(ex.load_attempts).total_seconds())

    ex = world.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED and escalation(ex)["outcome"] == "escalated"
    assert role_writes(world) == [("assign", "TCID-1", "acc-bob")]


def test_an_execution_ended_elsewhere_while_this_one_stood_in_for_jira_stops_quietly(
        world, monkeypatch):
    """The interleaving: page 3's wait ran out while Jira failed, so it went on with the
    issue's stand-in; before the escalation's step saves that, another replica (whose lease
    took over meanwhile) ended the execution. The save is refused: this run stops, as at any
    step of an execution ended elsewhere; it is no crash to restart."""
    execution_id = paged_three_times(world)
    world.jira.fail_next("TCID-1", times=1000)
    flush = Behavior.flush

    def ended_elsewhere(self):
        raise Conflict(f"execution {execution_id} is no longer running")

    monkeypatch.setattr(Behavior, "flush", ended_elsewhere)
    world.advance(TIMEOUT)
    monkeypatch.setattr(Behavior, "flush", flush)

    ex = world.execution(execution_id)
    assert ex.restart_count == 0  # not reported as a crash
    assert role_writes(world) == []
